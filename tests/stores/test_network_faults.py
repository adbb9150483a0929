"""Network faults between tether and Postgres, injected by a TCP proxy (`tests._faultproxy`).

For each: callers get a clear `StoreUnavailable` within the bounds the store
sets (connect_timeout, command_timeout), nothing acknowledged is lost, no
decision is claimed twice or lost, nothing is written twice, and the store
works again once the network does.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.streams.text import TextReceiveStream
from tether.actors import Chain
from tether.runtime import AlreadyResumed, ExecutionWorker, LeaseHeld, Resume, RunResult, interrupt
from tether.stores import Lease, NewEntry, PostgresStore, StoreError, StoreUnavailable

from tests._faultproxy import FaultProxy
from tests._postgres import holding_lock
from tests.operator import _fleet_app as fleet_app
from tests.stores.test_postgres_group_commit import leases, stuck_first_append, wait_queued

TIMEOUTS = {"connect_timeout": 1.0, "command_timeout": 0.5}
ROOT = Path(__file__).resolve().parents[2]
BOUND = 10  # seconds a fault-bound wait may take here at the most (the timeouts, and a loaded machine)


@pytest.fixture
async def proxy(postgres_dsn: str) -> AsyncIterator[FaultProxy]:
    async with FaultProxy.to(postgres_dsn) as proxy:
        yield proxy


def through(proxy: FaultProxy, schema: str, **options: Any) -> PostgresStore:
    return PostgresStore(proxy.dsn, schema=schema, **{**TIMEOUTS, **options})


async def recover(chain: Chain, execution_id: str) -> RunResult:
    while True:
        try:
            return await chain.resume(execution_id)
        except LeaseHeld as held:  # the cut-off run's lease runs out first
            await anyio.sleep(held.seconds_left + 0.05)


async def test_a_black_hole_is_unavailable_within_the_timeouts_and_then_passes(
        proxy: FaultProxy, pg_schema: str) -> None:
    async with through(proxy, pg_schema) as store:
        assert await store.get_execution("none") is None
        proxy.black_hole()
        for _ in range(2):  # the first on its pooled connection (command_timeout), the next connecting
            with anyio.fail_after(BOUND), pytest.raises(StoreUnavailable, match="did not answer within"):
                await store.get_execution("none")
        proxy.heal()
        with anyio.fail_after(BOUND):
            assert await store.get_execution("none") is None


async def test_refused_and_reset_connections_are_unavailable_and_then_pass(
        proxy: FaultProxy, pg_schema: str) -> None:
    async with through(proxy, pg_schema) as store:
        assert await store.get_execution("none") is None
        proxy.refuse()
        assert await proxy.drop() >= 1
        with anyio.fail_after(BOUND), pytest.raises(StoreUnavailable):
            await store.get_execution("none")
        proxy.heal()
        with anyio.fail_after(BOUND):
            assert await store.get_execution("none") is None


async def test_a_paused_run_through_latency_and_jitter(proxy: FaultProxy, pg_schema: str) -> None:
    runs: Counter[str] = Counter()

    def node(name: str) -> Any:
        def step(state: dict[str, Any]) -> dict[str, Any]:
            runs[name] += 1
            return {name: True}
        step.__name__ = name
        return step

    def gate(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("approve", {"n": 1}).approved}

    proxy.latency(0.002, jitter=0.004)
    async with through(proxy, pg_schema, command_timeout=5.0) as store:
        chain = Chain("slow", [node("a"), node("b"), gate, node("c")], store=store)
        with anyio.fail_after(60):
            paused = await chain.run({}, execution_id="lat-1")
            assert paused.status == "paused"
            done = await chain.resume("lat-1", Resume(approved=True))
        assert done.status == "completed" and done.output["approved"] is True
        assert runs == {"a": 1, "b": 1, "c": 1}


@pytest.mark.parametrize("before", [True, False], ids=["unsent", "answer-lost"])
async def test_a_claim_cut_off_is_claimed_once(proxy: FaultProxy, postgres_dsn: str, pg_schema: str,
                                                before: bool) -> None:
    after: Counter[str] = Counter()

    def gate(state: dict[str, Any]) -> dict[str, Any]:
        decision = interrupt("approve", {})
        after["gate"] += 1
        return {"note": decision.model_extra["note"] if decision.model_extra else None}

    async with PostgresStore(postgres_dsn, schema=pg_schema) as direct:
        await Chain("cut", [gate], store=direct).run({}, execution_id="claim-1")
    async with through(proxy, pg_schema) as cut_off:
        chain = Chain("cut", [gate], store=cut_off, lease_seconds=1.0)
        cut = proxy.cut_after("CLAIM-MARK", before=before)
        with anyio.fail_after(BOUND), pytest.raises(StoreUnavailable):
            await chain.resume("claim-1", Resume(approved=True, note="CLAIM-MARK"))
        assert cut.is_set()
    async with PostgresStore(postgres_dsn, schema=pg_schema) as direct:
        chain = Chain("cut", [gate], store=direct, lease_seconds=1.0)
        if before:  # nothing reached the server: the approval waits, and a resume takes it
            [row] = await direct.list_pending()
            assert row.execution_id == "claim-1"
            done = await chain.resume("claim-1", Resume(approved=True, note="again"))
            assert done.output == {"note": "again"}
        else:  # the claim committed: a second resumer is refused, and recovery carries the first decision out
            with pytest.raises(AlreadyResumed):
                await chain.resume("claim-1", Resume(approved=True, note="second"))
            done = await recover(chain, "claim-1")
            assert done.output == {"note": "CLAIM-MARK"}
        assert done.status == "completed" and after["gate"] == 1
        assert await direct.list_pending() == []


async def test_a_suspension_cut_off_pauses_once_on_recovery(proxy: FaultProxy, postgres_dsn: str,
                                                            pg_schema: str) -> None:
    runs: Counter[str] = Counter()

    def first(state: dict[str, Any]) -> dict[str, Any]:
        runs["first"] += 1
        return {"first": True}

    def gate(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("approve", {"marker": "SUSPEND-MARK"}).approved}

    async with through(proxy, pg_schema) as cut_off:
        chain = Chain("suspend", [first, gate], store=cut_off, lease_seconds=1.0)
        cut = proxy.cut_after("SUSPEND-MARK")
        with anyio.fail_after(BOUND), pytest.raises(StoreError):
            await chain.run({}, execution_id="sus-1")
        assert cut.is_set()
    async with PostgresStore(postgres_dsn, schema=pg_schema) as direct:
        chain = Chain("suspend", [first, gate], store=direct, lease_seconds=1.0)
        paused = await recover(chain, "sus-1")
        assert paused.status == "paused"
        [row] = await direct.list_pending()  # one row, whether the cut suspension committed or not
        assert row.execution_id == "sus-1"
        done = await chain.resume("sus-1", Resume(approved=True))
        assert done.status == "completed" and runs["first"] == 1


async def test_a_group_commit_whose_answer_is_lost_writes_nothing_twice(
        proxy: FaultProxy, postgres_dsn: str, pg_schema: str) -> None:
    async with through(proxy, pg_schema, command_timeout=30.0) as store:
        first, *others = await leases(store, 6)
        outcomes: dict[str, list[int] | StoreError] = {}

        async def append(lease: Lease) -> None:
            label = "GROUP-MARK" if lease is others[2] else "w"
            try:
                outcomes[lease.execution_id] = await store.append(lease, [NewEntry(path="a", label=label)])
            except StoreError as exc:
                outcomes[lease.execution_id] = exc

        cut = proxy.cut_after("GROUP-MARK")
        with anyio.fail_after(60), holding_lock(
            postgres_dsn, pg_schema, "SELECT 1 FROM tether_executions WHERE id = 'ex-0' FOR UPDATE"
        ) as release:
            async with anyio.create_task_group() as tg:
                await stuck_first_append(store, postgres_dsn, pg_schema, first, tg)
                for lease in others:
                    tg.start_soon(append, lease)
                await wait_queued(store, len(others))
                release.set()
            await cut.wait()
    async with PostgresStore(postgres_dsn, schema=pg_schema) as direct:
        for lease in others:
            written = [e.label for e in await direct.read_journal(lease.execution_id)]
            assert len(written) == 1  # the batch committed; its answer was lost; it was not written again
            if isinstance(outcomes[lease.execution_id], list):
                assert outcomes[lease.execution_id] == [1]
            else:
                assert isinstance(outcomes[lease.execution_id], StoreUnavailable)


async def test_a_worker_cut_off_past_its_lease_is_fenced_while_another_finishes(
        proxy: FaultProxy, postgres_dsn: str, pg_schema: str) -> None:
    calls: Counter[str] = Counter()
    inside, cut_off_done = anyio.Event(), anyio.Event()

    def first(state: dict[str, Any]) -> dict[str, Any]:
        calls["first"] += 1
        return {"first": True}

    async def slow(state: dict[str, Any]) -> dict[str, Any]:
        calls["slow"] += 1
        if calls["slow"] == 1:  # the cut-off worker's run: it goes on, unaware, until the network is back
            inside.set()
            with anyio.move_on_after(BOUND):
                await cut_off_done.wait()
            return {"slow": "cut-off"}
        return {"slow": "other"}

    finished = anyio.Event()
    told_a: list[RunResult] = []
    async with PostgresStore(postgres_dsn, schema=pg_schema) as direct, through(proxy, pg_schema) as cut_off:
        chain = Chain("fenced", [first, slow], store=direct)
        await chain.start({}, execution_id="fence-1")
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                worker_a = ExecutionWorker(cut_off, [chain], lease_seconds=1.5, notify=False, poll_interval=0.05,
                                           on_result=told_a.append)
                async with worker_a:
                    tg.start_soon(worker_a.serve)
                    await inside.wait()
                    proxy.black_hole()  # worker A keeps running its node, its lease unrenewed
                    worker_b = ExecutionWorker(direct, [chain], lease_seconds=1.5, notify=False, poll_interval=0.05,
                                               on_result=lambda result: finished.set())
                    async with worker_b:
                        tg.start_soon(worker_b.serve)
                        await finished.wait()  # B took the lapsed lease over and finished
                        worker_b.stop()
                    proxy.heal()
                    cut_off_done.set()  # A's node returns now; its boundary must be refused
                    worker_a.stop()
        execution = await direct.get_execution("fence-1")
        assert execution is not None and execution.status == "completed"
        assert execution.result == {"first": True, "slow": "other"}
        handled = [e for e in await direct.read_journal("fence-1") if "slow" in e.label]
        assert all("cut-off" not in str(e.payload) for e in handled)  # A wrote nothing after it lost the lease
        assert calls == {"first": 1, "slow": 2}
        # A, fenced, reports the execution as it stands, not what its own run made.
        assert [(r.status, r.output) for r in told_a] in ([], [("completed", {"first": True, "slow": "other"})])


async def test_a_worker_started_while_the_database_refuses_waits_for_it(
        proxy: FaultProxy, postgres_dsn: str, pg_schema: str, tmp_path: Path, anyio_backend: str) -> None:
    effects = tmp_path / "effects.db"
    fleet_app.prepare(str(effects))
    proxy.refuse()  # a deploy during a database restart: the worker starts first
    url = f"{proxy.dsn}{'&' if '?' in proxy.dsn else '?'}schema={pg_schema}"
    worker = await anyio.open_process(
        [sys.executable, "-m", "tether.runtime.ops", "--store", url, "--backend", anyio_backend, "worker", "--app", "tests.operator._fleet_app:runners", "--poll-interval", "0.2", "--grace", "5"],
        env={**os.environ, "TETHER_FLEET_EFFECTS": str(effects)}, cwd=ROOT,
    )
    try:
        assert worker.stderr is not None
        log = TextReceiveStream(worker.stderr)
        told = ""
        with anyio.fail_after(BOUND):
            while "cannot start" not in told:
                told += await log.receive()
        assert "trying again in" in told and worker.returncode is None
        proxy.heal()
        async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
            fleet_app.batch.store = store
            await fleet_app.batch.start({"order": "w-1"}, execution_id="w-1", detach=True)
            async with store.watch("w-1") as watch:
                with anyio.fail_after(BOUND * 3):
                    while (found := await store.get_execution("w-1")) is None or not found.finished:
                        await watch.wait()
            assert found.status == "completed"
        worker.send_signal(signal.SIGTERM)
        with anyio.fail_after(BOUND * 3):
            assert await worker.wait() == 0
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()


async def test_tether_serve_answers_503_while_the_database_refuses_and_then_serves(
        proxy: FaultProxy, postgres_dsn: str, pg_schema: str, anyio_backend: str) -> None:
    async with PostgresStore(postgres_dsn, schema=pg_schema) as store:
        await store.setup()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proxy.refuse()  # the server starts during a database restart
    url = f"{proxy.dsn}{'&' if '?' in proxy.dsn else '?'}schema={pg_schema}"
    server = await anyio.open_process(
        [sys.executable, "-m", "tether.runtime.ops", "--store", url, "--backend", anyio_backend,
         "serve", "--port", str(port)], cwd=ROOT,
    )
    try:
        assert server.stderr is not None
        log, told = TextReceiveStream(server.stderr), ""
        with anyio.fail_after(BOUND * 3):
            while "unning on" not in told:  # uvicorn's and hypercorn's "Running on http://..."
                told += await log.receive()
        assert "answer 503 until it answers" in told
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            down = await client.get("/api/pending")
            assert down.status_code == 503, down.text
            assert down.headers["retry-after"] == "5" and "unavailable" in down.json()["detail"]
            assert (await client.get("/executions")).status_code == 503
            proxy.heal()
            assert (await client.get("/api/pending")).json() == []
        server.send_signal(signal.SIGTERM)
        with anyio.fail_after(BOUND * 3):
            await server.wait()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
