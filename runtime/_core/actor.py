"""`Actor`: the unit of state and behaviour that the runtime runs, supervises and journals."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar, get_args, get_origin

import anyio.to_thread
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python
from tether.stores import ConfigurationError, SerializationError, UsageError

from . import telemetry
from .events import step_label
from .idempotent import current_step
from .journal import Carried
from .policies import RestartPolicy, SupervisionStrategy
from .ref import MsgT, MsgT_contra, ReplyT, ReplyT_co

if TYPE_CHECKING:
    from .ref import ActorRef
    from .supervision import Group


class NoState(BaseModel):
    """The state of an actor that keeps none."""


StateT = TypeVar("StateT", bound=BaseModel)


class Actor(Generic[StateT, MsgT_contra, ReplyT_co]):
    """Subclass this and implement `receive`; the runtime does the rest.

    The first type argument is the actor's state model. The runtime creates it (from its
    defaults, or restored from the journal for a durable actor) before the first
    message, as ``self.state``. Handlers change ``self.state`` freely: for a
    durable actor the runtime journals what each message changed.

    The optional second and third are the messages it takes and the reply it returns
    (both ``Any`` when left out): ``spawn`` then returns an ``ActorRef[Deposit, int]``,
    so a type checker refuses ``ref.send("oops")``. They are for type checkers only;
    ``messages`` still says which models a durable actor reads back from its journal.

    Example:
        ```python
        class Deposit(BaseModel):
            amount: int

        class Account(BaseModel):
            balance: int = 0

        class AccountActor(Actor[Account, Deposit, int]):
            kind = "account"
            messages = (Deposit,)

            async def receive(self, message: Deposit) -> int:
                self.state.balance += message.amount
                return self.state.balance
        ```

    Class attributes:
        kind: The path segment's kind: an actor named ``"42"`` of kind ``"account"``
            lives at ``.../account:42``.
        messages: The message models a durable actor accepts; a journaled message
            is read back only as one of these (never by importing a name from data).
        supervision: How this actor's children are restarted.
        max_restarts, within: Restart intensity: more than ``max_restarts`` restarts
            within ``within`` seconds stops the children and fails this actor.
    """

    kind: ClassVar[str] = "actor"
    messages: ClassVar[tuple[type[BaseModel], ...]] = ()
    supervision: ClassVar[SupervisionStrategy] = SupervisionStrategy.ONE_FOR_ONE
    max_restarts: ClassVar[int] = 3
    within: ClassVar[float] = 5.0

    state_type: ClassVar[type[BaseModel]] = NoState
    state: StateT
    context: ActorContext

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if get_origin(base) is Actor:
                # The state model; Actor[S] alone also lists the defaults of the other two.
                argument = get_args(base)[0]
                # Actor[BaseModel] says "no particular state": BaseModel itself cannot be built.
                if isinstance(argument, type) and issubclass(argument, BaseModel) and argument is not BaseModel:
                    cls.state_type = argument

    async def started(self) -> None:
        """Called once per incarnation, after the state is ready, before the first message.

        Spawn children here: a restarted actor runs it again.
        """

    async def receive(self, message: MsgT_contra) -> ReplyT_co:
        """Handle one message and return the reply (``ask`` gets it; ``send`` drops it)."""
        raise NotImplementedError(f"{type(self).__name__} must implement receive()")

    async def stopping(self) -> None:
        """Called when the actor stops on purpose, after its last message."""


class ActorContext:
    """What a running actor knows about its place in the tree."""

    def __init__(self, path: str, ref: ActorRef, group: Group) -> None:
        self.path = path
        self.ref = ref
        self._group = group

    async def step(self, label: str, fn: Callable[..., Any], *args: Any, last: bool = False) -> Any:
        """Run ``fn(*args)`` as a durable step of the message being handled.

        Its result is journaled as an entry labelled ``label`` (``node:charge``).
        When the message is handled again (after a crash or a resume), the step
        returns its recorded result instead of running; a step that had not
        finished runs. Steps with the same label are told apart by their order.
        A synchronous ``fn`` runs in a worker thread. Results come back in their
        JSON form, the same the first time and on a replay.

        ``last=True`` says nothing with an effect of its own runs after this step
        until the message is handled: its record then goes with the message's own
        boundary (for the root's last message, with the run's outcome), one commit
        instead of two. A crash in between runs the step again, as a crash just
        before its own commit would; a handler that fails after it still records it.

        Raises:
            UsageError: The actor is not durable.
            SerializationError: The result is not JSON; nothing was recorded.
        """
        step = current_step.get()
        if step is None:
            raise UsageError(f"{self.path!r} is not durable: spawn it with durable=True to use step().")
        key = step.local_key(label)
        if key in step.recorded:
            step.replayed.add(key)
            return step.recorded[key]
        running = step_label.set(label)  # live events of this step are of it (see `emit`)
        try:
            if telemetry.active is None:  # the hot path pays one check, not a context manager
                result = await fn(*args) if _is_async(fn) else await anyio.to_thread.run_sync(fn, *args)
            else:
                with telemetry.step(step.journal, self.path, label, args):
                    result = await fn(*args) if _is_async(fn) else await anyio.to_thread.run_sync(fn, *args)
        finally:
            step_label.reset(running)
        try:
            result = to_jsonable_python(result)
        except PydanticSerializationError as exc:
            raise SerializationError(
                f"Step {label!r} of {self.path!r} returned {type(result).__name__}, which cannot be "
                f"journaled ({exc}). Return JSON data or a pydantic model."
            ) from exc
        if last:
            step.journal.carry(Carried(step.inbox_seq, label, key, result))
        else:
            await step.journal.record_step(step.inbox_seq, label, key, result)
        return result

    def finish(self, output: Any = None) -> None:
        """End the execution with ``output`` once the current message is handled.

        Only the root actor of an execution (`Runtime.run`) may finish it.
        """
        slot = self.ref._slot
        if not slot.root:
            raise UsageError(
                f"{self.path!r} cannot finish an execution: only the root actor of Runtime.run() can."
            )
        slot.finish = (True, output)

    @property
    def name(self) -> str:
        """The last segment's name, without its kind."""
        return self.path.rsplit("/", 1)[-1].split(":", 1)[-1]

    async def spawn(
        self,
        factory: ActorFactory[MsgT, ReplyT],
        name: str,
        *,
        restart: RestartPolicy = "permanent",
        shutdown_timeout: float = 5.0,
        durable: bool = False,
    ) -> ActorRef[MsgT, ReplyT]:
        """Start a child of this actor; it is stopped before this actor stops.

        Arguments are those of `Runtime.spawn`.
        """
        return await self._group.start_child(factory, name, restart=restart,
                                             shutdown_timeout=shutdown_timeout, durable=durable)


