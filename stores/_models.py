"""The rows a store reads and writes, as pydantic models.

Payloads are JSON values (`Json`): the store serializes them itself, so a value
that is not JSON is refused (`SerializationError`) before anything is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, SkipValidation


def _plain_text(value: str) -> str:
    """Refuse what no database stores alike: NUL characters and lone surrogates."""
    if "\x00" in value:
        raise ValueError("must not contain NUL characters ('\\x00')")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"must be valid Unicode text ({exc.reason} at position {exc.start})") from None
    return value


Json = Annotated[JsonValue, SkipValidation]
"""A JSON value (dicts, lists, str, int, float, bool, None), typed but not walked.

Validating every value of a payload goes through a Python callback per value
(about 60 us for an agent turn's messages). The store encodes each value anyway,
before its transaction, and refuses what is not JSON with `SerializationError`;
read back, a value is freshly parsed JSON. So checking it here again buys nothing.
As in ``json.dumps``, dict keys that are numbers or booleans are written as strings.
A model holds the value it was given, not a copy: encode or copy it before changing it.
A store of your own must encode the same way (``tether.stores`` conformance tests
check it).
"""

Text = Annotated[str, AfterValidator(_plain_text)]
"""A string that every store keeps exactly: ids, paths, labels, reasons."""

ExecutionStatus = Literal[
    "queued", "running", "paused", "decided", "completed", "failed", "cancelled", "timed_out"
]
"""Where an execution stands. The last four are final.

- ``queued``: started detached; waits for a process with its runner to start it;
- ``running``: a process holds its lease and runs it (or died, and its lease has not been taken over yet);
- ``paused``: waits for a decision (a pending interrupt) or a durable timer;
- ``decided``: a decision was recorded and waits for a process with its runner to carry it out;
- ``cancelled``: stopped for good by a cancel (its journal says who and why);
- ``timed_out``: stopped for good because its deadline (``run(..., timeout=...)``) passed.
"""

FINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "timed_out"})

EntryKind = Literal["entry", "snapshot", "suspended", "resumed"]
"""What a journal entry is.

- ``entry``: what one message boundary changed (a delta, never a full copy);
- ``snapshot``: the full state of one actor, written every K entries and at suspension;
- ``suspended``: an actor stopped at an ``interrupt()``;
- ``resumed``: a resume decision, written by the claim that consumed a pending interrupt.
"""


class _Row(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")


MAX_PRIORITY = 2**31 - 1
"""The highest (least urgent) priority an execution may have in a queue."""


class QueueLimits(_Row):
    """What a queue admits to workers, across every process that takes work from the store.

    Every limit holds for the whole fleet: a worker admits an execution in the
    same transaction that counts what runs, under a lock on the queue's row.
    """

    name: Text = Field(min_length=1, max_length=200)
    concurrency: int | None = Field(default=None, ge=1)
    """Executions of the queue leased at once, at most (None: no limit). A dead worker's come back with its leases."""
    per_key: int | None = Field(default=None, ge=1)
    """Executions of one key (``queue_key``) leased at once, at most."""
    rate_limit: int | None = Field(default=None, ge=1)
    """Starts admitted per ``rate_seconds``, at most."""
    rate_seconds: float | None = Field(default=None, gt=0)
    priority: bool = False
    """Whether executions may have a priority (else all have 0, and the oldest goes first)."""


CatchUp = Literal["skip", "latest", "all"]
"""What a schedule starts for the ticks it missed while no worker ran: none, the last, or each."""


class ScheduleRow(_Row):
    """A schedule as the store keeps it: what it starts, when, and the last tick it started."""

    name: Text = Field(min_length=1, max_length=200)
    cron: Text = Field(min_length=1, max_length=200)
    tz: Text = Field(min_length=1, max_length=100)
    catch_up: CatchUp = "skip"
    runner: Text = Field(min_length=1)
    root_path: Text = Field(min_length=1)
    fingerprint: Text = ""
    version: Text = ""
    input: Json = None
    queue: Text | None = None
    paused: bool = False
    last_tick: datetime
    """The last tick started (or, for a new schedule, when it was declared): the next is after it."""

    def definition(self) -> dict[str, JsonValue]:
        """What a store keeps as the schedule's definition: all but its name and state."""
        return self.model_dump(mode="json", exclude={"name", "paused", "last_tick"})


class ExecutionSearch(_Row):
    """Which executions `Store.search_executions` lists; every field left None matches all.

    Each filter has an index behind it, so a page of results stays one short
    indexed read however many executions the store holds.
    """

    status: ExecutionStatus | None = None
    root_path: Text | None = None
    """The runner's root path (``chain:refund``): only its runs (the whole path, not a prefix)."""
    version: Text | None = None
    """Only with its runner's version ('' for runs of a runner that names none)."""
    path_prefix: Text | None = None
    """Executions whose root path starts with it, or whose tree it lies in: ``supervisor:planner/worker:a``
    matches the executions rooted at ``supervisor:planner``."""
    thread: Text | None = None
    since: datetime | None = None
    """Created at or after it."""
    until: datetime | None = None
    """Created before it."""
    id_prefix: Text | None = None
    """Ids that start with it (the whole id matches too)."""


class TokenRow(_Row):
    """An access token as the store keeps it: its name, what it may do, and a hash of its secret.

    The secret itself is shown once, when the token is made, and never stored.
    """

    name: Text = Field(min_length=1, max_length=200)
    digest: Text = Field(min_length=1, max_length=200)
    """The SHA-256 of the secret, in hex: what a presented secret is looked up by."""
    scopes: list[Text]
    """``read``, ``approve``, ``operate`` or ``admin``."""
    paths: list[Text] = []
    """The path prefixes ``approve`` is limited to; empty: any path."""
    created_at: datetime
    revoked_at: datetime | None = None


class QueueStats(_Row):
    """One queue and key as `tether queues` shows it."""

    queue: str
    key: str | None
    waiting: int
    """Ready to run and not admitted yet."""
    running: int
    """Leased now."""
    admitted: int
    """Started in the queue's rate period (the last minute if it has no rate)."""
    oldest_waiting: datetime | None


class NewExecution(_Row):
    """What a caller provides to start an execution."""

    execution_id: Text = Field(min_length=1, max_length=512)
    runner: Text = Field(min_length=1, description="Name of the runner (root actor) that runs it.")
    root_path: Text = Field(min_length=1, description="Path of the root actor, e.g. 'chain:refund'.")
    fingerprint: Text = Field(default="", description="Hash of the runner's definition.")
    version: Text = Field(default="", max_length=200, description="The runner's version ('' for none).")
    input: Json = None
    deadline: datetime | None = None
    """When the execution times out, wherever it stands then (None: never)."""
    thread: Text | None = Field(default=None, min_length=1, max_length=512)
    """The conversation it is a run of (``agent.run(text, thread="chat-7")``), if any."""
    trace: Text | None = Field(default=None, max_length=128)
    """Its trace context (a W3C ``traceparent``) when telemetry is on: every process that handles it continues it."""
    queue: Text | None = Field(default=None, min_length=1, max_length=200)
    """The queue whose limits admit it to workers (`Store.take_queued`), if any."""
    queue_key: Text | None = Field(default=None, min_length=1, max_length=512)
    """Within its queue, whose it is (a tenant, a user): what ``per_key`` limits."""
    priority: int = Field(default=0, ge=0, le=MAX_PRIORITY)
    """Lower runs first among those waiting in its queue; 0, the default, before any other."""


class Execution(_Row):
    """One durable run of a root actor, as stored."""

    execution_id: str
    runner: str
    root_path: str
    fingerprint: str
    version: str = ""
    """The version of its runner it started on (or was migrated to); '' when the runner names none."""
    status: ExecutionStatus
    input: Json
    result: Json = None
    error: str | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    lease_epoch: int = 0
    wake_at: datetime | None = None
    """When a worker should take it up: set by a decision, a due timer, or a detached start."""
    created_at: datetime
    updated_at: datetime
    deadline: datetime | None = None
    """When it times out (``timed_out``) if it has not finished by then (None: never)."""
    cancel: Json = None
    """A cancel asked for and not yet carried out: ``{"by": ..., "reason": ..., "at": ...}``."""
    thread: str | None = None
    """The conversation it is a run of, if any."""
    trace: str | None = None
    """The trace context (W3C ``traceparent``) of its telemetry, or None when it started with telemetry off."""
    queue: str | None = None
    """The queue that admits it to workers, if any."""
    queue_key: str | None = None
    """Whose it is within its queue (``per_key`` counts by it), if anyone's."""
    priority: int = 0
    """Its place among those waiting in its queue: lower first."""

    @property
    def finished(self) -> bool:
        """True once the execution is completed, failed, cancelled or timed out."""
        return self.status in FINAL_STATUSES


class Lease(_Row):
    """The right to write an execution's journal, fenced by ``epoch``.

    Every acquisition increments the epoch; a write carrying an older epoch is
    refused with `StaleLease`, so a process whose lease was taken over can no
    longer change anything.
    """

    execution_id: str
    owner: str
    epoch: int
    expires_at: datetime
    deadline: datetime | None = None
    """The execution's deadline, which its holder enforces."""
    cancel: Json = None
    """A cancel asked for by anyone (see `Execution.cancel`): the holder stops the run."""


class ThreadSummary(_Row):
    """One conversation of a store: its runs, and the latest of them."""

    thread: str
    runs: int
    latest: Execution


class StartResult(_Row):
    """What `Store.start_execution` found or made."""

    execution: Execution
    created: bool
    lease: Lease | None = Field(default=None, description="Set when this call created the execution.")


class NewEntry(_Row):
    """A journal entry to append; the store assigns its sequence number."""

    path: Text
    label: Text
    kind: EntryKind = "entry"
    payload: Json = None


class JournalEntry(_Row):
    """A journal entry as stored, ordered by ``seq`` within its execution."""

    execution_id: str
    seq: int
    path: str
    label: str
    kind: EntryKind
    payload: Json
    created_at: datetime


class NewInterrupt(_Row):
    """A pending interrupt to record when an actor suspends."""

    path: Text = Field(min_length=1)
    reason: Text
    context: Json = None
    deadline: datetime | None = None
    """When no decision arrived by then, a worker claims it with ``default``."""
    default: Json = None


class PendingInterrupt(_Row):
    """A suspended call waiting for a resume decision.

    ``agent_path`` is the full path of the call, for example
    ``supervisor:planner/worker:auditor/tool:approve_refund``.
    """

    execution_id: str
    agent_path: str
    reason: str
    context: Json
    seq: int = Field(description="Sequence number of the 'suspended' journal entry.")
    created_at: datetime
    deadline: datetime | None = None
    """When a worker decides it with ``default`` if nobody has (None: no deadline)."""
    default: Json = None


class IdempotencyRecord(_Row):
    """The recorded result of one ``@idempotent`` call."""

    execution_id: str
    key: str
    value: Json
    created_at: datetime
