"""What a follower of an execution sees: typed events, from its journal and live.

Every journal entry is one event, numbered by the entry's position
(``cursor``): an LLM turn, a tool's result, a node that finished, a handoff,
an interrupt with its pending row, the verdict. A follower that reconnects
after a cursor gets every later event once. Some events are *live* only
(``cursor`` is None): the tokens of an LLM reply as they arrive, a node or a
tool call as it starts. They are never journaled, only the whole message they
make up is, so a follower that was away sees that message, not its tokens.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol, get_args

import anyio.from_thread
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from tether.stores import Json, NewEntry, PendingInterrupt

from .idempotent import current_step

if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.stores import Store


class _Event(BaseModel):
    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True)

    execution_id: str
    path: str
    """The actor it happened in (``swarm:team/agent:writer``)."""
    label: str
    """Its journal label (``turn:2``, ``node:charge``, ``msg:1``), or what a live event is of."""
    cursor: int | None = None
    """Its place in the journal: pass the last one seen as ``after=`` to continue. None: a live event."""
    at: datetime | None = None
    """When it was journaled (None: a live event)."""

    @property
    def live(self) -> bool:
        """True for an event that is not journaled (a token, a start): a reconnect does not repeat it."""
        return self.cursor is None


# -- the execution ----------------------------------------------------------------


class ExecutionStarted(_Event):
    """The root actor accepted its input."""

    type: Literal["execution_started"] = "execution_started"
    input: Json = None


class ExecutionResumed(_Event):
    """A decision was claimed for the pending interrupt at ``path``."""

    type: Literal["execution_resumed"] = "execution_resumed"
    value: Json = None
    by: str | None = None
    reason: str | None = None


class ExecutionPaused(_Event):
    """The whole tree stopped: interrupts wait for decisions, or a durable timer for its time."""

    type: Literal["execution_paused"] = "execution_paused"
    pending: list[str] = []
    """The paths of the interrupts that wait."""
    wake_at: datetime | None = None
    waiting: list[dict[str, str]] = []
    """The actors waiting for a message (`wait_for`): ``{"path": ..., "type": ...}`` each."""


class ExecutionCompleted(_Event):
    """The verdict of a run that finished: ``output`` is what its root returned."""

    type: Literal["execution_completed"] = "execution_completed"
    output: Json = None


class ExecutionFailed(_Event):
    """The verdict of a run whose root raised: ``error`` says what it raised."""

    type: Literal["execution_failed"] = "execution_failed"
    error: str | None = None


class ExecutionCancelled(_Event):
    """The verdict of a cancel: who asked for it (``"cli:alice"``, ``"api"``) and why."""

    type: Literal["execution_cancelled"] = "execution_cancelled"
    by: str | None = None
    reason: str | None = None


class ExecutionTimedOut(_Event):
    """The verdict of an execution whose deadline (``run(..., timeout=...)``) passed first."""

    type: Literal["execution_timed_out"] = "execution_timed_out"
    deadline: str | None = None


# -- actors and messages ------------------------------------------------------------


class MessageAccepted(_Event):
    """A message went into an actor's mailbox (a task handed to a worker or a peer, say)."""

    type: Literal["message_accepted"] = "message_accepted"
    message_type: str = ""
    message: Json = None


class MessageHandled(_Event):
    """An actor finished handling one message."""

    type: Literal["message_handled"] = "message_handled"
    reply: Json = None


class NodeStarted(_Event):
    """Live: a chain node began to run (not when its result is replayed from the journal)."""

    type: Literal["node_started"] = "node_started"
    node: str = ""


class NodeFinished(_Event):
    """A chain node's result was journaled: ``output`` is the update it returned."""

    type: Literal["node_finished"] = "node_finished"
    node: str = ""
    output: Json = None


class LLMTurn(_Event):
    """The assistant message of one LLM turn: its text and the tool calls it asks for."""

    type: Literal["llm_turn"] = "llm_turn"
    turn: int = 0
    message: Json = None


class TokenDelta(_Event):
    """Live: a piece of an LLM reply as it streams in; the turn's `LLMTurn` holds the whole of it."""

    type: Literal["token"] = "token"
    text: str = ""


