"""`interrupt()` and `Resume`: pause an execution for a decision, and carry the decision back.

``interrupt(reason, context)`` inside a handler (or a tool or node it calls)
returns the resume value when one is in scope for exactly this call, and
otherwise suspends: the runtime records the pending interrupt and parks the
actor tree. When the decision arrives, the suspended message is handled again
from its start with the value in scope for that one call; a later, different
``interrupt()`` suspends again.
"""

from __future__ import annotations

import hashlib
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError
from pydantic_core import to_json
from tether.stores import ConfigurationError, UsageError

if TYPE_CHECKING:
    from datetime import datetime, timedelta


class Resume(BaseModel):
    """A decision that resumes an interrupted call. Extra fields are kept.

    ``approved`` is required: an approval gate fails closed, so a decision that
    does not say whether it approves (``{}``, or only a note) is refused before
    it consumes the pending interrupt. An interrupt that wants another shape
    declares its own model (``interrupt(..., expect=MyDecision)``).

    Example:
        ```python
        Resume(approved=True, metadata={"approver": "alice"}, amount=120).amount  # 120
        ```
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(extra="allow")

    approved: bool
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


class Suspension(BaseException):
    """What pauses an execution: `interrupt()`, a durable `sleep()`, or a part of the tree that paused.

    Like trio's ``Cancelled``, a `BaseException`: a tool or node that wraps its body
    in ``try: ... except Exception:`` cannot swallow a pause. Code that catches
    ``BaseException`` must re-raise it (``except Suspension: raise`` first); the
    runtime catches it, journals the pause and parks the actor tree.
    """


class Interrupted(Suspension):
    """Raised by `interrupt()` to suspend; the runtime catches it. Do not catch it."""

    def __init__(self, path: str, reason: str, context: JsonValue, expect: type[BaseModel],
                 timeout: timedelta | None = None, default: JsonValue = None) -> None:
        super().__init__(f"interrupted at {path}: {reason}")
        self.path = path
        self.reason = reason
        self.context = context
        self.expect = model_name(expect)
        self.timeout = timeout
        """How long the decision may take; the journal turns it into a deadline on the runtime's clock."""
        self.default = default


class Parked(Suspension):
    """Raised by a durable `sleep` that is not due yet; the runtime catches it. Do not catch it."""

    def __init__(self, due: datetime, *, here: bool = False) -> None:
        super().__init__(f"parked until {due.isoformat()}")
        self.due = due
        self.here = here
        """A short wait (a retry's backoff) that the process driving the run waits out itself,
        with no lease held: `Runtime.run` returns after it, not paused."""


def model_name(model: type[BaseModel]) -> str:
    """How a decision's model is named in the journal: ``module:qualified.name``."""
    return f"{model.__module__}:{model.__qualname__}"


def loaded_model(name: str) -> type[BaseModel] | None:
    """The model class of that name among those this process has defined, if any.

    Looked up, never imported: a name read from the journal cannot load code.
    The same code loaded under another module name (a script's ``__main__``, then
    ``--app refunds:runners``) is found by its qualified name, when exactly one
    model has it; models of two named modules are never taken for one another,
    except tether's own, found under any of its modules.
    """
    module, colon, qualname = name.partition(":")
    if not colon:  # module.qualname, as earlier versions of tether wrote it
        module, _, qualname = name.rpartition(".")
    found: Any = sys.modules.get(module)
    for part in qualname.split(".") if found is not None else ():
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, BaseModel) and found.__qualname__ == qualname:
        return found  # where the name says: no walk over every model class
    # tether's own models move between its private modules from one release to the next.
    ours = module.startswith("tether.")
    alike: list[type[BaseModel]] = []
    seen: set[type[BaseModel]] = set()
    pending: list[type[BaseModel]] = [BaseModel]
    while pending:
        model = pending.pop()
        if model in seen:
            continue  # reached through two bases
        seen.add(model)
        if model.__qualname__ == qualname:
            if model.__module__ == module:
                return model
            # Only a script's own module has another name elsewhere: two named modules are two models.
            if "__main__" in (module, model.__module__) or (ours and model.__module__.startswith("tether.")):
                alike.append(model)
        pending.extend(model.__subclasses__())
    return alike[0] if len(alike) == 1 else None


class Suspended(Suspension):
    """Raised by ``ask`` when the actor asked (or one below it) suspended; do not catch it."""

    def __init__(self, path: str) -> None:
        super().__init__(f"suspended below {path}")
        self.path = path


@dataclass(frozen=True)
class Answer:
    """A journaled decision, with what the suspended call asked: the call that asks again gets it."""

    value: JsonValue
    reason: str | None = None
    """The suspended call's reason (None in journals of earlier versions: matched by order alone)."""
    context: str | None = None
    """A digest of the suspended call's context."""


