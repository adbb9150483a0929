"""`ExecutionWorker`: a process that runs whatever executions its store has ready for it.

Ready means:

- a decision was recorded by any process (`Runtime.claim`, ``tether resume
  --detach``, the HTTP API);
- a durable timer is due, or an approval deadline passed (the worker decides it
  with its default, exactly as a person would);
- an execution was started detached (`start(..., detach=True)`);
- the process running an execution died, and its lease expired.

Any number of workers, in any number of processes and machines, share one
Postgres store: `Store.take_work` leases each execution to exactly one of them
(``FOR UPDATE SKIP LOCKED``), and a trigger's ``NOTIFY`` wakes them within
milliseconds of a decision anywhere, with a slow poll behind it. On SQLite, one
worker process at a time (a file lock says so).
"""

from __future__ import annotations

import contextlib
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Self

import anyio
import anyio.abc
from tether.runtime._core import telemetry
from tether.runtime._core.hooks import installed
from tether.runtime._core.owners import process_owner, tag
from tether.stores import (
    AlreadyResumed,
    ConfigurationError,
    ExecutionFinished,
    LeaseHeld,
    NoPendingInterrupt,
    StoreError,
)

from .queues import Queue, declared_queues
from .runner import runner_for
from .runtime import Runtime
from .schedules import Schedule, declared_schedules, due, tick_execution
from .service import Executions

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType

    from tether.runtime._core.execution import RunResult
    from tether.stores import Lease, Listener, Store

    from .retention import Retention
    from .runner import Runner

log = logging.getLogger("tether.runtime.worker")


