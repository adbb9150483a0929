"""A minimal asyncpg connection pool for one-statement operations.

asyncpg's own pool resets, shields and times out every checkout; each of those
is an event-loop round that costs as much as the statement's own Python work.
Here a checkout with an idle connection does not yield at all, and a release is
a list append. Session state never outlives a statement, so nothing is reset.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

Connection = Any  # asyncpg.Connection; asyncpg ships no type information


class ConnectionPool:
    """Up to ``max_size`` connections, opened on demand, handed out one at a time."""

    def __init__(self, connect: Callable[[], Awaitable[Connection]], max_size: int) -> None:
        self._connect = connect
        self._max_size = max_size
        self._idle: list[Connection] = []
        self._waiters: deque[asyncio.Future[Connection | None]] = deque()
        self._size = 0
        self._closed = False

    async def fill(self, count: int) -> None:
        """Open ``count`` connections now, so that a dead server is found at once."""
        for _ in range(count - self._size):
            self._size += 1
            try:
                self._idle.append(await self._connect())
            except BaseException:
                self._pass_on(None)  # the slot goes to a waiter, or is given up
                raise

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """Check a connection out for one statement."""
        conn = await self._acquire()
        try:
            yield conn
        finally:
            self._release(conn)

    async def _acquire(self) -> Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                return conn
            self._size -= 1  # the server closed it while idle
        if self._closed:
            raise ConnectionError("the connection pool is closed")
        if self._size < self._max_size:
            await self.fill(self._size + 1)
            return self._idle.pop()
        waiter: asyncio.Future[Connection | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            conn = await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # Handed a connection (or a slot) just as we were cancelled: pass it on.
                self._pass_on(waiter.result())
            raise
        if conn is None:
            # A broken connection's slot was handed to us: open its replacement.
            try:
                return await self._connect()
            except BaseException:
                self._pass_on(None)
                raise
        return conn

    def _release(self, conn: Connection) -> None:
        if conn.is_closed() or conn.is_in_transaction() or self._closed:
            # Broken, or left mid-transaction by a cancelled statement: never reuse it.
            conn.terminate()
            self._pass_on(None)
        else:
            self._pass_on(conn)

    def _pass_on(self, conn: Connection | None) -> None:
        """Give a connection, or with None its slot, to the first live waiter."""
        while self._waiters and not self._closed:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        if conn is None:
            self._size -= 1
        elif self._closed:
            conn.terminate()
            self._size -= 1
        else:
            self._idle.append(conn)

    async def aclose(self) -> None:
        """Close idle connections; checked-out ones close when they come back."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()

    def terminate(self) -> None:
        """Drop every idle connection without a goodbye (their loop is gone)."""
        self._closed = True
        for conn in self._idle:
            conn.terminate()
        self._idle = []
