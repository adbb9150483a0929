"""Records an approval for each execution id on the command line, and continues none of them.

Usage: python _fleet_decider.py STORE_URL ID...
"""

from __future__ import annotations

import sys

import anyio
from tether.runtime import Resume
from tether.stores import open_store

from tests.operator._fleet_app import approvals


async def main(url: str, ids: list[str]) -> None:
    async with open_store(url) as store:
        approvals.store = store
        for execution_id in ids:
            await approvals.decide(execution_id, Resume(approved=True))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2:])
