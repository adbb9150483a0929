"""`crash_at`: stop a run in this process exactly as a SIGKILL at one boundary would."""

from __future__ import annotations

import functools
import inspect
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from tether.runtime._core import hooks
from tether.runtime._core.events import verdict_of
from tether.stores import Lease, StartResult

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from contextvars import Token
    from types import TracebackType

    from tether.stores import NewEntry, Store

_WRITES = frozenset({"append", "suspend"})
"""The store calls that commit a journal write: one boundary each."""


class Crashed(BaseException):
    """Raised inside a run that `crash_at` stopped: the simulated process is dead.

    A `BaseException`, like the cancellation it stands for, so that no
    ``except Exception`` in the code under test can carry on after it.
    `crash_at` absorbs it on the way out.
    """


@dataclass
class CrashPoint:
    """Where `crash_at` stops a run, and what it saw.

    Attributes:
        at: The boundary: an entry's label (``"node:charge"``,
            ``"turn:2/tool:charge"``), a full path (``"chain:refund/node:charge"``),
            or the number of a journal write, counted from 1 across every run
            inside the block.
        happened: Whether the run reached the boundary and stopped there.
        writes: The journal writes committed inside the block (the last one is
            the boundary, if it happened).
        boundaries: ``path/label`` of the last entry of each of those writes, in order.
        died: Set at the moment of the crash; code in worker threads can wait on it.
    """

    at: str | int
    happened: bool = False
    writes: int = 0
    boundaries: list[str] = field(default_factory=list)
    died: threading.Event = field(default_factory=threading.Event, repr=False)
    _leases: dict[str, Lease] = field(default_factory=dict, repr=False)
    _lock: anyio.Lock | None = field(default=None, repr=False)

    def _serial(self) -> anyio.Lock:
        # One store call at a time while a crash point is armed: no write can be in flight
        # when the boundary's commits, so none slips into the store after the death.
        if self._lock is None:
            self._lock = anyio.Lock()
        return self._lock

    def _check_alive(self, call: str, args: tuple[Any, ...]) -> None:
        if self.happened:
            if call == "put_idempotent":
                hooks.installed().cut(args[1])  # a body ran concurrently with the death: its record is lost
            raise Crashed(f"the process died at {self.at!r}; nothing more reaches the store")

    def _saw(self, value: Any) -> None:
        if isinstance(value, StartResult):
            value = value.lease
        if isinstance(value, Lease):
            self._leases[value.execution_id] = value
        elif isinstance(value, list):
            for item in value:
                self._saw(item)

    def _committed(self, entries: list[NewEntry]) -> None:
        self.writes += 1
        self.boundaries.append(f"{entries[-1].path}/{entries[-1].label}")
        if isinstance(self.at, int):
            hit = self.writes == self.at
        else:
            hit = any(hooks.names(self.at, e.path, e.label) for e in entries)
        if hit:
            self.happened = True
            self.died.set()
            # As after a SIGKILL, the dead run keeps its leases; what the test does next
            # takes them over at once, as it would once they expired.
            for lease in self._leases.values():
                hooks.installed().heirs[lease.execution_id] = lease.owner
            raise Crashed(f"the process died just after the journal write of {self.boundaries[-1]!r}")

    def _released(self, lease: Lease) -> None:
        self._leases.pop(lease.execution_id, None)

    def _wrap(self, store: Store) -> Store:
        return _Doomed(store, self)  # type: ignore[return-value]


