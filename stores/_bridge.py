"""Run a store's asyncio-only driver from either anyio backend.

aiosqlite and asyncpg run only on asyncio. Two ways to reach them, chosen when a
store opens (measured in shared/research/store-bridge.md):

- `HostLoop`, under asyncio: the driver lives on the caller's own loop. Each
  operation still runs as an inner task, because an anyio cancel scope is
  level-triggered and would otherwise cancel the driver's own clean-up (asyncpg's
  ROLLBACK) too, leaving a connection inside a transaction.
- `TrioDrivenLoop`, under trio: a private asyncio loop owns the driver, and the
  trio run itself drives it, in its own thread: the asyncio loop only ever polls,
  and a trio task does its waiting. An operation crosses no thread.

Both keep one promise under cancellation: the inner task is cancelled at most
once, and only before the operation reaches its point of no return (`Op.commit`);
then the caller waits for the outcome. So a call that returns has committed, and
a call that raises the cancellation has changed nothing.
"""

from __future__ import annotations

import asyncio
import math
import selectors
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
        return TrioDrivenLoop()
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


class TrioDrivenLoop(DriverLoop):
    """Driver coroutines on a private asyncio loop that the caller's trio run drives.

    The asyncio loop never blocks: a selector that only polls runs it one pass at
    a time, and where it would have slept, a trio task of the store's (the pump)
    waits instead, on the selector's own file descriptor, for as long as the
    asyncio loop asked. So an operation costs no thread crossing: its result
    wakes the caller in the same thread (an empty operation costs about 20 us,
    against 200-240 us through a loop in a thread of its own). Work
    that other threads hand the loop (aiosqlite's, the resolver's) arrives as
    before, through ``call_soon_threadsafe``, which makes the descriptor ready.
    """

    def __init__(self) -> None:
        import sniffio  # both come with trio
        import trio

        self._trio = trio
        self._sniffio = sniffio
        self._token = trio.lowlevel.current_trio_token()
        self._selector = _PollingSelector()
        self._loop = asyncio.SelectorEventLoop(self._selector)
        self._selector.loop = self._loop
        self._parked: Any = None  # the pump's CancelScope while it waits for the loop
        self._closing = False
        self._pump_done = anyio.Event()  # set when the pump has ended
        trio.lowlevel.spawn_system_task(self._pump, name="tether-store-loop")

    def reachable(self) -> bool:
        try:
            return not self._pump_done.is_set() and self._trio.lowlevel.current_trio_token() is self._token
        except RuntimeError:
            return False

    async def run(self, fn: OpFn[T]) -> T:
        if self._loop.is_closed() or self._closing:
            raise UsageError("This store is closed; open a new one.")
        if not self.reachable():
            raise other_loop_error()
        await anyio.lowlevel.checkpoint_if_cancelled()
        done = anyio.Event()
        op = Op()
        task = self._loop.create_task(fn(op))
        task.add_done_callback(lambda _: done.set())
        self._turn()  # the operation starts now, up to its first wait (its statement sent)
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            if not op.committing:
                task.cancel()
                self._turn()
            with anyio.CancelScope(shield=True):
                await done.wait()
            if task.cancelled():
                raise
        return _outcome(task)

    async def aclose(self) -> None:
        if self._loop.is_closed():
            return
        self._closing = True
        if not self._pump_done.is_set():  # else its trio run has ended, and the pump with it
            self._wake()
            with anyio.CancelScope(shield=True):
                await self._pump_done.wait()
        self._loop.close()

    def _wake(self) -> None:
        """Make the pump run a pass now (the loop has new work)."""
        if self._parked is not None:
            self._parked.cancel()

    def _turn(self) -> None:
        """Run a pass here and now, for work this task just gave the loop.

        That saves a trip through trio's scheduler to the pump. The pump, if it
        is waiting, goes on waiting on the same descriptor; it is woken only when
        the loop now wants to be run sooner than the pump would (a new timer).
        """
        sleep = self._pass()
        parked = self._parked
        if parked is not None and sleep is not None and self._trio.current_time() + sleep < parked.deadline:
            parked.cancel()

    async def _pump(self) -> None:
        trio = self._trio
        fd = self._selector.fileno()
        try:
            while not self._closing:
                sleep = self._pass()
                if sleep == 0:
                    await trio.lowlevel.checkpoint()
                    continue
                deadline = math.inf if sleep is None else trio.current_time() + sleep
                with trio.CancelScope(deadline=deadline) as self._parked:
                    await trio.lowlevel.wait_readable(fd)
                self._parked = None
        finally:
            # The run is ending (system tasks are cancelled last), or the store closed.
            self._parked = None
            self._pump_done.set()

    def _pass(self) -> float | None:
        """Run the asyncio loop until it would wait; how long it would (None: until woken)."""
        self._selector.sleep = 0.0
        self._selector.turns = 0
        # trio names itself the running library for its whole run; asyncio runs this pass.
        local = self._sniffio.thread_local
        previous, local.name = local.name, "asyncio"
        try:
            self._loop.run_forever()
        finally:
            local.name = previous
        return self._selector.sleep


class _PollingSelector(selectors.DefaultSelector):
    """A selector that never blocks: where its loop would wait, it stops the loop instead.

    The loop asks for ``timeout=0`` whenever it has callbacks ready, so a wait is
    only ever asked for when nothing is ready and no I/O is: then the pass ends,
    with the wait it wanted in ``sleep`` for the pump to do on trio's side. A
    pass also ends after `TURNS` rounds with work in each (``sleep`` 0), so that
    a busy driver loop cannot keep the trio run's own tasks waiting.
    """

    TURNS = 8

    loop: asyncio.AbstractEventLoop
    sleep: float | None = 0.0
    turns = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        self.turns += 1
        if not events and timeout != 0:
            self.sleep = timeout
            self.loop.stop()
        elif self.turns >= self.TURNS:
            self.sleep = 0.0
            self.loop.stop()
        return events


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