class ExecutionWorker:
    """Runs ready executions of its runners, at most ``concurrency`` at a time, until stopped.

    Args:
        store: The store to work for.
        runners: The runners whose executions it takes (by root path).
        concurrency: Executions it runs at once.
        lease_seconds: How long a dead worker's executions wait before another takes them.
        poll_interval: Seconds between looks when no notification comes (timers are
            at most this late; Postgres notifications make decisions immediate).
        name: Its lease owner name (default: this process's identity and a random tag).
        on_result: Called with each result (an end, or a pause) of a run it made.
        notify: Listen for Postgres notifications (else poll only).
        clock: What approval deadlines are read on (default: the real clock, or
            the testing kit's `Clock`).

    Example:
        ```python
        async with ExecutionWorker(store, [refund_chain], concurrency=8) as worker:
            await worker.serve()            # until cancelled, or worker.stop()
        ```
    """

    def __init__(
        self,
        store: Store,
        runners: Sequence[Runner],
        *,
        concurrency: int = 4,
        lease_seconds: float = 30.0,
        poll_interval: float = 1.0,
        name: str | None = None,
        on_result: Callable[[RunResult], object] | None = None,
        notify: bool = True,
        clock: Callable[[], datetime] | None = None,
        queues: Sequence[Queue] | None = None,
        retention: Retention | None = None,
        schedules: Sequence[Schedule] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigurationError(f"concurrency={concurrency}: a worker runs at least one execution at a time.")
        if not runners:
            raise ConfigurationError("A worker needs runners (--app module:attr): it only takes their executions.")
        self.store = store
        self.queues: list[Queue] | None = None if queues is None else list(queues)
        """The queues whose executions it takes, by their limits (default: every queue declared in the process)."""
        self.schedules: list[Schedule] | None = None if schedules is None else list(schedules)
        """The schedules it starts ticks of (default: those declared in the process for one of its runners)."""
        self.retention = retention
        """What it prunes in the background, every ``retention.every`` (None: nothing)."""
        self.runners: list[Runner] = list(runners)
        self._roots = [runner.root_path for runner in self.runners]
        # A run that started on a version is taken only by a worker with that version: during a
        # deploy, old and new workers each take their own runs.
        self._versions: dict[str, list[str]] = {}
        for runner in self.runners:
            self._versions.setdefault(runner.root_path, []).extend([runner.version] if runner.version else [])
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        # The process's identity leads the name, so that a run it held when it died is taken
        # over at once by a recovery on the same machine (see _core/owners.py).
        self.name: str = name or f"{process_owner()}/w{tag()}"
        self.on_result = on_result
        self.clock = clock
        self.notify = notify
        self.completed: int = 0
        """Runs this worker took to an end or a pause."""
        self._running: set[str] = set()
        self._counted_at = -float("inf")
        self._deadlines_due = -float("inf")  # when `_take` next decides overdue interrupts (anyio time)
        self._wake = anyio.Event()
        self._stopping = False
        self._listener: Listener | None = None
        self._slot = contextlib.ExitStack()
        self._runtime: Runtime | None = None

    async def __aenter__(self) -> Self:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.store.worker_slot())  # refused at once if the store admits no other worker
            await self._listen()
            self._slot = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        listener, self._listener = self._listener, None
        try:
            if listener is not None:
                await listener.aclose()
        finally:
            self._slot.close()

    def stop(self) -> None:
        """Take no more work; `serve` returns once what it runs has finished."""
        self._stopping = True
        self._poke()

    async def serve(self, *, until_idle: bool = False, grace: float = 30.0) -> None:
        """Take and run ready executions until `stop` (or, with ``until_idle``, until none is left).

        On stop, running executions get ``grace`` seconds to reach their end or a
        pause; the rest are stopped and their leases handed back at once, so
        another worker continues them from their journals.
        """
        # One runtime for all of serve hosts every run it takes; each run's tree is its own.
        async with Runtime(self.store, lease_seconds=self.lease_seconds, clock=self.clock) as self._runtime, \
                anyio.create_task_group() as tg:
            await self._declare()
            if self.retention is not None:
                if until_idle:
                    await self._retain(self.retention)  # once, before the work: a batch job cleans up as it goes
                else:
                    tg.start_soon(self._retain_every, self.retention)
            while not self._stopping:
                # Idle is judged from before the take: a run that ends while the take is
                # in flight frees room the take could not see, so that take proves nothing.
                idle = not self._running
                taken = await self._take(tg)
                if until_idle and idle and not taken:
                    break
                with anyio.move_on_after(self.poll_interval):
                    await self._wake.wait()
                self._wake = anyio.Event()
            with anyio.move_on_after(grace):
                while self._running:
                    await self._wake.wait()
                    self._wake = anyio.Event()
            tg.cancel_scope.cancel()

    async def _take(self, tg: anyio.abc.TaskGroup) -> int:
        """Decide due deadlines, then lease as many ready executions as there is room for."""
        try:
            now = anyio.current_time()
            if now >= self._deadlines_due:
                # Once a poll interval, not at every wake: a notification or a run's end
                # wakes the worker far more often than a deadline can come due.
                self._deadlines_due = now + self.poll_interval
                await self._fire_deadlines()
            if self.schedules:
                await self._fire_schedules()
            if telemetry.active is not None:
                await self._count_pending()
            free = self.concurrency - len(self._running)
            if free <= 0:
                return 0
            leases = await self.store.take_work(owner=self.name, lease_seconds=self.lease_seconds, limit=free,
                                                roots=self._roots, versions=self._versions)
            leases += await self._take_queued(free - len(leases))
            if self.notify and (self._listener is None or self._listener.closed):
                await self._listen()  # the server restarted, say: notifications again
        except StoreError as exc:  # the database is away: try again at the next poll
            log.warning("worker %s cannot reach the store: %s", self.name, exc)
            return 0
        for lease in leases:
            self._running.add(lease.execution_id)
            tg.start_soon(self._run, lease)
        return len(leases)

    async def _fire_schedules(self) -> None:
        """Start the executions of the ticks that came, then move each schedule on past them."""
        now = self._runtime.hooks.now() if self._runtime else (self.clock or installed().now)()
        ours = {schedule.name for schedule in self.schedules or ()}
        executions = Executions(self.store)
        for row in await self.store.list_schedules():
            if row.name not in ours or row.paused:
                continue
            ticks, passed = due(row, now)
            if passed is None:
                continue
            started = [tick_execution(row, tick) for tick in ticks]
            for new in started:
                await executions.enqueue(new)  # an id per tick: started once, by whoever
                (self._runtime.hooks if self._runtime else installed()).faults.reached("after_tick")
            if await self.store.advance_schedule(row.name, seen=row.last_tick, to=passed) and started:
                log.info("worker %s started %s for schedule %s", self.name,
                         ", ".join(new.execution_id for new in started), row.name)

    async def _retain_every(self, retention: Retention) -> None:
        while True:
            await self._retain(retention)
            await anyio.sleep(retention.every.total_seconds())

    async def _retain(self, retention: Retention) -> None:
        try:
            deleted = await retention.apply(self.store, now=self._runtime.hooks.now if self._runtime else self.clock)
        except StoreError as exc:  # the database is away: the next period tries again
            log.warning("worker %s could not apply its retention policy: %s", self.name, exc)
            return
        if deleted:
            log.info("worker %s pruned %d finished executions (%r)", self.name, deleted, retention)

    async def _count_pending(self) -> None:
        """What the pending-interrupt gauges report: counted at most once a poll interval."""
        now = anyio.current_time()
        if now < self._counted_at + self.poll_interval:
            return
        self._counted_at = now
        count = await self.store.count_pending()
        oldest = await self.store.list_pending(limit=1) if count else []
        age = (datetime.now(UTC) - oldest[0].created_at).total_seconds() if oldest else 0.0
        telemetry.saw_pending(repr(self.store), count, age)
        telemetry.saw_queues(repr(self.store), [(row.queue, row.waiting, row.running)
                                                for row in await self.store.queue_stats() if row.key is None])

    async def _declare(self) -> None:
        """Record the queues and schedules it serves, as this process declares them, before it takes work."""
        if self.queues is None:
            self.queues = declared_queues()
        for queue in self.queues:  # the limits its claims read
            await self.store.declare_queue(queue.limits)
        if self.schedules is None:  # the process's schedules of the runners it has
            self.schedules = [s for s in declared_schedules() if s.runner.root_path in self._roots]
        now = self._runtime.hooks.now() if self._runtime else (self.clock or installed().now)()
        for schedule in self.schedules:  # a new one counts from now; a known one keeps its last tick
            await self.store.declare_schedule(schedule.row(last_tick=now))

    async def _take_queued(self, free: int) -> list[Lease]:
        """What the queues admit to this worker, in their order, up to ``free``."""
        leases: list[Lease] = []
        for queue in self.queues or ():
            if len(leases) >= free:
                break
            try:
                leases += await self.store.take_queued(queue.name, owner=self.name, lease_seconds=self.lease_seconds,
                                                       limit=free - len(leases), roots=self._roots,
                                                       versions=self._versions)
            except StoreError as exc:  # what was taken runs; the rest waits for the next poll
                log.warning("worker %s cannot take from queue %s: %s", self.name, queue.name, exc)
                break
        return leases

    async def _fire_deadlines(self) -> None:
        await decide_overdue(self.store, now=self._runtime.hooks.now if self._runtime else self.clock)

    async def _run(self, lease: Lease) -> None:
        try:
            # Its row and journal in one statement: the run needs both, and the lease is ours.
            loaded = await self.store.load_execution(lease.execution_id)
            execution, journal = loaded if loaded is not None else (None, None)
            runner = runner_for(self.runners, execution) if execution is not None else None
            if runner is None:  # take_work only hands out our roots; deleted meanwhile
                await self.store.release_lease(lease)
                return
            runner.store = self.store
            if execution is not None and execution.queue is not None and lease.epoch == 1:  # a start, just admitted
                telemetry.admitted(execution.queue, (datetime.now(UTC) - execution.created_at).total_seconds())
            result = await runner.drive(lease, execution=execution, journal=journal, runtime=self._runtime)
            self.completed += 1
            log.info("worker %s ran %s: %s", self.name, lease.execution_id, result.status,
                     extra={"execution_id": lease.execution_id, "agent_path": runner.root_path,
                            "status": result.status})
            if self.on_result is not None:
                self.on_result(result)
        except ConfigurationError as exc:
            # A definition its journal does not fit (of its version): a worker with its code takes it.
            log.warning("worker %s leaves %s to a worker with its code (its lease lapses in %g s): %s",
                        self.name, lease.execution_id, self.lease_seconds, exc)
        except Exception:
            log.exception("worker %s could not run %s; its lease expires for another to try",
                          self.name, lease.execution_id)
        finally:
            self._running.discard(lease.execution_id)
            self._poke()

    async def _listen(self) -> None:
        if not self.notify:
            return
        try:
            self._listener = await self.store.listen(self._poke)
        except StoreError as exc:
            log.warning("worker %s polls only: cannot listen for notifications (%s)", self.name, exc)

    def _poke(self) -> None:
        self._wake.set()