class _Doomed:
    """A store seen through a `CrashPoint`: every call fails once the process is 'dead'."""

    def __init__(self, store: Store, point: CrashPoint) -> None:
        self._store = store
        self._point = point

    def __repr__(self) -> str:
        return f"{self._store!r} (crash_at {self._point.at!r})"

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute
        point = self._point

        @functools.wraps(attribute)
        async def call(*args: Any, **kwargs: Any) -> Any:
            # Refused at once when dead, before any checkpoint: the caller may be a worker
            # thread whose task the death has already cancelled.
            point._check_alive(name, args)
            async with point._serial():
                point._check_alive(name, args)
                for value in args:
                    point._saw(value)
                result = await attribute(*args, **kwargs)
                point._saw(result)
                if name == "release_lease":
                    point._released(args[0])
                    # A run's last boundary goes with the release of its outcome: it is a
                    # journal write like any other (the verdict beside it is not one).
                    closing = [e for e in kwargs.get("entries", ()) if verdict_of(e) is None]
                    if closing:
                        point._committed(closing)
                if name in _WRITES:
                    point._committed(list(args[1]))
                return result

        return call


class crash_at:  # lower case: used like a function, as anyio.move_on_after is
    """Stop the runs inside the block exactly as a SIGKILL at one boundary would.

    Every `Runtime` created inside the block (so every ``run``, ``resume`` or
    ``start`` of a `Chain`, `Agent`, `Swarm` or `Supervisor`) sees its store
    through the crash point. Once the boundary's journal write has committed,
    the process counts as dead: that write stands, and nothing after it reaches
    the store, not another boundary, not an ``@idempotent`` record, not even the
    lease handback. Tasks of the run are cancelled at their next ``await``; a
    sync function already running in a worker thread finishes, but nothing it
    returns is written. So a side effect running in a parallel branch at that
    moment is done and unrecorded, as a real crash could leave it: recovery
    runs it again (`Effects` calls such a key *cut*). While the block is open
    the runs' store calls go one at a time, so that no write is in flight at
    the boundary. The block ends quietly, and ``point.happened`` says the
    crash took place.

    The dead run's lease is left behind, as a real crash leaves it. The first
    ``resume``, ``run`` or ``cancel`` of that execution afterwards, in this
    process, takes it over at once, as one on the same machine does after a
    real SIGKILL; a worker waits for the expiry as usual.

    Raises:
        AssertionError: On leaving the block, if the runs never reached the
            boundary (the message lists the boundaries they did write).

    Example:
        ```python
        async with crash_at("node:charge") as point:
            await chain.run({"amount": 120}, execution_id="r-1")
        assert point.happened
        result = await chain.resume("r-1")      # recovery, as in a new process
        assert result.status == "completed"
        ```
    """

    def __init__(self, at: str | int) -> None:
        if isinstance(at, bool) or (isinstance(at, int) and at < 1) or (isinstance(at, str) and not at):
            raise ValueError(
                f"crash_at({at!r}): give a boundary's label (e.g. 'node:charge') or the number of a "
                f"journal write, counting from 1."
            )
        self.point: CrashPoint = CrashPoint(at)
        self._token: Token[Callable[[Store], Store] | None] | None = None

    async def __aenter__(self) -> CrashPoint:
        self._token = hooks.wrapping.set(self.point._wrap)
        return self.point

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self._token is not None:
            hooks.wrapping.reset(self._token)
        point = self.point
        if not point.happened:
            if exc is not None:
                return False
            raise AssertionError(
                f"crash_at({point.at!r}): the run never reached that boundary. It committed "
                f"{point.writes} journal writes: {point.boundaries}"
            )
        return exc is None or _only_the_crash(exc)


def _only_the_crash(exc: BaseException) -> bool:
    """Whether an error is the simulated death itself, with the cancellations it caused, however grouped."""
    leaves = list(_root_causes(exc))
    cancelled = anyio.get_cancelled_exc_class()
    return any(isinstance(leaf, Crashed) for leaf in leaves) and all(
        isinstance(leaf, Crashed | cancelled) for leaf in leaves
    )


def _root_causes(exc: BaseException) -> Iterator[BaseException]:
    """The errors inside groups, each followed down its explicit ``raise ... from`` chain."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _root_causes(inner)
    elif isinstance(exc, Crashed | anyio.get_cancelled_exc_class()) or exc.__cause__ is None:
        yield exc
    else:
        yield from _root_causes(exc.__cause__)

