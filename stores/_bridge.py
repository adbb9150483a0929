"""Run a store's asyncio-only driver from either anyio backend.

aiosqlite and asyncpg run only on asyncio. Two ways to reach them, chosen when a
store opens (measured in shared/research/store-bridge.md):

- `HostLoop`, under asyncio: the driver lives on the caller's own loop. Each
  operation still runs as an inner task, because an anyio cancel scope is
  level-triggered and would otherwise cancel the driver's own clean-up (asyncpg's
  ROLLBACK) too, leaving a connection inside a transaction.
- `ThreadLoop`, under trio (or any caller): a private asyncio loop in one daemon
  thread owns the driver. One operation is one crossing; the caller is woken
  without blocking either side.

Both keep one promise under cancellation: the inner task is cancelled at most
once, and only before the operation reaches its point of no return (`Op.commit`);
then the caller waits for the outcome. So a call that returns has committed, and
a call that raises the cancellation has changed nothing.
"""

from __future__ import annotations

import asyncio
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from ._errors import UsageError

T = TypeVar("T")


class Op:
    """Handed to each store operation so it can mark its point of no return."""

    __slots__ = ("committing",)

    def __init__(self) -> None:
        self.committing = False

    def commit(self) -> None:
        """From here on, cancellation waits for the outcome instead of interrupting.

        Call it just before the statement whose completion is the commit: after
        it, the client could no longer tell whether the server committed.
        """
        self.committing = True


OpFn = Callable[[Op], Coroutine[Any, Any, T]]


def _outcome(task: asyncio.Task[T]) -> T:
    # A driver error is re-raised as it is; result() does exactly that.
    return task.result()


def other_loop_error() -> UsageError:
    """The error for a store used from an event loop other than the one it opened on."""
    return UsageError(
        "This store was opened on another event loop. Open one store per event "
        "loop, for example with 'async with store:' inside each anyio.run()."
    )


class DriverLoop(ABC):
    """Where a store's driver coroutines run."""

    @abstractmethod
    async def run(self, fn: OpFn[T]) -> T:
        """Run ``fn`` as one store operation and return its result."""

    @abstractmethod
    async def aclose(self) -> None:
        """Stop the loop; the store has already closed its driver objects."""

    def reachable(self) -> bool:
        """Whether `run` works from the current context."""
        return True


def open_driver_loop() -> DriverLoop:
    """Pick the loop for a store opened from the current async context."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return ThreadLoop()
    return HostLoop(loop)


class HostLoop(DriverLoop):
    """Driver coroutines on the caller's asyncio loop, one inner task each."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def reachable(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    async def run(self, fn: OpFn[T]) -> T:
        loop = self._loop
        if not self.reachable():
            raise other_loop_error()
        # An already-cancelled caller starts nothing (this does not yield otherwise).
        await anyio.lowlevel.checkpoint_if_cancelled()
        op = Op()
        task = loop.create_task(fn(op))
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError:
            if not op.committing:
                task.cancel()
            # An anyio shield does not stop asyncio's own Task.cancel(): absorb any
            # further requests until the operation has ended, so it is never abandoned.
            while not task.done():
                try:
                    with anyio.CancelScope(shield=True):
                        await asyncio.wait((task,))
                except asyncio.CancelledError:
                    pass
            if task.cancelled():
                raise
            rearm_cancellation()
        return _outcome(task)

    async def aclose(self) -> None:
        return None


class ThreadLoop(DriverLoop):
    """Driver coroutines on a private asyncio loop in one daemon thread."""

    def __init__(self) -> None:
        # Built directly, not through the event-loop policy, so that a trio host's
        # process-wide asyncio settings are left alone.
        self._loop = asyncio.SelectorEventLoop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tether-store-loop", daemon=True
        )
        self._thread.start()

    async def run(self, fn: OpFn[T]) -> T:
        if self._loop.is_closed():
            raise UsageError("This store is closed; open a new one.")
        await anyio.lowlevel.checkpoint_if_cancelled()
        done = anyio.Event()
        wake = _threadsafe_waker(done)
        op = Op()
        holder: list[asyncio.Task[T]] = []

        def start() -> None:
            task = self._loop.create_task(fn(op))
            task.add_done_callback(lambda _: wake())
            holder.append(task)

        def cancel() -> None:
            # Runs on the driver loop, the only thread that changes op.committing.
            if not op.committing:
                holder[0].cancel()

        self._loop.call_soon_threadsafe(start)
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            self._loop.call_soon_threadsafe(cancel)
            with anyio.CancelScope(shield=True):
                await done.wait()
            if holder[0].cancelled():
                raise
        return _outcome(holder[0])

    async def aclose(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        await anyio.to_thread.run_sync(self._thread.join)
        self._loop.close()


def rearm_cancellation() -> None:
    """Make sure a caller whose cancellation was absorbed, to report a commit, still gets it.

    An anyio cancel scope is level-triggered: its next checkpoint raises again.
    asyncio's own ``Task.cancel()`` is not, so it is requested again here; the
    caller learns both that the operation committed (it returned) and that it
    was cancelled (at its next await).
    """
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return  # not on asyncio (trio has no cancellation outside its scopes)
    if task is not None and anyio.current_effective_deadline() != -math.inf:
        task.cancel()


def _threadsafe_waker(event: anyio.Event) -> Callable[[], None]:
    """Return a callable that any thread may call to set ``event`` without blocking."""
    return threadsafe_caller(event.set)


def threadsafe_caller(fn: Callable[[], object]) -> Callable[[], None]:
    """Return a callable that any thread may call to run ``fn`` soon on the current event loop."""
    schedule = threadsafe_scheduler()

    def call() -> None:
        schedule(fn)

    return call


def threadsafe_scheduler() -> Callable[[Callable[[], object]], object]:
    """The current event loop's own ``schedule(fn)``, which any thread may call without blocking.

    Two schedulers of one loop compare equal, so a thread can wake many waiters
    of a loop with one call.
    """
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:
        import trio

        return trio.lowlevel.current_trio_token().run_sync_soon
