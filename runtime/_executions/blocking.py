"""`blocking(store)`: tether for sync code (Django, Flask, scripts), through an anyio blocking portal.

```python
with blocking("sqlite:///app.db") as rt:          # at the application's start
    paused = rt.run(refunds, {"amount": 50_000}, execution_id="refund-7")
    for item in rt.pending():                      # from any request thread
        rt.resume(refunds, item.execution_id, Resume(approved=True), path=item.agent_path)
```

One event loop, owned by an anyio blocking portal in a thread of its own, hosts
everything: the store is opened on it (a tether store belongs to the loop it
opened on) and every call crosses to it with the portal. Any number of threads
call at once; their calls run concurrently on that loop, as tasks of one
async program would. Nothing here runs a loop of its own making.
"""

from __future__ import annotations

import functools
import threading
from contextlib import ExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar, TypeVarTuple

import anyio
from anyio.from_thread import start_blocking_portal
from tether.stores import ConfigurationError, ExecutionNotFound, UsageError, open_store

from .control import cancel, send_message
from .query import query
from .runner import Runner
from .service import Executions

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from datetime import timedelta
    from types import TracebackType

    from anyio.from_thread import BlockingPortal
    from pydantic import BaseModel
    from tether.runtime._core.execution import RunResult
    from tether.runtime._core.interrupt import Resume
    from tether.stores import Execution, JournalEntry, PendingInterrupt, Store

    from .query import ActorState

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
Backend = Literal["asyncio", "trio"]


def blocking(store: Store | str, *, backend: Backend = "asyncio", backend_options: dict[str, Any] | None = None,
             shutdown_timeout: float | None = 30.0) -> BlockingRuntime:
    """A `BlockingRuntime` over ``store``: tether for threads that do not run an event loop.

    Nothing starts until it is entered (``with blocking(store) as rt:``) or opened
    (``rt = blocking(store).open()``, closed with ``rt.close()``).

    Args:
        store: A store, or a store URL (``sqlite:///app.db``, ``postgresql://...``,
            ``memory://``) as in `tether.stores.open_store`: handy in settings files.
            The runtime opens it on its event loop and closes it when it closes.
        backend: The event loop's anyio backend, ``"asyncio"`` or ``"trio"``.
        backend_options: Passed to the backend as `anyio.run` passes them
            (``{"use_uvloop": True}``, say).
        shutdown_timeout: Seconds closing waits for calls still running in other
            threads; past it they are cancelled (their runs stay recoverable). None
            waits for as long as they take.

    Raises:
        ConfigurationError: An unknown backend, a negative timeout, or a store URL
            tether cannot open.
    """
    return BlockingRuntime(store, backend=backend, backend_options=backend_options,
                           shutdown_timeout=shutdown_timeout)


