"""A minimal asyncpg connection pool for one-statement operations.

asyncpg's own pool resets, shields and times out every checkout; each of those
is an event-loop round that costs as much as the statement's own Python work.
Here a checkout with an idle connection does not yield at all, and a release is
a list append. Session state never outlives a statement, so nothing is reset.

A connect is never cancelled. With ``sslmode=prefer`` (the default) asyncpg opens
the socket with a protocol whose future waits for the answer to its SSLRequest;
cancelled in the loop iteration between the socket's connect and the protocol's
``connection_made``, ``loop.create_connection`` closes the transport, and
``connection_lost`` puts ``ConnectionError('unexpected connection_lost() call')``
in that future, which nobody awaits: asyncio logs "Future exception was never
retrieved" when it is collected. So each connect runs in a task of its own,
which the caller's cancellation does not reach: a caller cancelled meanwhile
leaves at once, and the pool's connection, when it comes, goes to the next waiter
or the idle list like a released one (a failed connect gives up its slot).
`aclose` lets such connects end before it returns. `connect_detached` does the
same for a connection outside the pool (the store's LISTEN connection).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

Connection = Any  # asyncpg.Connection; asyncpg ships no type information


_SETTLE_SECONDS = 10.0  # the SELECT 1 that settles a connection whose statement was cancelled
_CLOSE_SECONDS = 30.0  # how long aclose waits for connects and settling statements


class ConnectionPool:
    """Up to ``max_size`` connections, opened on demand, handed out one at a time.

    ``command_timeout`` bounds what one checkout may spend on the server; past
    it the checkout raises `TimeoutError` and its connection is terminated, not
    settled: a server that stopped answering would not answer the settling
    statement or asyncpg's cancel request either.
    """

    def __init__(self, connect: Callable[[], Awaitable[Connection]], max_size: int,
                 command_timeout: float | None = None) -> None:
        self._connect = connect
        self._max_size = max_size
        self.command_timeout = command_timeout
        self._idle: list[Connection] = []
        self._waiters: deque[asyncio.Future[Connection | None]] = deque()
        self._size = 0
        self._closed = False
        # Connects under way, including those whose caller was cancelled.
        self._connecting: set[asyncio.Task[Connection]] = set()
        # Connections whose statement was cancelled, on their way back (see `_settle`).
        self._settling: set[asyncio.Task[object]] = set()

    async def fill(self, count: int) -> None:
        """Open ``count`` connections now, so that a dead server is found at once."""
        for _ in range(count - self._size):
            self._size += 1
            self._idle.append(await self._open_slot())

    async def _open_slot(self) -> Connection:
        """Open the connection of a slot already counted in ``_size``.

        A failure gives the slot up (to a waiter, or for good) and is raised. A
        cancelled caller leaves without cancelling the connect (see the module's
        docstring); its connection, or its slot, is then passed on when it ends.
        """
        task = _start(self._connect)
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)
        await _wait_detached(task, self._pass_on)
        try:
            return task.result()
        except BaseException:
            self._pass_on(None)  # the slot goes to a waiter, or is given up
            raise

    @asynccontextmanager
    async def connection(self, *, bounded: bool = True) -> AsyncIterator[Connection]:
        """Check a connection out for one statement (or one transaction).

        ``bounded=False`` lifts ``command_timeout``, for work whose length grows
        with the data (a migration).
        """
        conn = await self._acquire()
        try:
            async with asyncio.timeout(self.command_timeout if bounded else None):
                yield conn
        except TimeoutError:
            conn.terminate()  # no goodbye: its server may be unreachable
            self._pass_on(None)
            raise
        except asyncio.CancelledError:
            self._settle(conn)
            raise
        except BaseException:
            self._release(conn)
            raise
        self._release(conn)

    def _settle(self, conn: Connection) -> None:
        """Take back a connection whose statement was cancelled, once the server is idle on it.

        A statement cancelled just after asyncpg's prepare (Parse, Describe, Flush)
        has been answered leaves the server inside the statement's implicit
        transaction, waiting for the Sync its Bind would have sent: it keeps its
        locks (a DROP or ALTER waits for them) until the connection's next
        statement, while ``is_in_transaction()`` says no. One more statement ends
        that, in a task of its own so that the cancelled caller does not wait; it
        first waits out asyncpg's cancel request, as the next caller would have.
        """
        if conn.is_closed() or self._closed:
            self._release(conn)
            return

        def settled(task: asyncio.Task[object]) -> None:
            self._settling.discard(task)
            if not task.cancelled():
                task.exception()  # retrieved; a broken connection is dropped just below
            self._release(conn)

        # Bounded: a server that stopped answering is what gets statements cancelled.
        task = asyncio.get_running_loop().create_task(conn.execute("SELECT 1", timeout=_SETTLE_SECONDS))
        self._settling.add(task)
        task.add_done_callback(settled)

    async def _acquire(self) -> Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                return conn
            self._size -= 1  # the server closed it while idle
        if self._closed:
            raise ConnectionError("the connection pool is closed")
        if self._size < self._max_size:
            self._size += 1
            return await self._open_slot()
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
            return await self._open_slot()
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
            await conn.close(timeout=self.command_timeout)  # past it asyncpg terminates the connection
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()
        if pending := self._connecting | self._settling:
            # Connects left by cancelled callers end on their own (asyncpg's connect
            # timeout bounds them), and so do settling statements; cancelling either
            # could leak asyncpg's future. What they hand back is terminated as it
            # arrives, the pool being closed. A server gone silent is not waited for
            # past the bound: then they are cancelled.
            _, late = await asyncio.wait(pending, timeout=_CLOSE_SECONDS)
            for task in late:
                task.cancel()

    def terminate(self) -> None:
        """Drop every idle connection without a goodbye (their loop is gone)."""
        self._closed = True
        for conn in self._idle:
            close_without_loop(conn)
        self._idle = []
        self._connecting.clear()  # they died with their loop
        self._settling.clear()


def close_without_loop(conn: Connection) -> None:
    """Close ``conn`` now, without its event loop, which has ended.

    asyncpg's ``terminate()`` aborts the connection's transport, and the transport
    leaves closing its socket to a callback on its loop: a loop that will not run
    again, or that refuses the callback once closed ("Event loop is closed"). So
    the callback runs here, and the socket is closed now instead of being left
    for the garbage collector. (A loop whose transports lack that callback, such
    as uvloop's, leaves the socket to the collector as before.)
    """
    transport = getattr(conn, "_transport", None)
    with contextlib.suppress(RuntimeError):  # the loop is closed: the abort could not schedule its close
        conn.terminate()
    finish = getattr(transport, "_call_connection_lost", None)
    if finish is not None and getattr(transport, "_sock", None) is not None:
        with contextlib.suppress(RuntimeError):  # the protocol's own wake-ups need the loop; the socket closes first
            finish(None)


async def connect_detached(connect: Callable[[], Awaitable[Connection]],
                           under_way: set[asyncio.Task[Connection]],
                           orphaned: Callable[[Connection | None], object] | None = None) -> Connection:
    """Await ``connect()`` without letting a cancellation interrupt it (see the module's docstring).

    A caller cancelled first leaves at once; the connection is terminated when
    it comes (it has run no statement, so nothing is left in flight), or handed
    to ``orphaned`` (None if the connect failed), which may keep it. The task
    stays in ``under_way`` until it ends: its owner waits for it before its loop
    goes (`finish_detached`), or the socket it opens would be left unclosed.
    """
    task = _start(connect)
    under_way.add(task)
    task.add_done_callback(under_way.discard)
    await _wait_detached(task, orphaned or _terminate)
    return task.result()


async def finish_detached(under_way: set[asyncio.Task[Connection]]) -> None:
    """Let detached connects end (a bounded wait; then they are cancelled)."""
    if under_way:
        _, late = await asyncio.wait(set(under_way), timeout=_CLOSE_SECONDS)
        for task in late:
            task.cancel()


def _start(connect: Callable[[], Awaitable[Connection]]) -> asyncio.Task[Connection]:
    async def run() -> Connection:
        return await connect()

    return asyncio.get_running_loop().create_task(run())


async def _wait_detached(
    task: asyncio.Task[Connection], orphaned: Callable[[Connection | None], object]
) -> None:
    """Wait for ``task`` to end; a cancelled caller leaves at once, and never cancels it.

    The task's outcome then goes to ``orphaned``: its connection, or None if it
    failed (its error is retrieved, so asyncio logs nothing).
    """
    try:
        await asyncio.wait((task,))
    except asyncio.CancelledError:
        task.add_done_callback(lambda done: orphaned(_connection_or_none(done)))
        raise


def _connection_or_none(task: asyncio.Task[Connection]) -> Connection | None:
    if task.cancelled() or task.exception() is not None:
        return None
    return task.result()


def _terminate(conn: Connection | None) -> None:
    if conn is not None:
        conn.terminate()
