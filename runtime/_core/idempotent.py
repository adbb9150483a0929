"""`@idempotent`: a side effect that runs once, however often its message is handled.

Inside a durable actor, the result of an ``@idempotent`` call is recorded in the
store under a key made of the execution, the actor's path, the message being
handled, the call's place (its `call_scope`, ``tool:approve_refund``), the
function's name, a digest of its arguments, and the call's ordinal among calls
alike. When the message is handled again (after a crash, a restart or a
resume), each call finds its own record and returns it instead of running
again; two legitimate identical calls in one message are two records.

The function's name is its qualified name *within* its module (``charge``,
``Billing.charge``), not its module's name: the same code loaded as a script
(``__main__``), with ``-m``, through ``--app pkg.refunds:runners`` or by a worker
has the same keys. Renaming a function changes its key, so a run paused before
the rename would run the effect again: ``@idempotent(name="charge")`` keeps the
key across renames and moves.
"""

from __future__ import annotations

import functools
import inspect
import threading
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, get_type_hints

import anyio.from_thread
from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError
from tether.stores import ConfigurationError, SerializationError, UsageError

from .interrupt import Suspension, content_digest, current_call, current_segment, taking as _taking

if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.stores import IdempotencyRecord, Store

    from .journal import ActorJournal

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class Step:
    """The message an actor is handling, as far as idempotency records are concerned."""

    journal: ActorJournal
    step: str
    inbox_seq: int | None = None
    recorded: dict[str, Any] = field(default_factory=dict)
    """Durable steps of this message already journaled, by key (a replay returns them)."""
    replay: bool = True
    """The message may have been handled before, so records may exist. False for a message
    handled for the first time: its calls run without looking for records first."""
    replayed: set[str] = field(default_factory=set)
    """The keys of ``recorded`` steps this handling has been answered from so far."""
    alias: str | None = None
    """In a fork that reuses effects, the message's name by its ask (``ask:<digest>``): records
    the original made while handling the same ask are found under it, whatever its number."""
    _ordinals: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def key_for(self, name: str, content: Any = None) -> str:
        """A key for this call, the same when the message is handled again.

        Unique across executions (``idempotency_key`` hands it to other
        systems): the execution, the actor's path, the message, then `local_key`.
        """
        return f"{self.journal.lease.execution_id}|{self.journal.path}|{self.step}|{self.local_key(name, content)}"

    def local_key(self, name: str, content: Any = None) -> str:
        """The call's key within its message, as a durable step's journal entry names it.

        Calls are numbered per name, per what they carry (a digest of ``content``,
        a message or the arguments) and per current `call_scope`. So calls running at
        once that differ in any of these never race for a number, and keys stay
        stable when a scheduler (trio's, say) runs them in another order the second
        time. Identical calls at once are numbered in arrival order: identical, so
        either order replays the same records. Worker threads number under a lock.
        """
        scoped = f"{current_segment() or ''}|{name}|{content_digest(content)}"
        with self._lock:
            ordinal = self._ordinals.get(scoped, 0) + 1
            self._ordinals[scoped] = ordinal
        return f"{scoped}#{ordinal}"


def ask_alias(execution_id: str, ask_id: str | None) -> str | None:
    """A message's name by the ask that sent it, the same in an execution and in its forks (or None)."""
    if ask_id is None:
        return None
    _, _, within = ask_id.partition("|")  # an ask id begins with its execution's id
    return f"ask:{content_digest(within)}"


current_step: ContextVar[Step | None] = ContextVar("tether_step", default=None)
_current_key: ContextVar[str | None] = ContextVar("tether_idempotency_key", default=None)


def current_store() -> Store | None:
    """The store of the execution whose message is being handled now, or None outside one.

    For what shares state across a fleet through the execution's own database:
    an LLM rate limit (`tether.actors.LLMLimit`), say.
    """
    step = current_step.get()
    return None if step is None else step.journal.store


def idempotency_key() -> str:
    """The stable key of the ``@idempotent`` call running now.

    Pass it to an external API that accepts one (a payment provider's
    Idempotency-Key): if the process dies between the provider's side effect and
    tether's record of it, the retry carries the same key and the provider
    deduplicates it.

    Raises:
        UsageError: Not inside an ``@idempotent`` call of a durable actor.
    """
    key = _current_key.get()
    if key is None:
        raise UsageError(
            "idempotency_key() is only defined inside an @idempotent function called while a "
            "durable actor handles a message."
        )
    return key


