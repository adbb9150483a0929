"""Supervision: each actor's children run in its own task group, under a strategy.

The actor tree IS the task tree. An actor's incarnation is one task of its
parent's group; its children are tasks of a group inside it. A child that
crashes does not tear its siblings down by itself: the group catches the exit
and applies the parent's `SupervisionStrategy`, the child's `RestartPolicy` and
the restart intensity (Erlang/OTP semantics). Children start in order and stop
in reverse order, each within its shutdown timeout.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from pydantic import TypeAdapter
from tether.stores import ConfigurationError, SerializationError, StaleLease, Store, UsageError

from . import delta as _delta, telemetry
from .actor import Actor, ActorContext, ActorFactory, segment
from .errors import ActorCrashed, ActorStopped, SupervisionEscalated
from .execution import ExecutionState, Start
from .idempotent import Step, ask_alias, current_step
from .interrupt import Answer, CallScope, Interrupted, Parked, Suspended, Suspension, current_call
from .journal import ActorJournal, MessageCodec
from .messages import Awaiting
from .policies import RestartPolicy, SupervisionStrategy
from .ref import ActorRef, Envelope, MsgT, Reply, ReplyT

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from .hooks import Hooks


@dataclass(frozen=True)
class Settings:
    """Runtime-wide settings every group hands down."""

    store: Store | None
    mailbox_size: int
    lease_seconds: float
    snapshot_every: int
    owner: str
    hooks: Hooks


class Slot:
    """One child position: its spec, its mailbox (kept across restarts), its incarnation."""

    def __init__(self, group: Group, factory: ActorFactory, path: str, restart: RestartPolicy,
                 shutdown_timeout: float, journal: ActorJournal | None, *, root: bool = False,
                 fresh: bool = False) -> None:
        self.group = group
        self.execution: ExecutionState | None = group.execution
        self.root = root  # the root actor of an execution
        self.fresh: bool = fresh  # its journal is known to be empty: the first incarnation loads nothing
        self.factory = factory
        self.path = path
        self.restart = restart
        self.shutdown_timeout = shutdown_timeout
        self.journal = journal
        self.ref: ActorRef[Any, Any] = ActorRef(self)
        self._send: MemoryObjectSendStream[Envelope]
        self._recv: MemoryObjectReceiveStream[Envelope]
        self._send, self._recv = anyio.create_memory_object_stream[Envelope](group.settings.mailbox_size)
        self.redeliver: deque[Envelope] = deque()
        self.crashed: Envelope | None = None  # the message a non-durable handler crashed on
        self.parked: Envelope | None = None   # the message an interrupt() suspended
        self.decisions: dict[int, dict[str, list[Answer]]] = {}  # resume decisions per inbox seq
        self.waiters: dict[int, list[Reply]] = {}  # repeated asks waiting for a message
        self.steps: dict[int, dict[str, Any]] = {}  # durable step results per inbox seq
        self.suspended: dict[int, list[str]] = {}  # the call paths each message suspended at
        self.finish: tuple[bool, Any] = (False, None)
        self.generation = 0         # which incarnation is current
        self.cold: bool = True          # next incarnation is the first in this process
        self.quitting: bool = False     # leave the loop after the current message
        self.terminated: bool = False   # never runs again
        self.started: bool = False
        self.idle_scope: anyio.CancelScope | None = None
        self.scope: anyio.CancelScope = anyio.CancelScope()
        self.done: anyio.Event = anyio.Event()

    async def deliver(self, envelope: Envelope) -> None:
        if self.terminated:
            raise ActorStopped(self.path)
        if self.journal is not None:
            if envelope.ask_id is not None and self._answer_repeat(envelope):
                return
            envelope.inbox_seq = await self.journal.record_inbox(envelope.message, envelope.ask_id)
            if self.parked is not None:
                # Parked until the execution resumes: the message waits in the journal,
                # and an asker learns now that the tree is suspending.
                if envelope.reply is not None:
                    envelope.reply.fail(Suspended(self.path))
                return
        try:
            await self._send.send(envelope)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise ActorStopped(self.path) from None

    def _answer_repeat(self, envelope: Envelope) -> bool:
        """An ask made again (its handler is running again): answer from the first one."""
        assert self.journal is not None
        assert envelope.ask_id is not None
        known = self.journal.asks.get(envelope.ask_id)
        if known is None:
            return False
        seq, handled, reply = known
        if envelope.reply is None:
            return True
        if handled:
            envelope.reply.resolve(reply)
        elif self.parked is not None:
            # Parked until the execution resumes: nothing will answer before the tree stops.
            envelope.reply.fail(Suspended(self.path))
        else:
            self.waiters.setdefault(seq, []).append(envelope.reply)
        return True

    async def stop(self) -> None:
        await self.group.stop_child(self)

    @property
    def accepted(self) -> int:
        """Messages its journal holds as accepted (0 for an actor that keeps none)."""
        return 0 if self.journal is None else self.journal.accepted

    # -- one incarnation ---------------------------------------------------------

    async def run(self, task_status: anyio.abc.TaskStatus[None]) -> None:
        instance = self.factory()
        if not isinstance(instance, Actor):
            raise ConfigurationError(f"The factory for {self.path!r} returned {instance!r}, not an Actor.")
        settings = self.group.settings
        # The journal of a standalone durable actor, which keeps its own lease (an execution's
        # is kept by the runtime's drive, which rides out a store's short outages).
        standalone = self.journal if self.execution is None else None
        async with anyio.create_task_group() as tg:
            children = Group(tg, self.path, type(instance).supervision, type(instance).max_restarts,
                             type(instance).within, settings, self.execution)
            try:
                instance.context = ActorContext(self.path, self.ref, children)
                await self._load_state(instance)
                if standalone is not None:
                    tg.start_soon(standalone.holder.keep, settings.lease_seconds)
                await instance.started()
                self.started = True
                task_status.started()
                await self._loop(instance)
                if self.quitting:
                    await instance.stopping()
            finally:
                with anyio.CancelScope(shield=True):
                    await children.stop_all()
                children.close()
                if standalone is not None or children.watching:  # a leaf runs nothing here: no cancel to pay for
                    tg.cancel_scope.cancel()

    async def _load_state(self, instance: Actor[Any]) -> None:
        state_type = type(instance).state_type
        if self.journal is None or self.fresh:
            self.fresh = self.cold = False
            instance.state = state_type()
            return
        loaded = await self.journal.load(state_type().model_dump(mode="json"))
        instance.state = state_type.model_validate(loaded.state)
        self.decisions = loaded.decisions
        self.steps = loaded.steps
        self.suspended = loaded.suspended
        if self.root and loaded.finished[0] and self.execution is not None:
            # It finished before its process died, between that entry and the release.
            self.finish = loaded.finished
            self.execution.end("completed", loaded.finished[1])
        if self.cold:
            # Accepted before the last process died, never handled: handle them first.
            self.redeliver.extend(Envelope(message, inbox_seq=seq, ask_id=ask_id, replayed=True)
                                  for seq, message, ask_id in loaded.unhandled)
        self.cold = False

    async def _loop(self, instance: Actor[Any]) -> None:
        while not self.quitting:
            if self.parked is not None or self.finish[0]:
                # Suspended or finished: handle nothing more until the execution is torn
                # down, but answer late asks (a send can land after the park) at once.
                # The messages stay in the journal for the resumed run.
                with anyio.CancelScope() as self.idle_scope:
                    async for late in self._recv:
                        if late.reply is not None:
                            late.reply.fail(Suspended(self.path) if self.parked else ActorStopped(self.path))
                return
            envelope = self.redeliver.popleft() if self.redeliver else None
            if envelope is None:
                with anyio.CancelScope() as self.idle_scope:
                    try:
                        envelope = await self._recv.receive()
                    except anyio.EndOfStream:
                        return
                self.idle_scope = None
                if envelope is None:
                    continue  # woken to quit
            await self._handle(instance, envelope)

    async def _handle(self, instance: Actor[Any], envelope: Envelope) -> None:
        if telemetry.active is None:
            await self._handled(instance, envelope)
            return
        with telemetry.message(self.journal, self.path, envelope.message, envelope.sender, envelope.inbox_seq):
            await self._handled(instance, envelope)

    async def _handled(self, instance: Actor[Any], envelope: Envelope) -> None:
        before = instance.state.model_dump(mode="json") if self.journal else None
        step = call = None
        if self.journal is not None:
            # @idempotent calls and asks are keyed by the message's journal entry:
            # handling it again (after a crash or a resume) finds the same records.
            reusing = self.journal.holder.reusing
            step = current_step.set(Step(self.journal, f"inbox:{envelope.inbox_seq}", envelope.inbox_seq,
                                         self.steps.get(envelope.inbox_seq or 0, {}), envelope.replayed or reusing,
                                         alias=ask_alias(self.journal.lease.execution_id, envelope.ask_id)
                                         if reusing else None))
            if self.execution is not None:  # interrupt() belongs to executions only
                decisions = self.decisions.get(envelope.inbox_seq or 0, {})
                call = current_call.set(CallScope(self.path, {p: list(v) for p, v in decisions.items()},
                                                  suspended=tuple(self.suspended.get(envelope.inbox_seq or 0, ()))))
        try:
            try:
                reply = await instance.receive(envelope.message)
            except BaseException as exc:
                signals = _suspension_signals(exc)
                if signals is not None and self.journal is None:
                    # Nothing here could park and come back: a failure of this actor, not a pause.
                    raise UsageError(
                        f"{self.path!r} is not durable, so it cannot pause: it asked an actor that paused, "
                        f"or called interrupt() or a durable sleep. Spawn it with durable=True."
                    ) from exc
                if signals is None:
                    failure = _failure(exc)
                    if failure is exc:
                        raise
                    raise failure from None
                await self._suspend(instance, envelope, before or {}, signals)
                return
            if self.journal is not None:
                after = instance.state.model_dump(mode="json")
                if envelope.ask_id is not None:
                    reply = _as_json(reply)  # what a repeated ask will get back, so now too
                await self.journal.record_handled(envelope.inbox_seq, _delta.diff(before or {}, after),
                                                  after, reply, self.finish if self.root else (False, None))
        except Exception as exc:
            if self.journal is not None and not isinstance(exc, StaleLease):
                # The state rolls back to the journal; the message is handled again.
                envelope.replayed = True
                self.redeliver.appendleft(envelope)
            else:
                # Answered by the supervisor once it has decided what happens next.
                self.crashed = envelope
            raise
        except anyio.get_cancelled_exc_class():
            if self.journal is not None:
                envelope.replayed = True
                self.redeliver.appendleft(envelope)
            elif envelope.reply is not None:
                envelope.reply.fail(ActorStopped(self.path))
            raise
        finally:
            if step is not None:
                current_step.reset(step)
            if call is not None:
                current_call.reset(call)
        if envelope.reply is not None:
            envelope.reply.resolve(reply)
        for waiter in self.waiters.pop(envelope.inbox_seq or 0, []):
            waiter.resolve(reply)
        if self.finish[0] and self.execution is not None:
            self.execution.end("completed", self.finish[1])

    async def _suspend(self, instance: Actor[Any], envelope: Envelope, before: dict[str, Any],
                       signals: list[Suspension]) -> None:
        """Park the message an interrupt() stopped; its changes to the state are dropped."""
        assert self.journal is not None
        instance.state = type(instance.state).model_validate(before)
        self.finish = (False, None)
        for signal in signals:
            if isinstance(signal, Interrupted):  # the innermost actor records the pending row
                with telemetry.interrupt(self.journal, signal.path, signal.reason):
                    await self.journal.record_suspension(envelope.inbox_seq, before, signal.path,
                                                         signal.reason, signal.context, signal.expect,
                                                         signal.timeout, signal.default)
            elif isinstance(signal, Parked) and self.execution is not None:
                self.execution.wake_at(signal.due, here=signal.here)  # a durable sleep: no row, a time to wake
            elif isinstance(signal, Awaiting) and self.execution is not None:
                self.execution.awaits(signal.path, signal.expect, signal.seen)  # a message wakes it
                if signal.due is not None:
                    self.execution.wake_at(signal.due)
        self.parked = envelope
        telemetry.paused()
        suspended = Suspended(self.path)
        waiting = envelope.reply is not None or bool(self.waiters.get(envelope.inbox_seq or 0))
        if envelope.reply is not None:
            envelope.reply.fail(suspended)
        for waiter in self.waiters.pop(envelope.inbox_seq or 0, []):
            waiter.fail(suspended)
        # Messages queued behind the parked one stay in the journal for the resumed run;
        # whoever waits for them re-asks then.
        for queued in self._drain():
            if queued.reply is not None:
                queued.reply.fail(suspended)
        if self.execution is not None and (self.root or not waiting):
            # Nobody above will hear of it through a reply: pause the execution from here.
            self.execution.end("paused")

    def _drain(self) -> list[Envelope]:
        drained = list(self.redeliver)
        self.redeliver.clear()
        while True:
            try:
                drained.append(self._recv.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return drained

    def answer_crash(self, error: BaseException | None) -> None:
        """Fail the ``ask`` whose message crashed the handler, if any."""
        envelope, self.crashed = self.crashed, None
        if envelope is not None and envelope.reply is not None:
            envelope.reply.fail(ActorCrashed(self.path, error) if error else ActorStopped(self.path))

    def close(self, error: BaseException | None) -> None:
        """Refuse new messages and fail every waiting ``ask``."""
        self.terminated = True
        self.answer_crash(error)
        self._send.close()
        leftovers = self._drain()
        self._recv.close()
        for envelope in leftovers:
            if envelope.reply is not None:
                envelope.reply.fail(ActorCrashed(self.path, error) if error else ActorStopped(self.path))


class Group:
    """The children of one actor (or of the runtime), under one strategy."""

    def __init__(self, tg: anyio.abc.TaskGroup, owner_path: str, strategy: SupervisionStrategy,
                 max_restarts: int, within: float, settings: Settings,
                 execution: ExecutionState | None = None) -> None:
        self._tg = tg
        self.execution = execution
        self.owner_path = owner_path
        self.strategy = strategy
        self.max_restarts = max_restarts
        self.within = within
        self.settings = settings
        # Start order is the dict's order; lookups by path stay O(1) with many children.
        self.children: dict[str, Slot] = {}
        self._restarts: deque[float] = deque()
        self._exits_send, self._exits_recv = anyio.create_memory_object_stream[
            tuple[Slot, int, BaseException | None]
        ](math.inf)
        self.watching: bool = False  # the watcher starts with the first child: most actors have none

    async def start_child(
        self,
        factory: ActorFactory[MsgT, ReplyT],
        name: str,
        *,
        restart: RestartPolicy = "permanent",
        shutdown_timeout: float = 5.0,
        durable: bool = False,
        execution_id: str | None = None,
        root: bool = False,
        fresh: bool = False,
    ) -> ActorRef[MsgT, ReplyT]:
        kind = getattr(factory, "kind", "actor")
        own = segment(kind, name)
        path = f"{self.owner_path}/{own}" if self.owner_path else own
        if path in self.children:
            raise ConfigurationError(f"An actor already runs at {path!r}; stop it or pick another name.")
        journal = None
        if self.execution is not None and not durable:
            raise ConfigurationError(
                f"Cannot spawn {path!r} inside execution {self.execution.execution_id!r} without "
                f"durable=True: a child that keeps no journal would lose its part of the run on a "
                f"pause or a crash."
            )
        if durable:
            store = self.settings.store
            if store is None:
                raise ConfigurationError(
                    f"Cannot spawn durable actor {path!r}: the runtime has no store. "
                    f"Use Runtime(store) with a SQLiteStore or PostgresStore."
                )
            codec = MessageCodec(path, (Start, *getattr(factory, "messages", ())))
            if self.execution is not None:
                # Inside an execution every actor journals into it, under its one lease.
                journal = ActorJournal(self.execution.holder, path, codec, self.settings.snapshot_every,
                                       self.settings.hooks)
            else:
                journal = await ActorJournal.open(
                    store, execution_id or path, path, getattr(factory, "__qualname__", kind), codec,
                    owner=self.settings.owner, lease_seconds=self.settings.lease_seconds,
                    snapshot_every=self.settings.snapshot_every, hooks=self.settings.hooks,
                )
        slot = Slot(self, factory, path, restart, shutdown_timeout, journal, root=root, fresh=fresh)
        if not self.watching:
            self.watching = True
            self._tg.start_soon(self.watch)
        self.children[path] = slot
        try:
            await self._launch(slot)
        except BaseException:
            del self.children[path]
            slot.close(None)
            # A standalone actor gives its own lease back; inside an execution the lease is
            # the whole tree's (its drive gives it back).
            if journal is not None and self.execution is None:
                with anyio.CancelScope(shield=True):
                    await journal.release()
            raise
        return slot.ref

    async def _launch(self, slot: Slot) -> None:
        slot.generation += 1
        slot.quitting = False
        slot.started = False
        slot.scope = anyio.CancelScope()
        slot.done = anyio.Event()
        await self._tg.start(self._run_slot, slot)

    async def _run_slot(self, slot: Slot, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        generation = slot.generation
        error: BaseException | None = None
        try:
            with slot.scope:
                await slot.run(task_status)
        except Exception as exc:
            error = _unwrap(exc)
            if not slot.started:
                # Spawning fails with the error itself, not the group a task group wraps it in.
                if error is exc:
                    raise
                raise error from None

        finally:
            slot.done.set()
        # A halted incarnation's exit is expected: the watcher must not act on it.
        if not slot.quitting:
            try:
                self._exits_send.send_nowait((slot, generation, error))
            except anyio.ClosedResourceError:
                pass  # the group is being torn down: nobody restarts anything now

    async def watch(self) -> None:
        """Apply the strategy to each child that exits on its own."""
        with self._exits_recv:
            await self._watch()

    async def _watch(self) -> None:
        async for slot, generation, error in self._exits_recv:
            if generation != slot.generation or self.children.get(slot.path) is not slot:
                continue  # an incarnation the strategy has already replaced or removed
            if isinstance(error, StaleLease) or slot.restart == "temporary" or (
                slot.restart == "transient" and error is None
            ):
                await self._remove(slot, error)
                continue
            now = time.monotonic()
            self._restarts.append(now)
            while self._restarts and now - self._restarts[0] > self.within:
                self._restarts.popleft()
            if len(self._restarts) > self.max_restarts:
                await self._remove(slot, error)  # its waiting asks learn it crashed
                await self.stop_all()
                raise SupervisionEscalated(self.owner_path or "<runtime>", self.max_restarts,
                                           self.within) from error
            siblings = list(self.children.values())
            if self.strategy is SupervisionStrategy.ONE_FOR_ONE:
                affected = [slot]
            elif self.strategy is SupervisionStrategy.ONE_FOR_ALL:
                affected = siblings
            else:
                affected = siblings[siblings.index(slot):]
            for other in reversed(affected):
                if other is not slot:
                    await self._halt(other)
            slot.answer_crash(error)
            for child in affected:
                await self._launch(child)

    async def _halt(self, slot: Slot) -> None:
        """End the current incarnation: after its message, or forcibly past its timeout."""
        slot.quitting = True
        if slot.done.is_set():
            return
        if slot.idle_scope is not None:
            slot.idle_scope.cancel()
        with anyio.move_on_after(slot.shutdown_timeout, shield=True):
            await slot.done.wait()
        if slot.done.is_set():
            return
        slot.scope.cancel()
        with anyio.CancelScope(shield=True):
            await slot.done.wait()

    async def stop_child(self, slot: Slot) -> None:
        if self.children.get(slot.path) is not slot:
            return
        slot.terminated = True
        await self._halt(slot)
        await self._remove(slot, None)

    async def _remove(self, slot: Slot, error: BaseException | None) -> None:
        if self.children.get(slot.path) is slot:
            del self.children[slot.path]
        if slot.root and slot.execution is not None and error is not None:
            slot.execution.end("failed", error=error)
        slot.close(error)
        if slot.journal is not None and slot.execution is None and not isinstance(error, StaleLease):
            with anyio.CancelScope(shield=True):
                try:
                    await slot.journal.release()
                except StaleLease:
                    pass  # another process took over: nothing of ours to release

    async def stop_all(self) -> None:
        """Stop every child, last started first."""
        for slot in reversed(list(self.children.values())):
            await self.stop_child(slot)

    def close(self) -> None:
        """End the watcher once the children are stopped (it closes its own end)."""
        self._exits_send.close()
        if not self.watching:
            self._exits_recv.close()


def _unwrap(error: BaseException) -> BaseException:
    """The error inside the single-exception groups that task groups wrap it in."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _suspension_signals(error: BaseException) -> list[Suspension] | None:
    """The pause signals an error consists of, or None if it is (or holds) anything else."""
    if isinstance(error, Suspension):
        return [error]
    if isinstance(error, BaseExceptionGroup):
        found: list[Suspension] = []
        for inner in error.exceptions:
            signals = _suspension_signals(inner)
            if signals is None:
                return None
            found += signals
        return found
    return None


def _failure(error: BaseException) -> BaseException:
    """A handler's error as a failure: a group of failures and pauses fails with its failures.

    A branch that paused beside one that failed does not matter: the message failed.
    Anything else (a cancellation among them, say) is left as it is.
    """
    if not isinstance(error, BaseExceptionGroup):
        return error
    failures, rest = error.split(Exception)
    if failures is None or (rest is not None and _suspension_signals(rest) is None):
        return error
    return failures


def _as_json(value: Any) -> Any:
    try:
        return _REPLY.dump_python(value, mode="json")
    except Exception as exc:
        raise SerializationError(
            f"The reply {value!r} to a durable ask cannot be journaled ({exc}); reply with JSON data "
            f"or a pydantic model."
        ) from exc


_REPLY: TypeAdapter[Any] = TypeAdapter(Any)
