"""Queues across `tether worker` processes on a real Postgres: limits that hold fleet-wide, also through SIGKILL."""

from __future__ import annotations

import signal
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from tether.runtime import Queue

from ._queue_app import jobs, keyed, limited, paced, ranked
from .test_fleet import Fleet, watched

APP = "tests.operator._queue_app:runners"


class QueueFleet(Fleet):
    def __init__(self, url: str, log: Path, backend: str) -> None:
        super().__init__(url, log.with_suffix(".effects"), backend, APP)
        self.log = log
        self.env["TETHER_QUEUE_LOG"] = str(log)

    def enqueue(self, queue: Queue, inputs: list[dict[str, Any]], **placement: Any) -> None:
        async def main(store: Any) -> None:
            jobs.store = store
            for data in inputs:
                await jobs.start(data, execution_id=data["id"], queue=queue,
                                 **{k: data[k] for k in placement.get("fields", ())})

        self.store(main)

    def admitted(self, queue: str) -> list[datetime]:
        """When ``queue`` admitted each of its executions, on the database's clock, in order."""
        async def main() -> list[datetime]:
            conn = await self._connect()
            try:
                rows = await conn.fetch("SELECT admitted_at FROM tether_executions WHERE queue = $1 "
                                        "ORDER BY admitted_at", queue)
            finally:
                await conn.close()
            return [row["admitted_at"] for row in rows]

        return anyio.run(main)

    def lines(self) -> list[tuple[str, str, int, int, str]]:
        rows = []
        for line in self.log.read_text().splitlines():
            what, execution_id, pid, at, key = line.split()
            rows.append((what, execution_id, int(pid), int(at), key))
        return rows


@pytest.fixture(params=["asyncio", "trio"])
def fleet(request: pytest.FixtureRequest, postgres_dsn: str, pg_schema: str, tmp_path: Path) -> Iterator[QueueFleet]:
    (tmp_path / "queue.log").touch()
    with watched(QueueFleet(f"{postgres_dsn}?schema={pg_schema}", tmp_path / "queue.log", request.param)) as running:
        yield running


def peak(intervals: list[tuple[int, int]]) -> int:
    """The most intervals open at one moment."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def attempts(lines: list[tuple[str, str, int, int, str]], died: dict[int, int]) -> list[tuple[str, int, int, int, str]]:
    """Each run of a node: (execution, pid, start, end, key); one a SIGKILL cut short ends at the kill."""
    started: dict[tuple[str, int], tuple[int, str]] = {}
    runs = []
    for what, execution_id, pid, at, key in lines:
        if what == "start":
            started[(execution_id, pid)] = (at, key)
        else:
            begun, key = started.pop((execution_id, pid))
            runs.append((execution_id, pid, begun, at, key))
    for (execution_id, pid), (begun, key) in started.items():
        assert pid in died, f"{execution_id} never ended on {pid}, which was not killed"
        runs.append((execution_id, pid, begun, died[pid], key))
    return runs


def test_concurrency_holds_across_three_workers_and_through_a_sigkill(fleet: QueueFleet) -> None:
    ids = [f"c-{n:03d}" for n in range(200)]
    fleet.enqueue(limited, [{"id": execution_id, "work": 0.05} for execution_id in ids])
    workers = [fleet.start_worker(concurrency=4) for _ in range(3)]  # room for 12, the queue allows 4

    def holders(rows: list[Any]) -> list[Any]:
        return [w for w in workers
                if any(e.status == "running" and e.lease_owner and f":{w.pid}:" in e.lease_owner for e in rows)]

    # One read for both: between two reads every lease may have been let go for a moment.
    rows = fleet.wait(lambda rows: sum(e.status == "completed" for e in rows) >= 40 and bool(holders(rows)),
                      "40 completed runs and a worker holding one")
    victim = holders(rows)[0]
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    killed_at = time.monotonic_ns()  # dead by now: its nodes stopped before this (their slots wait out its leases)
    rows = fleet.wait(lambda rows: all(e.status == "completed" for e in rows), "200 completed runs")
    assert sorted(e.execution_id for e in rows) == ids
    runs = attempts(fleet.lines(), {victim.pid: killed_at})
    assert peak([(start, end) for _, _, start, end, _ in runs]) == 4  # never more, and the fleet used them all
    by_execution = Counter(execution_id for execution_id, *_ in runs)
    again = {execution_id for execution_id, count in by_execution.items() if count > 1}
    assert again <= {execution_id for execution_id, pid, *_ in runs if pid == victim.pid}  # only the killed ran twice
    assert set(by_execution) == set(ids)


def test_per_key_rate_and_priority_hold_across_the_fleet(fleet: QueueFleet) -> None:
    fleet.enqueue(ranked, [{"id": f"r-{p}", "priority": p} for p in (5, 1, 3, 0, 4, 2)], fields=("priority",))
    fleet.enqueue(keyed, [{"id": f"k-{n:02d}", "key": f"t{n % 4}", "work": 0.1} for n in range(12)],
                  fields=("key",))
    fleet.enqueue(paced, [{"id": f"p-{n:02d}"} for n in range(15)])
    for _ in range(3):
        fleet.start_worker(concurrency=8)
    fleet.wait(lambda rows: len(rows) == 33 and all(e.status == "completed" for e in rows), "33 completed runs",
               timeout=180)
    runs = attempts(fleet.lines(), {})
    ranked_order = [execution_id for execution_id, _, _, _, _ in sorted(runs, key=lambda r: r[2])
                    if execution_id.startswith("r-")]
    assert ranked_order == [f"r-{p}" for p in range(6)]  # lowest first, one at a time
    by_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for execution_id, _, start, end, key in runs:
        if execution_id.startswith("k-"):
            by_key[key].append((start, end))
    assert sorted(by_key) == ["t0", "t1", "t2", "t3"]
    assert all(peak(intervals) == 1 for intervals in by_key.values())  # one at a time per tenant
    assert peak([interval for intervals in by_key.values() for interval in intervals]) > 1  # tenants side by side
    admitted = fleet.admitted("paced")
    window = timedelta(seconds=2)
    assert len(admitted) == 15
    assert max(sum(1 for other in admitted if at - window < other <= at) for at in admitted) <= 5
    assert admitted[-1] - admitted[0] >= 2 * window  # 15 starts at 5 per 2 s take three periods

