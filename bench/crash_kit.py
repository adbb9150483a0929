"""What the testing kit's in-process crash costs, against a real crash in a child process.

    .venv/bin/python -m bench.crash_kit          # needs Postgres on 127.0.0.1:5432 (or --no-postgres)

For each store and backend, `crash_sweep` crashes a flow after every journal
write and recovers it; the figure is the sweep's time per crash-and-recovery.
`crash_in_child` is timed for one SIGKILLed child on SQLite.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from typing import Any

import anyio
from tether.runtime import Resume
from tether.runtime.testing import crash_in_child, crash_sweep
from tether.stores import MemoryStore, PostgresStore, SQLiteStore, Store

from tests.testing.flows import INPUTS, build

DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def stores(folder: str, postgres: bool) -> list[tuple[str, Any]]:
    kinds: list[tuple[str, Any]] = [("memory", MemoryStore),
                                    ("sqlite", lambda: SQLiteStore(f"{folder}/{uuid.uuid4().hex}.db"))]
    if postgres:
        kinds.append(("postgres", lambda: PostgresStore(DSN, schema=f"bench_{uuid.uuid4().hex[:8]}")))
    return kinds


async def measure(backend: str, postgres: bool) -> None:
    folder = tempfile.mkdtemp()
    for kind, make in stores(folder, postgres):
        for flow in ("line", "agent", "supervisor"):
            store: Store = make()
            async with store:
                start = time.perf_counter()
                report = await crash_sweep(build(flow, store), INPUTS.get(flow, {}),
                                           decide=lambda pending: Resume(approved=True))
                elapsed = time.perf_counter() - start
                if isinstance(store, PostgresStore):
                    await store.drop_schema()
            runs = len(report.runs)
            print(f"{backend:7} {kind:8} {flow:10} {runs:3} boundaries  "
                  f"{elapsed * 1000 / (runs + 1):6.1f} ms per crash+recovery")
    start = time.perf_counter()
    await crash_in_child("tests.testing.flows:line", f"sqlite:///{folder}/child.db", execution_id="c",
                         at="node:n3", input={})
    print(f"{backend:7} sqlite   line       one SIGKILLed child: {time.perf_counter() - start:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    for backend in ("asyncio", "trio"):
        anyio.run(measure, backend, not args.no_postgres, backend=backend)


if __name__ == "__main__":
    main()
