"""The blocking runtime: tether from plain threads, on SQLite files and Postgres, over both portal backends.

These tests are sync on purpose: a sync application's threads call the runtime,
and its event loop lives in the portal's thread. Every wait is on a thread
event, a barrier or a join, bounded so that a hang fails instead of stalling.
"""

from __future__ import annotations

import json
import socketserver
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import anyio
import pytest
from pydantic import ValidationError
from tether.actors import Chain
from tether.runtime import (
    AlreadyResumed,
    BlockingRuntime,
    ConfigurationError,
    ExecutionNotFound,
    Resume,
    UsageError,
    blocking,
    interrupt,
)
from tether.stores import SQLiteStore, Store, StoreUnavailable, open_store

from tests._postgres import admin_sql

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path
    from wsgiref.types import StartResponse

WAIT = 30  # seconds a thread may wait for another before the test fails: a bound, never a pace


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    """The portal's event loop backend (the tests themselves are sync)."""
    return str(request.param)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL of a fresh SQLite file, or of a Postgres schema of this test's own (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tether.db'}"
        return
    dsn: str = request.getfixturevalue("postgres_dsn")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"
    admin_sql(dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def in_store(url: str, backend: str, fn: Callable[[Store], Any]) -> Any:
    """Await ``fn(store)`` on a store of our own, opened afresh: what the database really holds."""

    async def read() -> Any:
        async with open_store(url) as store:
            return await fn(store)

    return anyio.run(read, backend=backend)


def approve(state: dict[str, Any]) -> dict[str, Any]:
    decision = interrupt("manager_approval", {"amount": state["amount"]})
    return {"approved": decision.approved, "approver": decision.metadata.get("approver")}


def charge(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": state["approved"]}


def refunds() -> Chain:
    return Chain("refund", [approve, charge])


def threads(target: Callable[[int], None], n: int) -> None:
    """Run ``target(i)`` in ``n`` threads at once and join them all."""
    started = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(WAIT)
        assert not thread.is_alive()


def test_run_to_completion(url: str, backend: str) -> None:
    chain = Chain("sum", [lambda state: {"total": state["a"] + state["b"]}])
    with blocking(url, backend=backend) as rt:
        result = rt.run(chain, {"a": 2, "b": 3}, execution_id="sum-1")
        assert result.status == "completed"
        assert result.output == {"a": 2, "b": 3, "total": 5}
        assert rt.execution("sum-1").status == "completed"
        again = rt.run(chain, {"a": 9, "b": 9}, execution_id="sum-1")  # the id is an idempotency key
        assert again.output == result.output
    stored = in_store(url, backend, lambda store: store.get_execution("sum-1"))
    assert stored.status == "completed"
    assert stored.result == {"a": 2, "b": 3, "total": 5}


def test_pause_then_resume_from_another_thread(url: str, backend: str) -> None:
    chain = refunds()
    with blocking(url, backend=backend) as rt:
        paused = rt.run(chain, {"amount": 50_000}, execution_id="refund-7")
        assert paused.status == "paused"
        assert paused.pending_interrupt is not None
        assert paused.pending_interrupt.agent_path == "chain:refund/node:approve"
        [waiting] = rt.pending()
        assert (waiting.execution_id, waiting.reason, waiting.context) == \
            ("refund-7", "manager_approval", {"amount": 50_000})

        outcome: list[Any] = []
        approver = threading.Thread(target=lambda: outcome.append(
            rt.resume(chain, "refund-7", Resume(approved=True, metadata={"approver": "alice"}),
                      path=waiting.agent_path)))
        approver.start()
        approver.join(WAIT)
        [done] = outcome
        assert done.status == "completed"
        assert done.output == {"amount": 50_000, "approved": True, "approver": "alice", "charged": True}
        assert rt.pending() == []
        assert rt.result("refund-7").output == done.output
    journal = in_store(url, backend, lambda store: store.read_journal("refund-7"))
    assert [e.path for e in journal if e.kind == "resumed"] == ["chain:refund/node:approve"]


def test_many_threads_run_at_once(url: str, backend: str) -> None:
    n = 12
    # Every run waits in its node until all n are in theirs: runs that were not
    # concurrent on the portal's loop would never fill the barrier.
    together = threading.Barrier(n, timeout=WAIT)

    def gather(state: dict[str, Any]) -> dict[str, Any]:
        together.wait()
        return {"gathered": True}

    chain = Chain("refund", [gather, approve, charge])
    outcomes: dict[int, list[str]] = {}
    with blocking(url, backend=backend) as rt:
        def one(i: int) -> None:
            paused = rt.run(chain, {"amount": i}, execution_id=f"refund-{i}")
            done = rt.resume(chain, f"refund-{i}", Resume(approved=i % 2 == 0))
            outcomes[i] = [paused.status, done.status, str(done.output["charged"])]  # type: ignore[index]

        threads(one, n)
        assert rt.pending() == []
    assert outcomes == {i: ["paused", "completed", str(i % 2 == 0)] for i in range(n)}
    stored = in_store(url, backend, lambda store: store.list_executions(limit=100))
    assert sorted(e.execution_id for e in stored) == sorted(f"refund-{i}" for i in range(n))
    assert {e.status for e in stored} == {"completed"}


def test_two_threads_resume_one_approval_and_one_wins(url: str, backend: str) -> None:
    chain = refunds()
    both = threading.Barrier(2, timeout=WAIT)
    outcomes: list[str] = []
    with blocking(url, backend=backend) as rt:
        rt.run(chain, {"amount": 50_000}, execution_id="refund-7")

        def decide(i: int) -> None:
            both.wait()
            try:
                done = rt.resume(chain, "refund-7", Resume(approved=True, metadata={"approver": f"a{i}"}))
            except AlreadyResumed:
                outcomes.append("AlreadyResumed")
            else:
                outcomes.append(done.status)

        threads(decide, 2)
    assert sorted(outcomes) == ["AlreadyResumed", "completed"]
    journal = in_store(url, backend, lambda store: store.read_journal("refund-7"))
    assert len([e for e in journal if e.kind == "resumed"]) == 1


def test_errors_reach_the_caller_as_raised(url: str, backend: str) -> None:
    chain = refunds()
    raised = KeyError("the very one")

    async def fails() -> None:
        raise raised

    with blocking(url, backend=backend) as rt:
        with pytest.raises(ExecutionNotFound):
            rt.execution("nope")
        with pytest.raises(ExecutionNotFound):
            rt.resume(chain, "nope", Resume(approved=True))
        with pytest.raises(KeyError) as caught:
            rt.call(fails)
        assert caught.value is raised
        rt.run(chain, {"amount": 1}, execution_id="refund-1")
        with pytest.raises(ValidationError):
            rt.resume(chain, "refund-1", {"metadata": {"note": "no verdict"}})  # refused before the claim
        assert [p.execution_id for p in rt.pending()] == ["refund-1"]
        rt.decide("refund-1", Resume(approved=False), by="alice")
        assert rt.execution("refund-1").status == "decided"
        with pytest.raises(AlreadyResumed):
            rt.decide("refund-1", Resume(approved=True))
        done = rt.resume(chain, "refund-1")  # carries out the recorded decision
        assert done.output["charged"] is False  # type: ignore[index]


def test_cancel_and_messages_through_the_store(url: str, backend: str) -> None:
    chain = refunds()
    with blocking(url, backend=backend) as rt:
        rt.run(chain, {"amount": 1}, execution_id="refund-1")
        cancelled = rt.cancel("refund-1", reason="withdrawn", by="support:bob")
        assert cancelled.status == "cancelled"
        assert rt.pending() == []
        with pytest.raises(ExecutionNotFound):
            rt.send_message("nope", {"text": "hi"})
        assert rt.query("refund-1").status == "cancelled"


def test_use_before_open_after_close_and_twice_is_refused(tmp_path: Path, backend: str) -> None:
    rt = blocking(f"sqlite:///{tmp_path / 'a.db'}", backend=backend)
    with pytest.raises(UsageError, match="not open yet"):
        rt.pending()
    with rt:
        assert not rt.closed
        with pytest.raises(UsageError, match="opens once"):
            rt.open()
        assert rt.pending() == []
    assert rt.closed
    with pytest.raises(UsageError, match="closed") as caught:
        rt.run(refunds(), {"amount": 1}, execution_id="late")
    assert "blocking(store)" in str(caught.value)
    rt.close()  # closing again does nothing
    with pytest.raises(UsageError, match="opens once"):
        rt.open()


def test_use_inside_a_running_loop_is_refused(tmp_path: Path, backend: str) -> None:
    async def inside(rt: BlockingRuntime) -> list[Any]:
        with pytest.raises(UsageError, match="runs an event loop") as caught:
            rt.pending()
        assert "to_thread.run_sync" in str(caught.value)
        return await anyio.to_thread.run_sync(rt.pending)  # a worker thread may block

    with blocking(f"sqlite:///{tmp_path / 'a.db'}", backend=backend) as rt:
        assert anyio.run(inside, rt, backend=backend) == []
        with pytest.raises(UsageError, match="runs an event loop"):
            anyio.run(_close_inside, rt, backend=backend)
        assert not rt.closed


async def _close_inside(rt: BlockingRuntime) -> None:
    rt.close()


def test_runner_stores(tmp_path: Path, backend: str) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    own = Chain("own", [charge], store=store)
    other = Chain("other", [charge], store=SQLiteStore(tmp_path / "b.db"))
    lent = Chain("lent", [charge])
    with blocking(store, backend=backend) as rt:
        assert rt.run(own, {"approved": True}, execution_id="own-1").status == "completed"
        assert rt.run(lent, {"approved": True}, execution_id="lent-1").status == "completed"
        assert lent.store is store
        with pytest.raises(ConfigurationError, match="another store"):
            rt.run(other, {"approved": True}, execution_id="other-1")
        with pytest.raises(ConfigurationError, match="not a runner"):
            rt.run("refund", execution_id="x")  # type: ignore[arg-type]
    assert lent.store is None  # lent for the runtime's life only
    assert own.store is store
    with blocking(f"sqlite:///{tmp_path / 'c.db'}", backend=backend) as again:
        assert again.run(lent, {"approved": False}, execution_id="lent-1").output == \
            {"approved": False, "charged": False}


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="asyncio' or 'trio"):
        blocking("memory://", backend="curio")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="shutdown_timeout"):
        blocking("memory://", shutdown_timeout=-1)
    with pytest.raises(ConfigurationError, match="Cannot open a store"):
        blocking("mysql://localhost/app")


