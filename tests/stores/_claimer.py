"""A claimer process for the cross-process race test.

Usage: python _claimer.py STORE_URL BACKEND [SCHEMA]

It opens the store once, prints "ready", then for each execution id read from
stdin claims its pending interrupt and prints one JSON line with the outcome.
One Python start-up serves every trial.
"""

from __future__ import annotations

import json
import sys

import anyio
from tether.stores import AlreadyResumed, PostgresStore, Store, open_store


async def main(url: str, schema: str | None) -> None:
    store: Store = PostgresStore(url, schema=schema) if schema else open_store(url)
    async with store:
        print("ready", flush=True)
        while line := await anyio.to_thread.run_sync(sys.stdin.readline):
            execution_id = line.strip()
            try:
                await store.claim(execution_id, {"approved": True}, path="chain:c/node:approve")
                outcome = "won"
            except AlreadyResumed:
                outcome = "already_resumed"
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            print(json.dumps({"execution_id": execution_id, "outcome": outcome}), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[3] if len(sys.argv) > 3 else None, backend=sys.argv[2])
