"""`tether queues`: what waits, runs and started, per queue and key, on SQLite and Postgres."""

from __future__ import annotations

import json

import anyio
from tether.stores import NewExecution, QueueLimits, open_store

from .conftest import Tether


def fill(url: str, *, queues: bool = True) -> None:
    async def main() -> None:
        async with open_store(url) as store:
            if not queues:
                return
            await store.declare_queue(QueueLimits(name="llm", concurrency=1))
            await store.declare_queue(QueueLimits(name="spare"))
            for n, key in enumerate(["tenant-7", "tenant-7", "tenant-8"]):
                await store.enqueue_execution(NewExecution(execution_id=f"e{n}", runner="r", root_path="chain:r",
                                                           queue="llm", queue_key=key))
            assert len(await store.take_queued("llm", owner="w", lease_seconds=60, limit=5)) == 1

    anyio.run(main)


def test_tether_queues_shows_each_queue_and_key(tether: Tether, url: str) -> None:
    fill(url, queues=False)
    code, out, err = tether("queues")
    assert code == 0 and out.startswith("No queues."), err
    fill(url)
    code, out, _ = tether("queues")
    assert code == 0
    cells = [[cell.strip() for cell in line.strip().strip("│").split("│")] for line in out.splitlines() if "│" in line]
    assert [row[:5] for row in cells] == [
        ["llm", "(all)", "2", "1", "1"], ["", "tenant-7", "1", "1", "1"], ["", "tenant-8", "1", "0", "0"],
        ["spare", "(all)", "0", "0", "0"]]
    assert cells[-1][5] == "-"  # nothing waits in spare
    code, out, _ = tether("queues", "--json")
    rows = {(row["queue"], row["key"]): (row["waiting"], row["running"], row["admitted"]) for row in json.loads(out)}
    assert rows == {("llm", None): (2, 1, 1), ("llm", "tenant-7"): (1, 1, 1), ("llm", "tenant-8"): (1, 0, 0),
                    ("spare", None): (0, 0, 0)}


def test_a_worker_refuses_a_retention_it_cannot_read(tether: Tether) -> None:
    code, _, err = tether("worker", "--app", "tests.operator._queue_app:runners", "--retain", "paused=30d")
    assert code == 2
    assert "--retain 'paused=30d': write STATUS=AGE" in err