def test_a_store_that_cannot_open_leaves_nothing_running(backend: str) -> None:
    def ours() -> list[str]:  # the portal's loop thread
        return [t.name for t in threading.enumerate() if "-portal-" in t.name]

    assert ours() == []
    rt = blocking("postgresql://postgres@127.0.0.1:1/nowhere", backend=backend)
    with pytest.raises(StoreUnavailable):
        rt.open()
    assert ours() == []  # stopped and joined
    assert rt.closed
    with pytest.raises(UsageError, match="opens once"):
        rt.open()


def test_closing_waits_for_calls_in_progress(tmp_path: Path, backend: str) -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(state: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        assert release.wait(WAIT)
        return {"slow": True}

    chain = Chain("slow", [slow])
    rt = blocking(f"sqlite:///{tmp_path / 'a.db'}", backend=backend).open()
    results: list[Any] = []
    runner = threading.Thread(target=lambda: results.append(rt.run(chain, {}, execution_id="slow-1")))
    runner.start()
    assert entered.wait(WAIT)
    closer = threading.Thread(target=rt.close)
    closer.start()
    deadline = time.monotonic() + WAIT
    while not rt.closed:  # a bounded poll: close() has no hook to say it began
        assert time.monotonic() < deadline
        closer.join(0.005)
    with pytest.raises(UsageError, match="closing"):
        rt.pending()  # refused while the run in progress finishes
    release.set()
    runner.join(WAIT)
    closer.join(WAIT)
    assert not closer.is_alive()
    assert [r.status for r in results] == ["completed"]
    stored = in_store(f"sqlite:///{tmp_path / 'a.db'}", backend, lambda store: store.get_execution("slow-1"))
    assert stored.status == "completed"


def test_closing_cancels_calls_past_the_shutdown_timeout(tmp_path: Path, backend: str) -> None:
    entered = threading.Event()

    async def forever(state: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await anyio.sleep_forever()
        return {}

    chain = Chain("stuck", [forever])
    rt = blocking(f"sqlite:///{tmp_path / 'a.db'}", backend=backend, shutdown_timeout=0).open()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            rt.run(chain, {}, execution_id="stuck-1")
        except UsageError as exc:
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert entered.wait(WAIT)
    rt.close()
    runner.join(WAIT)
    [error] = errors
    assert "cancelled it" in str(error) and "recoverable" in str(error)
    stored = in_store(f"sqlite:///{tmp_path / 'a.db'}", backend, lambda store: store.get_execution("stuck-1"))
    assert stored.status == "running"  # never finished: left for a recovery


# -- a WSGI application under a real threaded server ------------------------------------------------


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """wsgiref's server, one thread per request."""

    daemon_threads = True
    # socketserver listens with a backlog of 5: the 16 approvals sent at once would overflow it, and a
    # dropped connection attempt is retried only after TCP's 1 s timeout. Room for all of them at once.
    request_queue_size = 64


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def refund_app(rt: BlockingRuntime, chain: Chain) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """POST /refunds?id=&amount=, GET /pending, POST /approve?id=&path=&by=: what a view function would do."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        route = (environ["REQUEST_METHOD"], environ["PATH_INFO"])
        status, body = "200 OK", {}
        if route == ("POST", "/refunds"):
            result = rt.run(chain, {"amount": int(query["amount"])}, execution_id=query["id"])
            body = {"status": result.status}
        elif route == ("GET", "/pending"):
            body = {"pending": [{"id": p.execution_id, "path": p.agent_path, "context": p.context}
                                for p in rt.pending(limit=1000)]}
        elif route == ("POST", "/approve"):
            try:
                result = rt.resume(chain, query["id"], Resume(approved=True, metadata={"approver": query["by"]}),
                                   path=query["path"])
            except AlreadyResumed:
                status, body = "409 Conflict", {"error": "already decided"}
            else:
                body = {"status": result.status, "output": result.output}
        else:
            status, body = "404 Not Found", {}
        data = json.dumps(body).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    return app


def test_a_wsgi_app_under_a_threaded_server(url: str, backend: str) -> None:
    n = 8
    together = threading.Barrier(n, timeout=WAIT)  # all n requests are inside their runs at once

    def gather(state: dict[str, Any]) -> dict[str, Any]:
        together.wait()
        return {}

    chain = Chain("refund", [gather, approve, charge])
    with blocking(url, backend=backend) as rt:
        server = make_server("127.0.0.1", 0, refund_app(rt, chain), server_class=ThreadingWSGIServer,
                             handler_class=QuietHandler)
        # serve_forever notices shutdown() between polls (0.5 s by default): a short poll keeps teardown quick.
        serving = threading.Thread(target=server.serve_forever, args=(0.01,))
        serving.start()
        base = f"http://127.0.0.1:{server.server_port}"

        def request(method: str, path: str) -> tuple[int, Any]:
            try:
                with urllib.request.urlopen(urllib.request.Request(base + path, method=method),
                                            timeout=WAIT) as response:
                    return response.status, json.load(response)
            except urllib.error.HTTPError as error:
                return error.code, json.load(error)

        try:
            with ThreadPoolExecutor(2 * n) as pool:
                started = list(pool.map(lambda i: request("POST", f"/refunds?id=refund-{i}&amount={i}"), range(n)))
                assert started == [(200, {"status": "paused"})] * n
                status, listing = request("GET", "/pending")
                assert status == 200
                waiting = sorted(listing["pending"], key=lambda p: p["id"])
                assert [p["id"] for p in waiting] == sorted(f"refund-{i}" for i in range(n))
                # Every approval is sent twice at once: exactly one of each pair wins.
                tries = [(p, by) for p in waiting for by in ("alice", "bob")]
                answers = list(pool.map(lambda t: request("POST", f"/approve?id={t[0]['id']}"
                                                                  f"&path={t[0]['path']}&by={t[1]}"), tries))
        finally:
            server.shutdown()
            server.server_close()
            serving.join(WAIT)
        assert sorted(code for code, _ in answers) == [200] * n + [409] * n
        assert rt.pending() == []
    approvers = {answer["output"]["amount"]: answer["output"]["approver"] for code, answer in answers if code == 200}
    assert sorted(approvers) == list(range(n))

    async def read(store: Store) -> list[Any]:
        return [(e.execution_id, e.status, e.result) for e in await store.list_executions(limit=100)] + \
            [await store.list_pending()]

    *rows, pending = in_store(url, backend, read)
    assert pending == []
    assert sorted(rows) == sorted(
        (f"refund-{i}", "completed", {"amount": i, "approved": True, "approver": approvers[i], "charged": True})
        for i in range(n)
    )