@dataclass
class CallScope:
    """Where `interrupt()` calls come from while one message is handled."""

    actor_path: str
    resume_values: dict[str, list[Answer]] = field(default_factory=dict)
    """Decisions per call path, oldest first: each is consumed by one call (see `take`)."""
    opened: dict[str, int] = field(default_factory=dict)
    """How many calls of each name this message has opened: numbers never repeat."""
    suspended: tuple[str, ...] = ()
    """The call paths an earlier handling of this message suspended at, decided or not: its progress."""
    taken: dict[str, int] = field(default_factory=dict)
    """How many decisions each call path consumed in this handling: the progress it replayed."""

    def take(self, path: str, reason: str, context: JsonValue) -> Answer | None:
        """The decision for the call at ``path`` asking ``reason`` about ``context``, consumed.

        By order among the decisions that answered the same reason, preferring the
        one whose context matches too. So an earlier call that is not made again
        (inside an ``@idempotent`` function answered from its record) leaves its
        decision alone instead of handing it to the next question, and a context
        that changes between runs (a timestamp, say) still finds its answer.
        """
        values = self.resume_values.get(path)
        if not values:
            return None
        alike = [i for i, d in enumerate(values) if d.reason is None or d.reason == reason]
        if not alike:
            return None
        digest = content_digest(context)
        exact = [i for i in alike if values[i].context == digest]
        decision = values.pop(exact[0] if exact else alike[0])
        self.taken[path] = self.taken.get(path, 0) + 1
        for log in taking.get():  # an @idempotent call running: it records what its body took
            log.append((path, reason, digest))
        return decision

    def take_answered(self, path: str, reason: str, digest: str) -> None:
        """Take the decision an earlier run of an ``@idempotent`` body took, now answered from its record."""
        values = self.resume_values.get(path, [])
        alike = [i for i, d in enumerate(values) if d.reason is None or d.reason == reason]
        exact = [i for i in alike if values[i].context == digest]
        if exact or alike:
            values.pop(exact[0] if exact else alike[0])
            self.taken[path] = self.taken.get(path, 0) + 1


def content_digest(content: Any) -> str:
    """A short, process-independent digest: what is not JSON counts by its type's name only."""
    if content is None:
        return ""
    data = to_json(content, fallback=lambda value: type(value).__qualname__)
    return hashlib.sha256(data).hexdigest()[:12]


current_call: ContextVar[CallScope | None] = ContextVar("tether_call", default=None)
taking: ContextVar[tuple[list[tuple[str, str, str]], ...]] = ContextVar("tether_taking", default=())
"""The logs of the ``@idempotent`` calls running here: each notes the decisions its body takes."""
_segment: ContextVar[str | None] = ContextVar("tether_segment", default=None)


class call_scope:  # lower case: used like a function, ``with call_scope("tool:x") as name:``
    """Name the call running inside, as a path segment (``tool:approve_refund``).

    Calls with the same segment in one message are numbered in the order they
    open (``tool:x``, ``tool:x#2``, ...), so each pending interrupt stays
    addressable. That order is only stable for calls made one after another:
    give calls that run at the same time names of their own (the tool call's
    index, say, ``tool:x[2]``), or a re-run may number them differently. The
    ``with`` statement gets the full segment.
    """

    __slots__ = ("_segment", "_token")

    def __init__(self, segment: str) -> None:
        self._segment = segment

    def __enter__(self) -> str:
        outer = _segment.get()
        base = f"{outer}/{self._segment}" if outer else self._segment
        scope = current_call.get()
        if scope is not None:
            count = scope.opened.get(base, 0) + 1
            scope.opened[base] = count
            name = base if count == 1 else f"{base}#{count}"
        else:
            name = base
        self._token = _segment.set(name)
        return name

    def __exit__(self, *exc_info: object) -> None:
        _segment.reset(self._token)


def current_segment() -> str | None:
    """The call segment (``tool:approve_refund``) of the code running now, if any."""
    return _segment.get()


def interrupt(
    reason: str,
    context: JsonValue = None,
    *,
    expect: type[BaseModel] = Resume,
    timeout: timedelta | None = None,
    default: BaseModel | dict[str, Any] | None = None,
) -> Any:
    """Suspend the execution until a decision arrives, or return the decision.

    Call it from a handler of a durable actor in an execution, or from a tool or
    node it runs, in sync or async code (also in a worker thread started with
    ``anyio.to_thread.run_sync``).

    Args:
        reason: Why a decision is needed (``"manager_approval"``).
        context: JSON the decider sees (``{"amount": 50_000}``).
        expect: The model the decision must validate as; a value that does not is
            refused before it consumes the pending interrupt.
        timeout: An approval deadline: when nobody has decided by then, a worker
            (``tether worker``) claims it with ``default``, exactly as a person would,
            and the journal says it was the deadline.
        default: The decision the deadline takes (required with ``timeout``).

    Returns:
        The decision, as an ``expect`` instance (a `Resume` by default).

    Raises:
        UsageError: Not inside a durable actor of an execution.
        ConfigurationError: ``timeout`` without a ``default``, or a ``default`` that
            does not fit ``expect``.
    """
    scope = current_call.get()
    if scope is None:
        raise UsageError(
            "interrupt() was called outside an execution. Call it while a durable actor of "
            "Runtime.run(...) handles a message (a node, a tool, or the handler itself)."
        )
    segment = _segment.get()
    path = f"{scope.actor_path}/{segment}" if segment else scope.actor_path
    decision = scope.take(path, reason, context)  # in scope for this one call only
    if decision is not None:
        try:
            return expect.model_validate(decision.value)
        except ValidationError as exc:  # validated before the claim; here only if code changed
            raise ConfigurationError(f"The decision for {path!r} does not fit {expect.__name__}: {exc}") from exc
    fallback = None
    if timeout is not None:
        if default is None:
            raise ConfigurationError(
                f"interrupt({reason!r}, timeout=...) needs default=: the decision taken when nobody "
                f"decides in time, e.g. default=Resume(approved=False)."
            )
        try:
            fallback = expect.model_validate(
                default.model_dump(mode="json") if isinstance(default, BaseModel) else default
            ).model_dump(mode="json")
        except ValidationError as exc:
            raise ConfigurationError(f"default= does not fit {expect.__name__}: {exc}") from exc
    raise Interrupted(path, reason, context, expect, timeout, fallback)