class ToolCalled(_Event):
    """Live: a tool call began to run."""

    type: Literal["tool_call"] = "tool_call"
    tool: str = ""
    arguments: Json = None


class ToolResult(_Event):
    """A tool call's result, as the message the LLM reads next."""

    type: Literal["tool_result"] = "tool_result"
    tool: str = ""
    result: Json = None


class Handoff(_Event):
    """A swarm member handed the task to a peer."""

    type: Literal["handoff"] = "handoff"
    by: str | None = None
    to: str | None = None
    message: str | None = None


class Delegation(_Event):
    """A supervisor gave a worker a task."""

    type: Literal["delegation"] = "delegation"
    to: str | None = None
    task: Json = None


class Reply(_Event):
    """A worker's answer to a delegation, as the supervisor reads it."""

    type: Literal["reply"] = "reply"
    result: Json = None


class Interrupted(_Event):
    """A call asked for a decision: ``pending`` is its row (None once it was decided)."""

    type: Literal["interrupt"] = "interrupt"
    call_path: str = ""
    reason: str | None = None
    pending: PendingInterrupt | None = None


class Sleeping(_Event):
    """A durable timer: the execution waits until ``until``, with no process held."""

    type: Literal["sleep"] = "sleep"
    until: datetime | None = None


class Checkpoint(_Event):
    """Any other journal entry: a snapshot, a durable step, a takeover, a migration."""

    type: Literal["checkpoint"] = "checkpoint"
    kind: str = "entry"


class Dropped(_Event):
    """Live events this follower missed because it read too slowly (journal events are never dropped)."""

    type: Literal["dropped"] = "dropped"
    count: int = 0


Event = Annotated[
    ExecutionStarted | ExecutionResumed | ExecutionPaused | ExecutionCompleted | ExecutionFailed
    | ExecutionCancelled | ExecutionTimedOut | MessageAccepted | MessageHandled | NodeStarted | NodeFinished | LLMTurn
    | TokenDelta | ToolCalled | ToolResult | Handoff | Delegation | Reply | Interrupted | Sleeping
    | Checkpoint | Dropped,
    Field(discriminator="type"),
]
"""Every event of an execution's stream; ``event.type`` tells which.

Besides its own fields, every event has these:

- ``execution_id``: the execution it belongs to.
- ``path``: the actor it happened in (``swarm:team/agent:writer``).
- ``label``: its journal label (``turn:2``, ``node:charge``, ``msg:1``), or what a live event is of.
- ``cursor``: its place in the journal; pass the last one seen as ``after=`` to continue.
  None for a live event.
- ``at``: when it was journaled (None for a live event).
- ``live``: True for an event that is not journaled (a token, a start); a reconnect does not repeat it.
"""

EVENT_TYPES: tuple[str, ...] = tuple(model.model_fields["type"].default for model in get_args(get_args(Event)[0]))
"""Every event's ``type``."""

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


def read_event(data: str | bytes) -> Event:
    """An event read back from its JSON, as ``tether watch --json`` prints it and the SSE ``data`` holds it."""
    return EVENTS.validate_json(data)


VERDICTS: dict[str, str] = {"paused": "execution_paused", "completed": "execution_completed",
                            "failed": "execution_failed", "cancelled": "execution_cancelled",
                            "timed_out": "execution_timed_out"}
"""The root's journal labels of an execution's verdict, and the events they are."""
FINAL_VERDICTS = frozenset({"completed", "failed", "cancelled", "timed_out"})
FINAL_EVENTS = frozenset(VERDICTS[final] for final in FINAL_VERDICTS)


def verdict_of(entry: Entry) -> str | None:
    """The verdict an entry journals (``paused``, ``completed``, ...), if it is one: a root's entry so labelled."""
    return entry.label if entry.label in VERDICTS and "/" not in entry.path else None


def verdict(root_path: str, status: str, **payload: Any) -> NewEntry:
    """The journal entry of an execution's verdict, written with its status in one transaction."""
    return NewEntry(path=root_path, label=status, payload=payload)