def idempotent(
    fn: Callable[P, R] | None = None, *, key: Callable[..., str] | None = None, name: str | None = None
) -> Any:
    """Record a function's result so that it runs once per call site and message.

    Works on sync and async functions. Call a sync one from a worker thread
    (``anyio.to_thread.run_sync``); the context reaches the thread. The result
    must be JSON-serializable by pydantic against the return annotation, and a
    recorded result comes back validated as that type.

    Outside a durable actor there is nowhere to record, and the function simply runs.

    Args:
        fn: The function (``@idempotent`` without parentheses).
        key: Names the call from its arguments instead of the function's
            name; calls with the same name share ordinals.
        name: The name its records are kept under (default: the function's
            qualified name within its module, ``Billing.charge``). Set it to keep
            the records of paused runs across a rename or a move.

    Example:
        ```python
        @idempotent
        async def charge(customer: str, cents: int) -> Receipt:
            return await payments.charge(customer, cents, idempotency_key=idempotency_key())
        ```
    """
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigurationError(f"@idempotent(name={name!r}): give a non-empty name for its records.")

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        qualname = f"{func.__module__}.{func.__qualname__}"  # in messages, and to the testing kit
        # In the records' keys: the same whichever name its module was loaded under.
        record_name = name or func.__qualname__
        try:
            returns = get_type_hints(func).get("return", Any)
        except NameError:
            returns = Any
        adapter: TypeAdapter[Any] = TypeAdapter(returns)

        def name_of(*args: Any, **kwargs: Any) -> str:
            return key(*args, **kwargs) if key is not None else record_name

        def encode(result: Any) -> Any:
            try:
                return adapter.dump_python(result, mode="json")
            except (PydanticSerializationError, ValueError, TypeError) as exc:
                raise SerializationError(
                    f"The result of @idempotent {qualname} cannot be recorded ({exc}). Return "
                    f"JSON-compatible data or a pydantic model, and annotate the return type."
                ) from exc

        # What earlier versions keyed records by; a run they paused still finds its records.
        legacy_name = None if key is not None or name is not None else qualname

        def lookup_keys(step: Step, call: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str | None]:
            record_key = step.key_for(name_of(*args, **kwargs), call)
            return record_key, (step.key_for(legacy_name, call) if legacy_name is not None and step.replay else None)

        def lookups(step: Step, record_key: str, legacy_key: str | None) -> list[tuple[str, bool]]:
            """The keys a record of this call may be under, in the order they are tried (and whether legacy)."""
            keys = [(record_key, False)]
            if legacy_key is not None:
                keys.append((legacy_key, True))
            if step.alias is not None:
                keys.append((record_key.replace(f"|{step.step}|", f"|{step.alias}|", 1), False))
            return keys

        def recorded(found: IdempotencyRecord, legacy: bool) -> Any:
            """The recorded result; the decisions its body took the first time are taken again."""
            value: Any = found.value
            if legacy or not isinstance(value, dict) or "v" not in value:
                return adapter.validate_python(value)
            scope = current_call.get()
            for path, reason, context in value.get("taken", ()):
                if scope is not None:
                    scope.take_answered(path, reason, context)
            return adapter.validate_python(value["v"])

        def record(result: Any, taken: list[tuple[str, str, str]]) -> Any:
            encoded: dict[str, Any] = {"v": encode(result)}
            if taken:
                encoded["taken"] = [list(t) for t in taken]
            return encoded

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                step = current_step.get()
                if step is None:
                    return await func(*args, **kwargs)
                record_key, legacy_key = lookup_keys(step, (args, kwargs), args, kwargs)
                journal = step.journal
                if step.replay:  # a message handled for the first time has no records to find
                    execution_id = journal.lease.execution_id
                    for lookup, legacy in lookups(step, record_key, legacy_key):
                        found = await journal.store.get_idempotent(execution_id, lookup)
                        if found is not None:
                            return recorded(found, legacy)
                token = _current_key.set(record_key)
                taken: list[tuple[str, str, str]] = []
                watch = _taking.set((*_taking.get(), taken))
                try:
                    result = await func(*args, **kwargs)
                except BaseException as exc:
                    if not isinstance(exc, Exception | Suspension):
                        journal.hooks.cut(record_key)  # cancelled mid-effect: no record will follow
                    raise
                finally:
                    _taking.reset(watch)
                    _current_key.reset(token)
                    journal.hooks.ran(qualname, record_key)
                journal.hooks.faults.reached("before_record")
                await journal.store.put_idempotent(journal.lease, record_key, record(result, taken))
                return result

            return run_async  # type: ignore[return-value]

        @functools.wraps(func)
        def run_sync(*args: Any, **kwargs: Any) -> Any:
            step = current_step.get()
            if step is None:
                return func(*args, **kwargs)
            try:
                anyio.from_thread.check_cancelled()  # a worker thread of the loop, or nowhere to wait
            except RuntimeError as exc:
                raise UsageError(
                    f"@idempotent {qualname} is synchronous and was called on the event loop's "
                    f"thread, where it cannot wait for the store. Call it with "
                    f"anyio.to_thread.run_sync({func.__name__}, ...), or make it async."
                ) from exc
            journal = step.journal
            record_key, legacy_key = lookup_keys(step, (args, kwargs), args, kwargs)
            if step.replay:  # a message handled for the first time has no records to find
                execution_id = journal.lease.execution_id
                for lookup, legacy in lookups(step, record_key, legacy_key):
                    found = anyio.from_thread.run(journal.store.get_idempotent, execution_id, lookup)
                    if found is not None:
                        return recorded(found, legacy)
            token = _current_key.set(record_key)
            taken: list[tuple[str, str, str]] = []
            watch = _taking.set((*_taking.get(), taken))
            try:
                result = func(*args, **kwargs)
            finally:
                _taking.reset(watch)
                _current_key.reset(token)
                journal.hooks.ran(qualname, record_key)
            journal.hooks.faults.reached("before_record")
            anyio.from_thread.run(journal.store.put_idempotent, journal.lease, record_key, record(result, taken))
            return result

        return run_sync

    return decorate(fn) if fn is not None else decorate
