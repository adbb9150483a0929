"""What every SIGKILL child process shares (see _crash.py): its store, its modes, its output.

Each journal write the child commits is announced on stdout (``recorded <label>``),
so the parent can wait for a boundary on the pipe instead of polling the store.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import anyio
from tether.runtime import AlreadyResumed, LeaseHeld, Resume
from tether.stores import PostgresStore, Store, open_store

Build = Callable[[str, Store], tuple[Any, Callable[[], dict[str, Any]]]]
"""``build(scenario, store)`` -> (the runner, a function of extra output fields)."""


def say(line: str) -> None:
    """One line to the parent in one write: print()'s text and newline are two, and a thread
    printing at the same moment can land between them, hiding the line from the parent."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def announced(store: Store) -> Store:
    """The store, printing ``recorded <label>`` once each appended entry is committed."""
    append = store.append

    async def append_and_say(lease: Any, entries: Any) -> list[int]:
        seqs = await append(lease, entries)
        for entry in entries:
            say(f"recorded {entry.label}")
        return seqs

    store.append = append_and_say  # type: ignore[method-assign]
    return store


async def _main(build: Build, input: Any, url: str, scenario: str, mode: str, execution_id: str,
                schema: str | None) -> None:
    store = announced(PostgresStore(url, schema=schema) if schema else open_store(url))
    async with store:
        runner, extra = build(scenario, store)
        if mode == "run":
            result = await runner.run(input, execution_id=execution_id)
        elif mode == "resume":
            try:
                result = await runner.resume(execution_id, Resume(approved=True))
            except AlreadyResumed:
                print(json.dumps({"status": "already_resumed"}), flush=True)
                return
        else:
            try:
                # At once: a process killed on this machine is seen dead, and its lease taken over.
                result = await runner.resume(execution_id, force=mode == "force")
            except LeaseHeld as held:
                print(json.dumps({"status": "lease_held", "owner": held.owner}), flush=True)
                return
    print(json.dumps({**result.model_dump(mode="json"), **extra()}), flush=True)


def run_child(build: Build, input: Any) -> None:
    """Usage: python <child>.py STORE_URL BACKEND SCENARIO MODE EXECUTION_ID [SCHEMA].

    MODE: run | resume | recover | force (a recovery that takes any lease over).

    ``recover`` tries once: a lease it finds held is printed as ``{"status": "lease_held"}``.
    """
    url, backend, scenario, mode, execution_id = sys.argv[1:6]
    anyio.run(_main, build, input, url, scenario, mode, execution_id, sys.argv[6] if len(sys.argv) > 6 else None,
              backend=backend)