class BlockingRuntime:
    """tether's execution API as plain blocking calls, safe from any number of threads at once.

    Every method blocks the calling thread until its call is done on the
    runtime's event loop, and returns what the async API returns; an error
    raised there (`AlreadyResumed`, `ExecutionNotFound`, a `ValidationError`)
    is raised here, as the same exception. Calls from many threads run
    concurrently: a thread waiting for its run to finish holds up nobody else.

    A runner runs on this runtime's store. A runner built without ``store=``
    is given it for as long as the runtime is open (as ``tether worker`` gives
    its own); one built with another store is refused, since its runs would
    go to a store this runtime does not own.

    Closing refuses new calls, waits for those in progress (up to
    ``shutdown_timeout``; then they are cancelled, and raise `UsageError` in
    their threads), then closes the store and stops the loop. Closing twice
    does nothing.

    Example:
        ```python
        rt = blocking(PostgresStore(dsn)).open()   # once, at the application's start
        atexit.register(rt.close)
        result = rt.run(refunds, {"amount": 50_000}, execution_id="refund-7")
        ```
    """

    def __init__(self, store: Store | str, *, backend: Backend = "asyncio",
                 backend_options: dict[str, Any] | None = None, shutdown_timeout: float | None = 30.0) -> None:
        if backend not in ("asyncio", "trio"):
            raise ConfigurationError(f"backend={backend!r}: a blocking runtime runs on 'asyncio' or 'trio'.")
        if shutdown_timeout is not None and shutdown_timeout < 0:
            raise ConfigurationError(f"shutdown_timeout={shutdown_timeout!r} must be 0 or more, or None.")
        self.store: Store = open_store(store) if isinstance(store, str) else store
        """The store every call of this runtime uses."""
        self.backend: Backend = backend
        self.backend_options = backend_options
        self.shutdown_timeout = shutdown_timeout
        # Thread side: the life cycle, and the calls in flight, under one condition.
        self._state: Literal["new", "open", "closing", "closed"] = "new"
        self._changed = threading.Condition()
        self._in_flight = 0
        self._portal: BlockingPortal | None = None
        self._stack: ExitStack | None = None
        self._adopted: list[Runner] = []
        # Loop side: touched only on the event loop's thread, so they need no lock.
        self._scopes: set[anyio.CancelScope] = set()
        self._cancelling = False

    # -- life cycle ------------------------------------------------------------------

    def open(self) -> Self:
        """Start the event loop in its thread and open the store on it; returns the runtime.

        Raises:
            UsageError: It was opened before (a runtime opens once), or this thread runs
                an event loop.
            StoreUnavailable, StoreCorrupted, SchemaVersionError: The store cannot be
                opened; the loop is stopped again and the runtime stays closed.
        """
        _refuse_inside_loop("open")
        with self._changed:
            if self._state != "new":
                raise UsageError(
                    f"This BlockingRuntime is {self._state}: a blocking runtime opens once. "
                    f"Create a new one with blocking(store) to open the store again."
                )
            self._state = "closed"  # unless everything below succeeds
            with ExitStack() as stack:
                portal = stack.enter_context(start_blocking_portal(self.backend, self.backend_options))
                stack.enter_context(portal.wrap_async_context_manager(self._hosting()))
                self._stack = stack.pop_all()
            self._portal = portal
            self._state = "open"
        return self

    def close(self) -> None:
        """Wait for the calls in progress, then close the store and stop the event loop.

        Calls made meanwhile are refused (`UsageError`). Calls still running after
        ``shutdown_timeout`` are cancelled at their next ``await``: a run cancelled
        so stays recoverable, as after a crash. Closing a closed (or never opened)
        runtime does nothing; a second thread closing at once waits for the first.
        """
        _refuse_inside_loop("close")
        with self._changed:
            if self._state == "new":
                self._state = "closed"
            if self._state == "closing":
                self._changed.wait_for(lambda: self._state == "closed")
            if self._state == "closed":
                return
            self._state = "closing"
            portal, stack = self._portal, self._stack
            drained = self._changed.wait_for(lambda: self._in_flight == 0, timeout=self.shutdown_timeout)
        assert portal is not None
        assert stack is not None
        try:
            if not drained:
                portal.call(self._cancel_calls)
                with self._changed:
                    self._changed.wait_for(lambda: self._in_flight == 0)
            stack.close()  # the store closes on the loop, then the portal stops it
        finally:
            with self._changed:
                for runner in self._adopted:
                    if runner.store is self.store:
                        runner.store = None
                self._adopted.clear()
                self._portal = self._stack = None
                self._state = "closed"
                self._changed.notify_all()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once `close` has begun (or before `open`): calls are refused."""
        return self._state != "open"

    # -- runs ------------------------------------------------------------------------

    def run(self, runner: Runner, input: Any = None, *, execution_id: str, timeout: timedelta | float | None = None,
            thread: str | None = None) -> RunResult:
        """Run an execution to its end or its first pause (see `Runner.run`); the id is an idempotency key.

        Returns:
            Its `RunResult`: ``completed`` with its output, ``paused`` with what waits
            for a decision (``pending_interrupt``), or ``failed``.
        """
        return self._call("run", functools.partial(self._bound(runner).run, input, execution_id=execution_id,
                                                   timeout=timeout, thread=thread))

    def resume(self, runner: Runner, execution_id: str, value: Resume | BaseModel | dict[str, Any] | None = None,
               *, path: str | None = None, force: bool = False, by: str | None = None) -> RunResult:
        """Resume a paused execution with a decision here, or recover a crashed one (no value).

        The decision claims the pending interrupt (the only one, or the one at
        ``path``) atomically: of two threads or processes resuming the same one,
        one runs on and the other gets `AlreadyResumed` (see `Runner.resume`).

        Raises:
            AlreadyResumed: Someone claimed it first; nothing changed.
            NoPendingInterrupt, LeaseHeld, ExecutionNotFound: As for `Runner.resume`.
            pydantic.ValidationError: ``value`` is not a valid decision; nothing was claimed.
        """
        return self._call("resume", functools.partial(self._bound(runner).resume, execution_id, value,
                                                      path=path, force=force, by=by))

    def start(self, runner: Runner, input: Any = None, *, execution_id: str,
              timeout: timedelta | float | None = None, thread: str | None = None) -> RunResult:
        """Record an execution for a worker (``tether worker``) to run, and return at once (``queued``)."""
        return self._call("start", functools.partial(self._bound(runner).start, input,
                                                     execution_id=execution_id, detach=True, timeout=timeout,
                                                     thread=thread))

    def decide(self, execution_id: str, value: Resume | BaseModel | dict[str, Any], *, path: str | None = None,
               seq: int | None = None, by: str | None = None) -> JournalEntry:
        """Record a decision without running anything here: a worker (or a later `resume`) carries it out.

        Needs no runner. The claim is the same as `resume`'s: exactly one decider wins.

        Returns:
            The ``resumed`` journal entry that holds the decision.

        Raises:
            AlreadyResumed, NoPendingInterrupt, LeaseHeld, ExecutionNotFound: As for `resume`.
        """
        return self._call("decide", functools.partial(Executions(self.store).decide, execution_id, value,
                                                      path=path, seq=seq, by=by))

    def cancel(self, execution_id: str, *, reason: str = "", by: str | None = None, force: bool = False,
               wait: float | None = None) -> RunResult:
        """Cancel an execution wherever it runs or waits (see `tether.runtime.cancel`)."""
        return self._call("cancel", functools.partial(cancel, self.store, execution_id, reason=reason, by=by,
                                                      force=force, wait=wait))

    def send_message(self, execution_id: str, message: BaseModel | dict[str, Any], *, path: str | None = None,
                     by: str | None = None) -> JournalEntry:
        """Send a durable message to an actor of an execution (see `tether.runtime.send_message`)."""
        return self._call("send_message", functools.partial(send_message, self.store, execution_id, message,
                                                            path=path, by=by))

    # -- reads -----------------------------------------------------------------------

    def pending(self, *, execution_id: str | None = None, path_prefix: str | None = None, limit: int = 100,
                after: PendingInterrupt | None = None) -> list[PendingInterrupt]:
        """Pending interrupts, oldest first; pass the last of a page as ``after`` for the next."""
        return self._call("pending", functools.partial(self.store.list_pending, execution_id=execution_id,
                                                       path_prefix=path_prefix, limit=limit, after=after))

    def execution(self, execution_id: str) -> Execution:
        """The execution's row: its status, runner, version, timestamps.

        Raises:
            ExecutionNotFound: No such execution.
        """
        return self._call("execution", self._execution, execution_id)

    def result(self, execution_id: str) -> RunResult:
        """Where the execution stands now, as a `RunResult` (its output, or what it waits for).

        Raises:
            ExecutionNotFound: No such execution.
        """
        return self._call("result", Executions(self.store).result, execution_id)

    def query(self, execution_id: str, path: str | None = None) -> ActorState:
        """The journaled state of one actor of an execution (see `tether.runtime.query`)."""
        return self._call("query", query, self.store, execution_id, path)

    def call(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Await ``fn(*args)`` on the runtime's event loop and return its result: the way to anything else.

        ``fn`` may use `store` and any of tether's async API; it runs as one of the
        loop's tasks, concurrently with the other threads' calls, and closing waits
        for it as for them.

        Example:
            ```python
            boundaries = rt.call(tether.runtime.history, rt.store, "refund-7")
            ```
        """
        return self._call("call", fn, *args)

    # -- inside ----------------------------------------------------------------------

    def _bound(self, runner: Runner) -> Runner:
        """``runner``, on this runtime's store; refused if it has another."""
        if not isinstance(runner, Runner):
            raise ConfigurationError(
                f"{runner!r} is not a runner: pass a Chain, Agent, Swarm or Supervisor (or another Runner)."
            )
        with self._changed:
            if runner.store is None and self._state == "open":
                runner.store = self.store
                self._adopted.append(runner)
        if runner.store is not self.store and self._state == "open":
            raise ConfigurationError(
                f"{type(runner).__name__} {runner.name!r} was built with another store ({runner.store!r}) than "
                f"this blocking runtime's ({self.store!r}). Build it without store= (the runtime gives it its "
                f"own), or open the runtime with blocking(<the runner's store>)."
            )
        return runner

    def _call(self, what: str, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run ``fn(*args)`` on the loop for the calling thread (``what`` names the method, for errors)."""
        _refuse_inside_loop(what)
        with self._changed:
            if self._state != "open":
                raise _not_open(self._state)
            portal = self._portal
            assert portal is not None
            self._in_flight += 1
        try:
            future = portal.start_task_soon(self._guarded, fn, args)
            try:
                return future.result()
            except BaseException:
                future.cancel()  # this thread gave up waiting (Ctrl-C): the call stops too
                raise
        finally:
            with self._changed:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._changed.notify_all()

    async def _guarded(self, fn: Callable[[*Ts], Awaitable[T]], args: tuple[*Ts]) -> T:
        """Run one call as a task of the loop that `close` can cancel."""
        if self._cancelling:  # it reached the loop after close gave up waiting
            raise _not_open("closing")
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                return await fn(*args)
            finally:
                self._scopes.discard(scope)
        raise UsageError(
            f"The blocking runtime closed while this call ran, and cancelled it after shutdown_timeout="
            f"{self.shutdown_timeout}s. An execution it ran stays recoverable: resume it without a value "
            f"(or leave it to `tether worker`)."
        )

    async def _cancel_calls(self) -> None:
        self._cancelling = True
        for scope in self._scopes:
            scope.cancel()

    async def _execution(self, execution_id: str) -> Execution:
        execution = await self.store.get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        return execution

    @asynccontextmanager
    async def _hosting(self) -> AsyncIterator[None]:
        """The runtime's life on its loop: the store is open while it lasts."""
        async with self.store:
            yield


def _not_open(state: str) -> UsageError:
    if state == "new":
        return UsageError(
            "This BlockingRuntime is not open yet. Use it inside 'with blocking(store) as rt:', or call "
            "rt.open() once at the application's start (and rt.close() at its end)."
        )
    if state == "closing":
        return UsageError(
            "This BlockingRuntime is closing: it takes no new calls while those in progress finish. Keep "
            "it open for the application's life, and close it only once requests have stopped."
        )
    return UsageError(
        "This BlockingRuntime is closed: its store and event loop are gone. Open a new one with "
        "blocking(store), and keep it open for the application's life (close it at exit)."
    )


def _refuse_inside_loop(what: str) -> None:
    """Refuse to block a thread that runs an event loop: everything on that loop would stop."""
    try:
        anyio.current_time()
    except RuntimeError:
        return  # no event loop here: blocking is what this thread may do
    raise UsageError(
        f"BlockingRuntime.{what}() blocks its thread, and this thread runs an event loop. In async code use "
        f"tether's async API (await runner.run(...), await runner.resume(...)); or call the blocking runtime "
        f"from a worker thread: await anyio.to_thread.run_sync(lambda: rt.{what}(...))."
    )