class Entry(Protocol):
    """A journal entry as `from_entry` reads it: a `JournalEntry`, or one a store handed over."""

    @property
    def execution_id(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def payload(self) -> Any: ...
    @property
    def created_at(self) -> datetime: ...


def from_entry(entry: Entry, pending: dict[str, PendingInterrupt] | None = None) -> Event:
    """The event a journal entry is. ``pending``: the execution's pending rows by path, if read."""
    base: dict[str, Any] = {"execution_id": entry.execution_id, "path": entry.path, "label": entry.label,
                            "cursor": entry.seq, "at": entry.created_at}
    payload: Any = entry.payload if isinstance(entry.payload, dict) else {}
    label, root = entry.label, "/" not in entry.path
    ruled = verdict_of(entry)
    if entry.kind == "resumed":
        return ExecutionResumed(**base, value=payload.get("value"), by=payload.get("by"),
                                reason=payload.get("reason"))
    if entry.kind == "suspended":
        call = str(payload.get("path", ""))
        return Interrupted(**base, call_path=call, reason=payload.get("reason"),
                           pending=(pending or {}).get(call))
    if entry.kind == "snapshot":
        return Checkpoint(**base, kind="snapshot")
    if ruled is not None:
        return _verdict(ruled, base, payload)
    if label == "message":
        message = payload.get("message")
        return MessageAccepted(**base, message_type="message", message=message)
    if label == "inbox":
        message = payload.get("message") if isinstance(payload.get("message"), dict) else {}
        if root and message.get("type") == "Start":
            return ExecutionStarted(**base, input=(message.get("data") or {}).get("input"))
        return MessageAccepted(**base, message_type=str(message.get("type", "")), message=message.get("data"))
    if label.startswith("msg:"):
        return MessageHandled(**base, reply=payload.get("reply"))
    if "step" not in payload:
        return Checkpoint(**base, kind=entry.kind)
    result = payload.get("result")
    fields = result if isinstance(result, dict) else {}
    head, _, name = label.rpartition("/")[2].partition(":")
    if label == "sleep":
        return Sleeping(**base, until=result)
    if head == "tool":
        return ToolResult(**base, tool=name.partition("[")[0].partition("#")[0], result=result)
    if head == "node":
        return NodeFinished(**base, node=name, output=result)
    if head == "turn" and name.isdigit():
        return LLMTurn(**base, turn=int(name), message=result)
    if head == "handoff":
        return Handoff(**base, by=fields.get("by"), to=fields.get("to"), message=fields.get("message"))
    if head == "delegate":
        return Delegation(**base, to=fields.get("to"), task=fields.get("task"))
    if head == "reply":
        return Reply(**base, result=result)
    return Checkpoint(**base, kind=entry.kind)


def _verdict(label: str, base: dict[str, Any], payload: dict[str, Any]) -> Event:
    if label == "paused":
        return ExecutionPaused(**base, pending=payload.get("pending", []), wake_at=payload.get("wake_at"),
                               waiting=payload.get("waiting", []))
    if label == "completed":
        return ExecutionCompleted(**base, output=payload.get("output"))
    if label == "failed":
        return ExecutionFailed(**base, error=payload.get("error"))
    if label == "timed_out":
        return ExecutionTimedOut(**base, deadline=payload.get("deadline"))
    return ExecutionCancelled(**base, by=payload.get("by"), reason=payload.get("reason"))


# -- live events ------------------------------------------------------------------


class LiveFeed:
    """One follower's buffer of live events: bounded, never blocking the publisher.

    When it is full, the oldest event goes and the follower is told how many it
    missed (`Dropped`), so a stalled reader costs the run nothing. `grew` marks
    where the journal grew among them, and to which entry: the follower reads the
    journal up to that entry there, so a turn's tokens come before the turn, and
    the next turn's after it, however far behind the follower is.
    """

    def __init__(self, store: Store, execution_id: str, on_event: Callable[[], object], size: int = 1000) -> None:
        self.execution_id = execution_id
        self.key = (store.identity, execution_id)
        """What it follows: the execution, on this database (another one may have the same id)."""
        self.thread = threading.get_ident()
        """The thread of the follower's event loop: a publisher on another one hands its events over."""
        self.items: deque[Event | Grew] = deque()
        self.size = size
        self.dropped = 0
        self._events = 0
        self._on_event = on_event

    def put(self, event: Event) -> None:
        if self._events >= self.size:
            while isinstance(self.items.popleft(), Grew):
                pass  # a mark goes with the events before it: the journal is read from the next one
            self.dropped += 1
            self._events -= 1
        self.items.append(event)
        self._events += 1
        self._on_event()

    def grew(self, upto: int) -> None:
        """The journal grew to entry ``upto``, after the events so far."""
        last = self.items[-1] if self.items else None
        if isinstance(last, Grew):
            last.upto = max(last.upto, upto)
        else:
            self.items.append(Grew(upto))

    def bound(self, known: int) -> int | None:
        """The last entry a read may pass on before the live events waiting here, or None for any.

        ``known``: the last entry known to come before them. A read that overtook the
        run (it saw entries committed after a waiting live event, as the marks after that
        event say) is cut back to what came before the event.
        """
        before = known
        for index, item in enumerate(self.items):
            if not isinstance(item, Grew):
                later = (m.upto for m in itertools.islice(self.items, index + 1, None) if isinstance(m, Grew))
                return before if any(upto > before for upto in later) else None
            before = max(before, item.upto)
        return None

    def take(self) -> Event | Grew | None:
        """The next live event (a `Dropped` first if some were missed) or mark; None when empty."""
        if self.dropped:
            count, self.dropped = self.dropped, 0
            return Dropped(execution_id=self.execution_id, path="", label="dropped", count=count)
        if not self.items:
            return None
        item = self.items.popleft()
        if not isinstance(item, Grew):
            self._events -= 1
        return item


@dataclass
class Grew:
    """Among a follower's live events: the journal grew here, up to entry ``upto``."""

    upto: int


_feeds: dict[tuple[object, str], set[LiveFeed]] = {}
"""This process's live followers, by the store's `identity` and the execution id."""


def subscribe(feed: LiveFeed) -> None:
    _feeds.setdefault(feed.key, set()).add(feed)


def unsubscribe(feed: LiveFeed) -> None:
    alike = _feeds.get(feed.key)
    if alike is not None:
        alike.discard(feed)
        if not alike:
            del _feeds[feed.key]


step_label: ContextVar[str | None] = ContextVar("tether_step_label", default=None)
"""The label of the durable step running now (``turn:3``): what a live event is of, by default."""


def emit(kind: type[_Event], label: str | None = None, **fields: Any) -> None:
    """Publish a live event from the code an execution runs (an LLM adapter's tokens, say).

    It goes to this process's followers of the execution (`tether.runtime.events`,
    ``runner.stream``) and is never journaled. Costs a lookup when nobody
    follows; does nothing outside an execution. Call it on the event loop's
    thread, or in a worker thread anyio started (a sync node or tool). Its path is
    the running actor's; ``label`` names the step, as the
    journal will (``turn:3``, ``node:charge``), by default the durable step
    running now.

    Example:
        ```python
        emit(TokenDelta, text=chunk)  # in an LLM adapter, during the turn's step
        ```
    """
    step = current_step.get()
    if step is None or not _feeds:
        return
    if label is None:
        label = step_label.get() or ""
    journal = step.journal
    execution_id = journal.lease.execution_id
    feeds = _feeds.get((journal.store.identity, execution_id))
    if not feeds:
        return
    event: Any = kind(execution_id=execution_id, path=journal.path, label=label, **fields)
    here = threading.get_ident()
    for feed in tuple(feeds):
        if feed.thread == here:
            feed.put(event)
            continue
        # A sync node or tool, in a worker thread: the follower's loop puts it in its feed.
        try:
            anyio.from_thread.run_sync(feed.put, event)
        except RuntimeError:
            pass  # not a thread anyio started, nor the loop's: nobody here can take it


def following() -> bool:
    """Whether anyone in this process follows the execution running now.

    An adapter asks before it does work only a follower needs (streaming a reply).
    """
    if not _feeds:
        return False
    step = current_step.get()
    return step is not None and (step.journal.store.identity, step.journal.lease.execution_id) in _feeds
