"""LangGraph's async checkpointers, opened alike by every workload that measures LangGraph."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any


@contextlib.asynccontextmanager
async def langgraph_saver(kind: str, target: str, synchronous: str = "FULL") -> AsyncIterator[Any]:
    """An `AsyncSqliteSaver` on the file ``target`` (WAL, at ``synchronous``), or an
    `AsyncPostgresSaver` on the DSN ``target`` (``kind="postgres"``), set up and open."""
    if kind == "sqlite":
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with aiosqlite.connect(target) as conn:
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute(f"PRAGMA synchronous={synchronous}")
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            yield saver
        return
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(target) as saver:
        await saver.setup()
        yield saver