ActorFactory: TypeAlias = Callable[[], Actor[Any, MsgT, ReplyT]]
"""A zero-argument callable returning a fresh `Actor`, usually the Actor subclass itself.

``ActorFactory[M, R]`` makes actors that take ``M`` and reply ``R``; a bare
``ActorFactory`` makes any actor.
"""


def _is_async(fn: Callable[..., Any]) -> bool:
    """`inspect.iscoroutinefunction`, answered from the code's flags for a plain function or method."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is not None and code.co_flags & inspect.CO_COROUTINE:
        return True
    return inspect.iscoroutinefunction(fn)


def segment(kind: str, name: str) -> str:
    """One path segment, ``kind:name``; refuses names that would fake or break a path.

    Raises:
        ConfigurationError: An empty name, a name with ``/`` (it separates segments), a
            control character or a lone surrogate (no store keeps those alike), or a
            kind with ``:``.
    """
    check_name(kind, name)
    return f"{kind}:{name}"


def check_name(kind: str, name: str) -> str:
    """Return ``name`` if it can name an actor of ``kind`` in a path, else raise `ConfigurationError`."""
    if not isinstance(name, str) or not name:
        problem = "must be a non-empty string"
    elif "/" in name or "/" in kind:
        problem = "must not contain '/' (it separates path segments)"
    elif ":" in kind:
        problem = "has a kind with ':' (it separates a kind from its name)"
    elif any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        problem = "must not contain control characters (NUL, newlines, tabs, ...)"
    else:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            problem = "must be valid Unicode text (it holds a lone surrogate)"
        else:
            return name
    raise ConfigurationError(f"Cannot name {kind} {name!r}: a name {problem}. Pick another name.")
