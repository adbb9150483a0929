"""`MemoryStore`: the whole contract in one process's memory, for tests and examples."""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import anyio.lowlevel

from . import _json
from ._claims import failed_claim, sole_pending
from ._errors import (
    DuplicateInterrupt,
    ExecutionFinished,
    ExecutionNotFound,
    LeaseHeld,
    NotFailed,
    StaleLease,
    StoreError,
    UsageError,
)
from ._json import entry_rows
from ._limits import Window, blocked, spent, take
from ._models import (
    FINAL_STATUSES,
    Execution,
    ExecutionSearch,
    ExecutionStatus,
    IdempotencyRecord,
    JournalEntry,
    Lease,
    NewEntry,
    NewExecution,
    NewInterrupt,
    PendingInterrupt,
    QueueLimits,
    QueueStats,
    ScheduleRow,
    StartResult,
    ThreadSummary,
    TokenRow,
)
from ._protocol import Store, check_limit, matches, prunable, token_digest_taken, token_named
from ._queues import Candidate, Counts, admit, room, stats
from ._watch import committed

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    from pydantic import JsonValue

    from ._watch import Check


def _ts(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


_Pending = tuple[str, str, int, float, datetime | None, str]
"""A pending row: reason, context JSON, seq, created at, deadline, default JSON."""


@dataclass
class _Run:
    """One execution's rows. Values are kept as JSON text, as a database would."""

    execution: Execution
    input_json: str
    next_seq: int = 1
    journal: list[tuple[int, str, str, str, str, float]] = field(default_factory=list)
    pending: dict[str, _Pending] = field(default_factory=dict)
    records: dict[str, tuple[str, float]] = field(default_factory=dict)


class MemoryStore(Store):
    """A `Store` held in memory: same semantics as the databases, one process, no disk.

    Every method does its work without awaiting in between, so each is atomic
    with respect to other tasks, as a transaction would be.
    """

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._queues: dict[str, QueueLimits] = {}
        self._schedules: dict[str, ScheduleRow] = {}
        self._limits: dict[str, Window] = {}
        self._admitted: dict[str, float] = {}
        """When each execution's queue first admitted it."""
        self._tokens: dict[str, TokenRow] = {}
        """Every token, by digest."""
        self._closed = False

    def __repr__(self) -> str:
        return "MemoryStore()"

    async def setup(self) -> None:
        await self._enter()

    async def aclose(self) -> None:
        self._closed = True

    def _change_source(self, execution_id: str) -> AbstractAsyncContextManager[tuple[Check | None, float]]:
        return contextlib.nullcontext((None, 0.0))  # one process: every write is this object's

    async def _enter(self) -> None:
        await anyio.lowlevel.checkpoint()
        if self._closed:
            raise UsageError(f"{self!r} is closed. Create a new store to use it again.")

    def _get(self, execution_id: str) -> _Run:
        run = self._runs.get(execution_id)
        if run is None:
            raise ExecutionNotFound(execution_id)
        return run

    def _update(self, run: _Run, **changes: object) -> None:
        run.execution = run.execution.model_copy(update=changes)

    def _fenced(self, lease: Lease) -> _Run:
        run = self._get(lease.execution_id)
        ex = run.execution
        if ex.lease_epoch != lease.epoch or ex.lease_owner != lease.owner:
            raise StaleLease(lease.execution_id, lease.epoch)
        return run

    def _add_entries(self, run: _Run, rows: list[tuple[str, str, str, str]], now: float) -> list[int]:
        seqs = []
        for path, label, kind, payload in rows:
            run.journal.append((run.next_seq, path, label, kind, payload, now))
            seqs.append(run.next_seq)
            run.next_seq += 1
        if seqs and self._watchers:  # what a follower here is handed, made only for one
            execution_id = run.execution.execution_id
            self._journal_grew(execution_id, seqs[-1], committed(execution_id, seqs, rows, _ts(now)))
        return seqs

    # -- executions ----------------------------------------------------------

    async def start_execution(
        self, new: NewExecution, *, owner: str, lease_seconds: float
    ) -> StartResult:
        return await self._create(new, owner, lease_seconds)

    async def enqueue_execution(self, new: NewExecution) -> StartResult:
        return await self._create(new, None, 0.0)

    async def _create(self, new: NewExecution, owner: str | None, lease_seconds: float) -> StartResult:
        input_json = _json.dumps(new.input, what="the execution's input")
        await self._enter()
        existing = self._runs.get(new.execution_id)
        if existing is not None:
            return StartResult(execution=_copied(existing.execution), created=False)
        now = time.time()
        leased = owner is not None
        execution = Execution(
            execution_id=new.execution_id, runner=new.runner, root_path=new.root_path,
            fingerprint=new.fingerprint, version=new.version, status="running" if leased else "queued", input=_json.loads(input_json),
            lease_owner=owner, lease_expires_at=_ts(now + lease_seconds) if leased else None,
            lease_epoch=1 if leased else 0, wake_at=None if leased else _ts(now),
            created_at=_ts(now), updated_at=_ts(now), deadline=new.deadline, thread=new.thread,
            trace=new.trace, queue=new.queue, queue_key=new.queue_key, priority=new.priority,
        )
        self._runs[new.execution_id] = _Run(execution, input_json)
        if owner is None:
            return StartResult(execution=_copied(execution), created=True)
        lease = Lease(execution_id=new.execution_id, owner=owner, epoch=1,
                      expires_at=_ts(now + lease_seconds), deadline=new.deadline)
        return StartResult(execution=_copied(execution), created=True, lease=lease)

    async def take_work(
        self, *, owner: str, lease_seconds: float, limit: int, roots: Sequence[str] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Lease]:
        check_limit(limit)
        await self._enter()
        now = _ts(time.time())

        ready = sorted((r for r in self._runs.values() if r.execution.queue is None
                        and _due(r.execution, now, roots, versions)),
                       key=lambda r: r.execution.wake_at or r.execution.lease_expires_at or now)
        return [self._lease(run, owner, lease_seconds, now) for run in ready[:limit]]

    def _lease(self, run: _Run, owner: str, lease_seconds: float, now: datetime) -> Lease:
        ex = run.execution
        lease = Lease(execution_id=ex.execution_id, owner=owner, epoch=ex.lease_epoch + 1,
                      expires_at=_ts(time.time() + lease_seconds), deadline=ex.deadline,
                      cancel=_copied_json(ex.cancel))
        self._update(run, lease_owner=owner, lease_expires_at=lease.expires_at, lease_epoch=lease.epoch,
                     status="running", wake_at=None, updated_at=now)
        return lease

    async def declare_queue(self, limits: QueueLimits) -> None:
        await self._enter()
        self._queues[limits.name] = limits

    async def take_queued(
        self, queue: str, *, owner: str, lease_seconds: float, limit: int, roots: Sequence[str] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Lease]:
        check_limit(limit)
        await self._enter()
        limits = self._queues.get(queue)
        if limits is None:
            return []
        now = _ts(time.time())
        running = self._running(queue, now)
        free = room(limits, running, limit)
        if free == 0:
            return []
        ready = sorted((r.execution for r in self._runs.values()
                        if r.execution.queue == queue and _due(r.execution, now, roots, versions)),
                       key=lambda ex: (ex.priority, ex.created_at, ex.execution_id))
        candidates = [Candidate(ex.execution_id, ex.queue_key, ex.status == "queued") for ex in ready]
        taken = admit(limits, candidates, running, self._admitted_since(queue, limits, now), free)
        for execution_id in taken:
            self._admitted.setdefault(execution_id, now.timestamp())
        return [self._lease(self._runs[execution_id], owner, lease_seconds, now) for execution_id in taken]

    def _running(self, queue: str, now: datetime) -> dict[str | None, int]:
        running: dict[str | None, int] = {}
        for run in self._runs.values():
            ex = run.execution
            if ex.queue == queue and ex.status == "running" and ex.lease_expires_at is not None \
                    and ex.lease_expires_at > now:
                running[ex.queue_key] = running.get(ex.queue_key, 0) + 1
        return running

    def _admitted_since(self, queue: str, limits: QueueLimits, now: datetime) -> int:
        since = now.timestamp() - (limits.rate_seconds or 60.0)
        return sum(1 for execution_id, at in self._admitted.items()
                   if at > since and execution_id in self._runs and self._runs[execution_id].execution.queue == queue)

    async def declare_schedule(self, schedule: ScheduleRow) -> ScheduleRow:
        await self._enter()
        known = self._schedules.get(schedule.name)
        if known is not None:
            schedule = schedule.model_copy(update={"paused": known.paused, "last_tick": known.last_tick})
        self._schedules[schedule.name] = schedule
        return schedule

    async def list_schedules(self) -> list[ScheduleRow]:
        await self._enter()
        return [self._schedules[name] for name in sorted(self._schedules)]

    async def advance_schedule(self, name: str, *, seen: datetime, to: datetime) -> bool:
        await self._enter()
        known = self._schedules.get(name)
        if known is None or known.last_tick != seen:
            return False
        self._schedules[name] = known.model_copy(update={"last_tick": to})
        return True

    async def pause_schedule(self, name: str, *, paused: bool, now: datetime) -> ScheduleRow | None:
        await self._enter()
        known = self._schedules.get(name)
        if known is None:
            return None
        last = known.last_tick if paused else max(known.last_tick, now)
        self._schedules[name] = known.model_copy(update={"paused": paused, "last_tick": last})
        return self._schedules[name]

    async def take_llm_quota(self, name: str, *, requests: int | None, tokens: int | None,
                             per_seconds: float) -> float:
        await self._enter()
        wait, self._limits[name] = take(self._limits.get(name), time.time(), per_seconds, requests, tokens)
        return wait

    async def add_llm_tokens(self, name: str, tokens: int, *, per_seconds: float) -> None:
        await self._enter()
        self._limits[name] = spent(self._limits.get(name), time.time(), per_seconds, tokens)

    async def block_llm(self, name: str, seconds: float) -> None:
        await self._enter()
        self._limits[name] = blocked(self._limits.get(name), time.time(), seconds)

    async def queue_stats(self) -> list[QueueStats]:
        await self._enter()
        now = _ts(time.time())
        rows: list[QueueStats] = []
        for name, limits in sorted(self._queues.items()):
            since = now.timestamp() - (limits.rate_seconds or 60.0)
            keys: dict[str | None, Counts] = {}
            for run in self._runs.values():
                ex = run.execution
                if ex.queue != name:
                    continue
                counts = keys.setdefault(ex.queue_key, Counts())
                if _due(ex, now, None, None):
                    counts.waited(ex.created_at)
                elif ex.status == "running":
                    counts.running += 1
                if self._admitted.get(ex.execution_id, 0.0) > since:
                    counts.admitted += 1
            rows.extend(stats(name, keys))
        return rows

    async def request_cancel(self, execution_id: str, *, by: str, reason: str) -> Execution | None:
        request = _json.loads(_json.dumps({"by": by, "reason": reason}, what="the cancel request"))
        await self._enter()
        run = self._runs.get(execution_id)
        if run is None:
            return None
        ex = run.execution
        if not ex.finished:
            now = _ts(time.time())
            self._update(run, cancel=ex.cancel or {**request, "at": now.isoformat()}, updated_at=now,
                         wake_at=ex.wake_at if ex.status == "running" else now)
            self._control_requested(execution_id)
        return _copied(run.execution)

    async def get_execution(self, execution_id: str) -> Execution | None:
        await self._enter()
        run = self._runs.get(execution_id)
        return None if run is None else _copied(run.execution)

    async def load_execution(self, execution_id: str) -> tuple[Execution, list[JournalEntry]] | None:
        await self._enter()
        run = self._runs.get(execution_id)  # both read with no await between: one snapshot
        return None if run is None else (_copied(run.execution), self._entries(run, execution_id, 0, None))

    async def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        limit: int = 100,
        after: Execution | None = None,
        recent: bool = False,
        thread: str | None = None,
    ) -> list[Execution]:
        check_limit(limit)
        await self._enter()
        if thread is not None:
            return [e for e in await self.list_executions(status=status, limit=len(self._runs), after=after,
                                                          recent=recent) if e.thread == thread][:limit]
        if recent:
            rows = sorted((r.execution for r in self._runs.values()),
                          key=lambda e: (e.updated_at, e.execution_id), reverse=True)
        else:
            rows = sorted((r.execution for r in self._runs.values()), key=lambda e: (e.created_at, e.execution_id))
        if status is not None:
            rows = [e for e in rows if e.status == status]
        if after is not None and recent:
            mark = (after.updated_at, after.execution_id)
            rows = [e for e in rows if (e.updated_at, e.execution_id) < mark]
        elif after is not None:
            mark = (after.created_at, after.execution_id)
            rows = [e for e in rows if (e.created_at, e.execution_id) > mark]
        return [_copied(e) for e in rows[:limit]]

    async def search_executions(
        self, search: ExecutionSearch | None = None, *, limit: int = 50, before: Execution | None = None
    ) -> list[Execution]:
        check_limit(limit)
        await self._enter()
        search = search or ExecutionSearch()
        mark = None if before is None else (before.created_at, before.execution_id)
        rows = sorted((r.execution for r in self._runs.values() if matches(r.execution, search)
                       and (mark is None or (r.execution.created_at, r.execution.execution_id) < mark)),
                      key=lambda e: (e.created_at, e.execution_id), reverse=True)
        return [_copied(e) for e in rows[:limit]]

    async def create_token(self, token: TokenRow) -> None:
        await self._enter()
        if token.revoked_at is None and any(t.name == token.name and t.revoked_at is None
                                            for t in self._tokens.values()):
            raise token_named(token.name)
        if token.digest in self._tokens:
            raise token_digest_taken()
        self._tokens[token.digest] = token.model_copy(deep=True)

    async def find_token(self, digest: str) -> TokenRow | None:
        await self._enter()
        token = self._tokens.get(digest)
        return None if token is None or token.revoked_at is not None else token.model_copy(deep=True)

    async def list_tokens(self) -> list[TokenRow]:
        await self._enter()
        return [t.model_copy(deep=True) for t in sorted(self._tokens.values(),
                                                        key=lambda t: (t.name, t.created_at, t.digest))]

    async def revoke_token(self, name: str, *, at: datetime) -> bool:
        await self._enter()
        for digest, token in self._tokens.items():
            if token.name == name and token.revoked_at is None:
                self._tokens[digest] = token.model_copy(update={"revoked_at": at})
                return True
        return False

    async def list_threads(self, *, limit: int = 100, after: str | None = None) -> list[ThreadSummary]:
        check_limit(limit)
        await self._enter()
        runs: dict[str, list[Execution]] = {}
        for run in self._runs.values():
            thread = run.execution.thread
            if thread is not None and (after is None or thread > after):
                runs.setdefault(thread, []).append(run.execution)
        return [ThreadSummary(thread=thread, runs=len(alike),
                              latest=_copied(max(alike, key=lambda e: (e.created_at, e.execution_id))))
                for thread, alike in sorted(runs.items())[:limit]]

    async def reopen(self, execution_id: str, *, by: str) -> Execution:
        payload = _json.dumps({"by": by}, what="who retries")
        await self._enter()
        run = self._get(execution_id)
        if run.execution.status != "failed":
            raise NotFailed(execution_id, run.execution.status)
        now = time.time()
        self._update(run, status="running", error=None, lease_owner=None, lease_expires_at=None, wake_at=None,
                     updated_at=_ts(now))
        self._add_entries(run, [(run.execution.root_path, "retried", "entry", payload)], now)
        return _copied(run.execution)

    # -- leases ----------------------------------------------------------------

    async def acquire_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, replacing: str | None = None
    ) -> Lease:
        await self._enter()
        run = self._get(execution_id)
        ex = run.execution
        now = time.time()
        if ex.status in FINAL_STATUSES:
            raise ExecutionFinished(execution_id, ex.status)
        held = ex.lease_owner is not None and ex.lease_expires_at is not None
        if held and ex.lease_owner not in (owner, replacing) and ex.lease_expires_at > _ts(now):  # type: ignore[operator]
            raise LeaseHeld(execution_id, ex.lease_owner, ex.lease_expires_at)  # type: ignore[arg-type]
        lease = Lease(execution_id=execution_id, owner=owner, epoch=ex.lease_epoch + 1,
                      expires_at=_ts(now + lease_seconds), deadline=ex.deadline, cancel=_copied_json(ex.cancel))
        self._update(run, lease_owner=owner, lease_expires_at=lease.expires_at,
                     lease_epoch=lease.epoch, status="running", updated_at=_ts(now))
        return lease

    async def renew_lease(self, lease: Lease, *, lease_seconds: float) -> Lease:
        await self._enter()
        run = self._fenced(lease)
        renewed = lease.model_copy(update={"expires_at": _ts(time.time() + lease_seconds),
                                           "cancel": _copied_json(run.execution.cancel)})
        self._update(run, lease_expires_at=renewed.expires_at)
        return renewed

    async def release_lease(
        self,
        lease: Lease,
        *,
        status: ExecutionStatus | None = None,
        result: JsonValue = None,
        error: str | None = None,
        entries: Sequence[NewEntry] = (),
        wake_at: datetime | None = None,
    ) -> list[int]:
        rows = entry_rows(entries)
        final = status in FINAL_STATUSES
        result_json = _json.dumps(result, what="the execution's result") if final else None
        await self._enter()
        run = self._fenced(lease)
        now = time.time()
        changes: dict[str, object] = {"lease_owner": None, "lease_expires_at": None,
                                      "updated_at": _ts(now), "wake_at": None if final else wake_at}
        if status is not None:
            changes["status"] = status
        if final:
            changes["result"] = _json.loads(result_json)  # type: ignore[arg-type]
            changes["error"] = error
            changes["cancel"] = None
            run.pending.clear()
        self._update(run, **changes)
        return self._add_entries(run, rows, now)

    # -- journal -------------------------------------------------------------

    async def rewrite(self, lease: Lease, journal: Sequence[JournalEntry], *,
                      pending: Sequence[PendingInterrupt], version: str, fingerprint: str) -> None:
        rows = [(e.seq, e.path, e.label, e.kind, _json.dumps(e.payload, what="a journal entry"), e.created_at.timestamp())
                for e in journal]
        kept = {p.agent_path: (p.reason, _json.dumps(p.context, what="the interrupt's context"), p.seq,
                               p.created_at.timestamp(), p.deadline, _json.dumps(p.default, what="the default"))
                for p in pending}
        await self._enter()
        run = self._fenced(lease)
        run.journal = sorted(rows)
        run.pending = kept
        run.next_seq = max([run.next_seq, *(r[0] + 1 for r in rows)])
        self._update(run, version=version, fingerprint=fingerprint, updated_at=_ts(time.time()))
        self._journal_grew(lease.execution_id)

    async def append(self, lease: Lease, entries: Sequence[NewEntry]) -> list[int]:
        rows = entry_rows(entries)
        await self._enter()
        return self._add_entries(self._fenced(lease), rows, time.time())

    async def read_journal(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        check_limit(limit)
        await self._enter()
        run = self._runs.get(execution_id)
        return [] if run is None else self._entries(run, execution_id, after_seq, limit)

    @staticmethod
    def _entries(run: _Run, execution_id: str, after_seq: int, limit: int | None) -> list[JournalEntry]:
        rows = [r for r in run.journal if r[0] > after_seq]
        if limit is not None:
            rows = rows[:limit]
        return [
            JournalEntry(execution_id=execution_id, seq=seq, path=path, label=label, kind=kind,  # type: ignore[arg-type]
                         payload=_json.loads(payload), created_at=_ts(at))
            for seq, path, label, kind, payload, at in rows
        ]

    async def suspend(
        self, lease: Lease, entries: Sequence[NewEntry], interrupt: NewInterrupt
    ) -> PendingInterrupt:
        rows = entry_rows(entries)
        context_json = _json.dumps(interrupt.context, what="the interrupt's context")
        default_json = _json.dumps(interrupt.default, what="the interrupt's default")
        await self._enter()
        run = self._fenced(lease)
        if interrupt.path in run.pending:
            raise DuplicateInterrupt(lease.execution_id, interrupt.path)
        now = time.time()
        seqs = self._add_entries(run, rows, now)
        seq = seqs[-1] if seqs else run.next_seq - 1
        run.pending[interrupt.path] = (interrupt.reason, context_json, seq, now, interrupt.deadline, default_json)
        return self._pending_row(lease.execution_id, interrupt.path, run.pending[interrupt.path])

    async def claim(
        self,
        execution_id: str,
        value: JsonValue,
        *,
        path: str | None = None,
        seq: int | None = None,
        owner: str | None = None,
        by: str | None = None,
    ) -> JournalEntry:
        _json.dumps(value, what="the resume value")
        await self._enter()
        run = self._get(execution_id)
        target = path if path is not None else sole_pending(execution_id, sorted(run.pending))
        row = run.pending.get(target) if target is not None else None
        if row is None or (seq is not None and row[2] != seq) or run.execution.cancel is not None:
            raise self._explain_failed_claim(run, execution_id, target)
        ex = run.execution
        if (ex.lease_owner is not None and ex.lease_owner != owner and ex.lease_expires_at is not None
                and ex.lease_expires_at > _ts(time.time())):
            raise LeaseHeld(execution_id, ex.lease_owner, ex.lease_expires_at)
        del run.pending[target]  # type: ignore[arg-type]
        payload: dict[str, JsonValue] = {"value": value, "suspended_seq": row[2], "reason": row[0]}
        if by is not None:
            payload["by"] = by
        now = time.time()
        self._update(run, wake_at=_ts(now), updated_at=_ts(now),
                     status="decided" if ex.status == "paused" else ex.status)
        [new_seq] = self._add_entries(
            run, [(target, "resumed", "resumed", _json.dumps(payload))], now  # type: ignore[list-item]
        )
        return JournalEntry(execution_id=execution_id, seq=new_seq, path=target,  # type: ignore[arg-type]
                            label="resumed", kind="resumed", payload=payload, created_at=_ts(now))

    async def claim_and_lease(
        self,
        execution_id: str,
        value: JsonValue,
        *,
        owner: str,
        lease_seconds: float,
        path: str | None = None,
        seq: int | None = None,
        by: str | None = None,
    ) -> tuple[JournalEntry, Lease | None]:
        entry = await self.claim(execution_id, value, path=path, seq=seq, owner=owner, by=by)
        # No checkpoint since the claim: nothing else has run, so the lease is as the claim found it.
        run = self._get(execution_id)
        now = time.time()
        lease = Lease(execution_id=execution_id, owner=owner, epoch=run.execution.lease_epoch + 1,
                      expires_at=_ts(now + lease_seconds), deadline=run.execution.deadline,
                      cancel=_copied_json(run.execution.cancel))
        self._update(run, lease_owner=owner, lease_expires_at=lease.expires_at, lease_epoch=lease.epoch,
                     status="running", wake_at=None, updated_at=_ts(now))
        return entry, lease

    async def deliver_message(self, execution_id: str, path: str, message: JsonValue, *, by: str) -> JournalEntry:
        payload_json = _json.dumps({"message": message, "by": by}, what="the message")
        await self._enter()
        run = self._get(execution_id)
        if run.execution.finished:
            raise ExecutionFinished(execution_id, run.execution.status)
        now = time.time()
        self._update(run, wake_at=_ts(now), updated_at=_ts(now))
        [seq] = self._add_entries(run, [(path, "message", "entry", payload_json)], now)
        return JournalEntry(execution_id=execution_id, seq=seq, path=path, label="message", kind="entry",
                            payload=_json.loads(payload_json), created_at=_ts(now))

    @staticmethod
    def _explain_failed_claim(run: _Run, execution_id: str, path: str | None) -> StoreError:
        resumed = [r[1] for r in run.journal if r[3] == "resumed" and (path is None or r[1] == path)]
        return failed_claim(execution_id, path, status=run.execution.status, pending=sorted(run.pending),
                            last_resumed=resumed[-1] if resumed else None,
                            cancelling=run.execution.cancel is not None)

    @staticmethod
    def _pending_row(execution_id: str, path: str, row: _Pending) -> PendingInterrupt:
        reason, context, seq, at, deadline, default = row
        return PendingInterrupt(execution_id=execution_id, agent_path=path, reason=reason,
                                context=_json.loads(context), seq=seq, created_at=_ts(at),
                                deadline=deadline, default=_json.loads(default))

    def _pending_rows(self, execution_id: str | None, path_prefix: str | None,
                      due_before: datetime | None = None) -> list[PendingInterrupt]:
        rows = []
        for run in self._runs.values():
            if execution_id is not None and run.execution.execution_id != execution_id:
                continue
            for path, row in run.pending.items():
                if path_prefix and not path.startswith(path_prefix):
                    continue
                if due_before is not None and (row[4] is None or row[4] > due_before):
                    continue
                rows.append(self._pending_row(run.execution.execution_id, path, row))
        rows.sort(key=lambda p: (p.created_at, p.execution_id, p.agent_path))
        return rows

    async def list_pending(
        self,
        *,
        execution_id: str | None = None,
        path_prefix: str | None = None,
        limit: int = 100,
        after: PendingInterrupt | None = None,
        due_before: datetime | None = None,
    ) -> list[PendingInterrupt]:
        check_limit(limit)
        await self._enter()
        rows = self._pending_rows(execution_id, path_prefix, due_before)
        if after is not None:
            mark = (after.created_at, after.execution_id, after.agent_path)
            rows = [p for p in rows if (p.created_at, p.execution_id, p.agent_path) > mark]
        return rows[:limit]

    async def count_pending(
        self, *, execution_id: str | None = None, path_prefix: str | None = None
    ) -> int:
        await self._enter()
        return len(self._pending_rows(execution_id, path_prefix))

    # -- idempotency ---------------------------------------------------------

    async def get_idempotent(self, execution_id: str, key: str) -> IdempotencyRecord | None:
        await self._enter()
        run = self._runs.get(execution_id)
        if run is None or key not in run.records:
            return None
        value, at = run.records[key]
        return IdempotencyRecord(execution_id=execution_id, key=key,
                                 value=_json.loads(value), created_at=_ts(at))

    async def list_idempotent(self, execution_id: str) -> list[IdempotencyRecord]:
        await self._enter()
        run = self._runs.get(execution_id)
        records = sorted(run.records.items()) if run is not None else []
        return [IdempotencyRecord(execution_id=execution_id, key=key, value=_json.loads(value), created_at=_ts(at))
                for key, (value, at) in records]

    async def put_idempotent(self, lease: Lease, key: str, value: JsonValue) -> IdempotencyRecord:
        value_json = _json.dumps(value, what=f"the result recorded for {key!r}")
        await self._enter()
        run = self._fenced(lease)
        stored, at = run.records.setdefault(key, (value_json, time.time()))
        return IdempotencyRecord(execution_id=lease.execution_id, key=key,
                                 value=_json.loads(stored), created_at=_ts(at))

    # -- maintenance ---------------------------------------------------------

    async def delete_execution(self, execution_id: str) -> bool:
        await self._enter()
        return self._runs.pop(execution_id, None) is not None

    async def prune(self, *, older_than: datetime, statuses: Sequence[ExecutionStatus] | None = None,
                    limit: int | None = None) -> int:
        chosen = prunable(statuses, limit)
        await self._enter()

        def old(execution: Execution) -> bool:
            return execution.status in FINAL_STATUSES and execution.updated_at < older_than

        # A thread's runs go together, once its latest is old and finished.
        kept = {r.execution.thread for r in self._runs.values() if not old(r.execution)}
        doomed = sorted((r.execution for r in self._runs.values()
                         if old(r.execution) and r.execution.status in chosen
                         and (r.execution.thread is None or r.execution.thread not in kept)),
                        key=lambda execution: execution.updated_at)
        doomed = doomed[:limit] if limit is not None else doomed
        for execution_id in (execution.execution_id for execution in doomed):
            del self._runs[execution_id]
        return len(doomed)


def _copied(execution: Execution) -> Execution:
    """An execution as a reader gets it: its own objects, as a database's decoded row would be."""
    return execution.model_copy(deep=True)


def _copied_json(value: JsonValue) -> JsonValue:
    """A JSON value a reader may change without changing the store's."""
    return copy.deepcopy(value)


def _due(ex: Execution, now: datetime, roots: Sequence[str] | None,
         versions: Mapping[str, Sequence[str]] | None) -> bool:
    """Whether a worker should take ``ex`` up now (see `Store.take_work`)."""
    if roots is not None and ex.root_path not in roots:
        return False
    if versions is not None and ex.version and ex.version not in versions.get(ex.root_path, ()):
        return False
    if ex.status in ("queued", "paused", "decided"):
        return ex.wake_at is not None and ex.wake_at <= now
    return ex.status == "running" and (ex.lease_expires_at is None or ex.lease_expires_at <= now)

