"""An application that carries out, in its own process, the decisions made anywhere else.

Usage: python _serving_app.py STORE_URL BACKEND. It logs each run it carries out
(``worker ... ran <id>: <status>``) and runs until terminated.
"""

from __future__ import annotations

import logging
import sys

import anyio
from tether.runtime import serve_executions
from tether.stores import open_store

from tests.operator._flows import refund


async def main(url: str) -> None:
    async with open_store(url) as store, anyio.create_task_group() as tg:
        refund.store = store
        await tg.start(lambda task_status: serve_executions(store, [refund], poll_interval=0.1,
                                                            task_status=task_status))
        logging.getLogger("tether.worker").info("serving decisions")
        await anyio.sleep_forever()  # the application's own work would go on here


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    anyio.run(main, sys.argv[1], backend=sys.argv[2])