async def serve_executions(
    store: Store,
    runners: Sequence[Runner],
    *,
    concurrency: int = 4,
    lease_seconds: float = 30.0,
    poll_interval: float = 1.0,
    task_status: anyio.abc.TaskStatus[ExecutionWorker] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Continue, in this process, the executions of ``runners`` that are ready, until cancelled.

    What a ``tether worker`` does, inside an application: decisions recorded by
    any process (``tether resume``, the approvals page, the API) are carried out,
    durable timers and approval deadlines fire, detached starts start, and runs
    whose process died are recovered. Run it in the application's task group;
    ``await tg.start(serve_executions, store, runners)`` returns the worker once
    it listens (call ``worker.stop()`` to let running executions finish first).

    On SQLite, one such process per database file (a file lock says so); a
    decision is taken up within ``poll_interval``. On Postgres, any number, each
    woken by a notification within milliseconds.

    Example:
        ```python
        async with SQLiteStore("app.db") as store, anyio.create_task_group() as tg:
            worker = await tg.start(serve_executions, store, [refund_chain])
            ...  # the application's own work; decisions made anywhere are carried out here
            worker.stop()  # at shutdown: what runs finishes (or pauses), then the group ends
        ```
    """
    async with ExecutionWorker(store, runners, concurrency=concurrency, lease_seconds=lease_seconds,
                               poll_interval=poll_interval) as worker:
        task_status.started(worker)
        await worker.serve()


async def decide_overdue(store: Store, roots: Sequence[str] | None = None, *,
                         now: Callable[[], datetime] | None = None) -> list[str]:
    """Claim every pending interrupt whose deadline has passed with its default.

    Args:
        store: Where the interrupts are pending.
        roots: Only those of executions under these root paths (default: all).
        now: The clock deadlines are read on (default: the installed hooks').

    Returns:
        The ids of the executions decided (a worker takes them up as ready work).
    """
    decided: list[str] = []
    for row in await store.list_pending(due_before=(now or installed().now)(), limit=100):
        if roots is not None and not any(row.agent_path == root or row.agent_path.startswith(root + "/")
                                         for root in roots):
            continue
        try:
            await store.claim(row.execution_id, row.default, path=row.agent_path, seq=row.seq, by="deadline")
            decided.append(row.execution_id)
            log.info("deadline passed for %s at %s: decided %s", row.execution_id, row.agent_path, row.default)
        except (AlreadyResumed, NoPendingInterrupt, LeaseHeld, ExecutionFinished):
            pass  # a person (or another worker) decided first
    return decided
