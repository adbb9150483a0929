"""fastaiagent's durability API on tether's machinery: change the imports, keep the program.

```python
from tether.actors.compat import Agent, FunctionTool, Resume, SQLiteCheckpointer, interrupt

agent = Agent(name="refund-bot", system_prompt="...", llm=llm,
              tools=[FunctionTool(name="approve_refund", fn=approve_refund)],
              checkpointer=SQLiteCheckpointer())
result = agent.run("Process a $50k refund.", execution_id="job-1")      # no await
result.pending_interrupt["agent_path"]         # 'agent:refund-bot/tool:approve_refund'
result = await agent.aresume("job-1", resume_value=Resume(approved=True))
```

Each class here wraps the native runner of the same name (``.runner``); the run
itself is tether's: the same journal, the same atomic claim of a pending
interrupt, the same recovery after a crash. What the wrapper adds is the other
calling convention:

- ``run``/``execute`` block: they start an event loop of their own (asyncio),
  so they work in a script or a thread with no loop running, and refuse, with
  `UsageError`, to block a loop that is (await ``arun``/``aexecute`` there).
- ``resume_value=`` is the decision; ``execution_id`` may be left out (a fresh id
  is made, and is on the result).
- Results are `Result`: a `RunResult` whose pending interrupt also reads as a
  dict (``result.pending_interrupt["agent_path"]``).
- Each call opens the checkpointer's database for itself and closes it before
  returning, so one object serves any number of calls and event loops, as a
  blocking checkpointer did. (The native API keeps one store open instead.)
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import anyio
from tether.runtime import (
    AlreadyResumed,
    PendingInterrupt,
    Resume,
    Runner,
    RunResult,
    UsageError,
    idempotent,
    interrupt,
)
from tether.stores import ConfigurationError, MemoryStore, PostgresStore, SQLiteStore, Store

from ._agent import Agent as _Agent
from ._chain import Chain as _Chain
from ._team import Supervisor as _Supervisor, Swarm as _Swarm, Worker as _Worker
from ._tools import FunctionTool as _FunctionTool

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from pathlib import Path

    from pydantic import BaseModel

    from ._llm import LLM

__all__ = (
    "Agent",
    "AlreadyResumed",
    "Chain",
    "FunctionTool",
    "Interrupt",
    "PostgresCheckpointer",
    "Result",
    "Resume",
    "SQLiteCheckpointer",
    "Supervisor",
    "Swarm",
    "Worker",
    "idempotent",
    "interrupt",
)

DEFAULT_SQLITE = "tether.db"
"""Where `SQLiteCheckpointer()` keeps its file: the ``tether`` command's default store, so
``tether list-pending`` run in the same directory sees the program's pauses."""

BACKEND = "asyncio"
"""The event loop a blocking call runs on."""

T = TypeVar("T")
R = TypeVar("R", bound=Runner)


# -- checkpointers ------------------------------------------------------------------


def SQLiteCheckpointer(db_path: str | Path | None = None) -> SQLiteStore:
    """A tether `SQLiteStore` at ``db_path`` (default ``tether.db`` in the current directory)."""
    return SQLiteStore(db_path if db_path is not None else DEFAULT_SQLITE)


def PostgresCheckpointer(
    connection_string: str, *, schema: str | None = None, min_pool_size: int = 1, max_pool_size: int = 10,
) -> PostgresStore:
    """A tether `PostgresStore` on ``connection_string``.

    ``schema`` names the PostgreSQL schema of the tables (default: the connection's
    search path, where ``tether --store postgresql://...`` looks).
    """
    return PostgresStore(connection_string, schema=schema, min_size=min_pool_size, max_size=max_pool_size)


def _fresh(store: Store) -> Store:
    """A store of the same database for one call, or ``store`` itself when it cannot be copied.

    A tether store belongs to the event loop it opened on, and a closed one stays
    closed; a call that opens its own copy can run under any loop, any number of times.
    """
    if type(store) is SQLiteStore:
        return SQLiteStore(store.path, create=store.create, synchronous=store.synchronous,
                           busy_timeout=store.busy_timeout)
    if type(store) is PostgresStore:
        return PostgresStore(store.dsn, schema=store.schema, create=store.create, min_size=store.min_size,
                             max_size=store.max_size, connect_timeout=store.connect_timeout,
                             command_timeout=store.command_timeout)
    return store


# -- results ------------------------------------------------------------------------


class Interrupt(PendingInterrupt):
    """A pending interrupt that also reads as a dict of ``reason``, ``context``, ``node_id`` and ``agent_path``.

    ``agent_path`` is tether's full path of the call, for a chain's node too
    (``chain:refund/node:approve``); ``node_id`` is the node's name for a chain
    and ``None`` otherwise.
    """

    KEYS: ClassVar[tuple[str, ...]] = ("reason", "context", "node_id", "agent_path")

    @property
    def node_id(self) -> str | None:
        """The name of the chain node that paused (``None`` if no chain node did)."""
        last = self.agent_path.rsplit("/", 1)[-1]
        return last.removeprefix("node:") if last.startswith("node:") else None

    def __getitem__(self, key: str) -> Any:
        if key not in self.KEYS:
            raise KeyError(f"{key!r}: a pending interrupt has {', '.join(self.KEYS)}.")
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """``self[key]``, or ``default`` for a key it does not have."""
        return getattr(self, key) if key in self.KEYS else default

    def keys(self) -> tuple[str, ...]:
        """The keys of its dict form."""
        return self.KEYS


class Result(RunResult):
    """A `RunResult` whose pending interrupts are `Interrupt`s (item access works on them)."""

    # A result is frozen: narrowing the types of its fields is safe.
    pending_interrupt: Interrupt | None = None  # type: ignore[mutable-override]
    pending: list[Interrupt] = []  # type: ignore[assignment]  # noqa: RUF012

    @property
    def final_state(self) -> Any:
        """A chain's state at its end (its output); ``{}`` while it has not ended."""
        return self.output if self.status == "completed" and self.output is not None else {}


def _result(native: RunResult) -> Result:
    def wrap(row: PendingInterrupt) -> Interrupt:
        return Interrupt.model_construct(**dict(row))

    fields = dict(native)
    fields["pending"] = [wrap(row) for row in native.pending]
    fields["pending_interrupt"] = wrap(native.pending_interrupt) if native.pending_interrupt else None
    return Result.model_construct(**fields)  # already validated, and a typed output stays typed


# -- the calling convention ---------------------------------------------------------


def _blocking(call: Callable[[], Awaitable[T]], method: str, instead: str) -> T:
    """Run ``call`` to its end on an event loop of its own; refuse inside a running loop."""
    try:
        anyio.get_current_task()
    except RuntimeError:  # no loop runs in this thread: start one
        return anyio.run(call, backend=BACKEND)
    raise UsageError(
        f"{method}() blocks until the run ends, so it cannot be called inside a running event loop; "
        f"use 'await {instead}(...)' there."
    )


class _Wrapper(Generic[R]):
    """What the compatible runners share: a native runner, and a store opened per call."""

    runner: R
    checkpointer: Store

    def __getattr__(self, name: str) -> Any:
        # Everything else (name, root_path, history, cancel, ...) is the native runner's.
        if name == "runner":
            raise AttributeError(name)
        return getattr(self.runner, name)

    def __repr__(self) -> str:
        return f"compat.{self.runner!r}"

    async def _bound(self, act: Callable[[R], Awaitable[T]]) -> T:
        """``act`` on a copy of the runner bound to this call's own store, opened and closed here."""
        store = _fresh(self.checkpointer)
        runner = copy.copy(self.runner)  # the same definition, bound to this call's store
        runner.store = store
        async with store if store is not self.checkpointer else contextlib.nullcontext(store):
            return await act(runner)

    async def _start(self, input: Any, execution_id: str | None) -> Result:
        run_id = execution_id if execution_id is not None else uuid.uuid4().hex
        return _result(await self._bound(lambda runner: runner.run(input, execution_id=run_id)))

    async def aresume(self, execution_id: str, *, resume_value: Resume | BaseModel | dict[str, Any] | None = None,
                      path: str | None = None) -> Result:
        """Resume a paused execution with ``resume_value``, or recover a crashed one (no value).

        In any process: the pending interrupt (the only one, or the one at ``path``) is
        claimed atomically, and a second resumer gets `AlreadyResumed`.
        """
        return _result(await self._bound(lambda runner: runner.resume(execution_id, resume_value, path=path)))

    def cancel(self, execution_id: str, *, reason: str = "") -> bool:
        """Cancel an execution, blocking until it has stopped; ``False`` if it had finished already."""

        async def cancel(runner: Runner) -> bool:
            before = await runner._store().get_execution(execution_id)
            await runner.cancel(execution_id, reason=reason)
            return before is not None and before.status not in _FINAL

        return _blocking(partial(self._bound, cancel), "cancel", "runner.cancel")


_FINAL = frozenset({"completed", "failed", "cancelled", "timed_out"})


class _AgentLike(_Wrapper[R]):
    """``run``/``arun`` and a blocking ``resume``: the Agent, Swarm and Supervisor convention."""

    def run(self, input: Any, *, execution_id: str | None = None) -> Result:
        """Run to the end or to a pause, blocking; refused inside a running event loop (use `arun`)."""
        return _blocking(partial(self.arun, input, execution_id=execution_id), "run", "arun")

    async def arun(self, input: Any, *, execution_id: str | None = None) -> Result:
        """Run to the end or to a pause. The execution id is an idempotency key (default: a new one)."""
        return await self._start(input, execution_id)

    def resume(self, execution_id: str, *, resume_value: Resume | BaseModel | dict[str, Any] | None = None,
               path: str | None = None) -> Result:
        """`aresume`, blocking; refused inside a running event loop."""
        return _blocking(partial(self.aresume, execution_id, resume_value=resume_value, path=path),
                         "resume", "aresume")


def _or_memory(checkpointer: Store | None) -> Store:
    # Without a checkpointer nothing outlives the process, as in the original.
    return checkpointer if checkpointer is not None else MemoryStore()


def _native_tools(tools: Sequence[Any] | None) -> list[Any]:
    return list(tools or ())


# -- the runners --------------------------------------------------------------------


class FunctionTool(_FunctionTool):
    """A tool from a function, with the name first: ``FunctionTool(name="approve_refund", fn=approve_refund)``."""

    def __init__(self, name: str | None = None, fn: Callable[..., Any] | None = None,
                 description: str | None = None, **options: Any) -> None:
        if fn is None:
            raise ConfigurationError(f"FunctionTool({name!r}) needs fn=, the function the tool calls.")
        super().__init__(fn, name, description, **options)


class Agent(_AgentLike[_Agent]):
    """An agent: tether's `tether.actors.Agent` behind the ``run``/``aresume`` convention.

    Args:
        name: Its name; its path is ``agent:<name>``, a tool's ``agent:<name>/tool:<tool>``.
        system_prompt: The instructions.
        llm: What answers each turn (`ScriptedLLM`, `OpenAIChatLLM`, `AnthropicLLM`, any `LLM`).
        tools: `FunctionTool`s (or plain functions).
        checkpointer: Where runs are journaled (`SQLiteCheckpointer`, `PostgresCheckpointer`, or any
            tether store). Without one, runs are kept in memory, in this process only.
        output_type: A pydantic model the final answer must parse as.
        native: Further options of `tether.actors.Agent` (``max_turns=``, ``llm_timeout=``, ...).
    """

    def __init__(self, name: str, system_prompt: str = "", llm: LLM | None = None, tools: Sequence[Any] | None = None,
                 *, checkpointer: Store | None = None, output_type: type[BaseModel] | None = None,
                 **native: Any) -> None:
        if llm is None:
            raise ConfigurationError(f"Agent {name!r} needs llm=: ScriptedLLM, OpenAIChatLLM, AnthropicLLM "
                                     f"or any object with an async complete(messages, tools).")
        self.checkpointer = _or_memory(checkpointer)
        self.runner = _Agent(name, llm=llm, tools=_native_tools(tools), system_prompt=system_prompt,
                                     output_type=output_type, store=self.checkpointer, **native)


def _agents(agents: Sequence[Agent | _Agent], owner: str) -> list[_Agent]:
    native = [a.runner if isinstance(a, Agent) else a for a in agents]
    strays = [repr(a) for a in native if not isinstance(a, _Agent)]
    if strays:
        raise ConfigurationError(f"{owner}: {', '.join(strays)} is not an Agent.")
    return native


class Swarm(_AgentLike[_Swarm]):
    """Peer agents handing a task on: tether's `tether.actors.Swarm` behind ``run``/``aresume``.

    Each member gets a ``handoff_to_<peer>`` tool per peer it may hand off to; a
    tool's path is ``swarm:<name>/agent:<member>/tool:<tool>``.
    """

    def __init__(self, name: str, agents: Sequence[Agent | _Agent], entrypoint: str,
                 handoffs: Mapping[str, Sequence[str]] | None = None, max_handoffs: int = 8,
                 checkpointer: Store | None = None, **native: Any) -> None:
        self.checkpointer = _or_memory(checkpointer)
        self.runner = _Swarm(name, agents=_agents(agents, f"Swarm {name!r}"), entrypoint=entrypoint,
                                     handoffs=handoffs, max_handoffs=max_handoffs, store=self.checkpointer,
                                     **native)


def Worker(agent: Agent | _Agent, role: str = "", description: str = "") -> _Worker:
    """A supervisor's worker: the agent, its role (default: the agent's name) and what it is for.

    The description defaults to the start of the agent's system prompt.
    """
    (native,) = _agents([agent], "Worker(agent=...)")
    return _Worker(agent=native, role=role or native.name.removeprefix("agent:"),
                   description=description or native.system_prompt[:200])


class Supervisor(_AgentLike[_Supervisor]):
    """A supervisor delegating to workers: tether's `tether.actors.Supervisor` behind ``run``/``aresume``.

    Its LLM has a ``delegate_to_<role>(task)`` tool per worker; a worker's tool's
    path is ``supervisor:<name>/worker:<role>/tool:<tool>``.
    """

    def __init__(self, name: str, llm: LLM | None = None, workers: Sequence[_Worker] | None = None,
                 system_prompt: str = "", checkpointer: Store | None = None, **native: Any) -> None:
        if llm is None:
            raise ConfigurationError(f"Supervisor {name!r} needs llm=, the LLM that decides whom to delegate to.")
        self.checkpointer = _or_memory(checkpointer)
        self.runner = _Supervisor(name, llm=llm, workers=list(workers or ()), system_prompt=system_prompt,
                                               store=self.checkpointer, **native)


class Chain(_Wrapper[_Chain]):
    """A graph of nodes over one state: tether's `tether.actors.Chain` behind ``execute``/``aresume``.

    A node is a function of the state returning a dict of updates (``add_node("approve",
    approve_refund)``, or ``tool=FunctionTool(name=..., fn=approve_refund)``, whose
    function is then given the state). ``connect(source, target, condition=...)``
    takes a function of the state as its condition.

    Args:
        name: Its name; a node's path is ``chain:<name>/node:<node>``.
        checkpointer: Where runs are journaled (default: `SQLiteCheckpointer()`).
        native: Further options of `tether.actors.Chain` (``state=``, ``entry=``, ...).
    """

    def __init__(self, name: str, *, checkpointer: Store | None = None, **native: Any) -> None:
        self.checkpointer = checkpointer if checkpointer is not None else SQLiteCheckpointer()
        self.runner = _Chain(name, store=self.checkpointer, **native)

    def add_node(self, id: str, fn: Callable[[Any], Any] | None = None, *, tool: _FunctionTool | None = None,
                 **options: Any) -> Chain:
        """Add the node ``id``: ``fn``, or the function of ``tool``, called with the state."""
        if "agent" in options:
            raise ConfigurationError(
                f"add_node({id!r}, agent=...): a chain's nodes are functions here. Put the agents in a "
                f"Supervisor or a Swarm, or call the agent's arun() inside an async node function."
            )
        if (fn is None) == (tool is None):
            raise ConfigurationError(f"add_node({id!r}, ...) takes one node: a function, or tool=FunctionTool(...).")
        function = fn if fn is not None else tool.fn  # type: ignore[union-attr]
        self.runner.add_node(function, id, **options)
        return self

    def connect(self, source: str, target: str, condition: Callable[[Any], bool] | None = None,
                max_iterations: int | None = None) -> Chain:
        """Follow ``source -> target`` after ``source`` runs, when ``condition(state)`` is true."""
        if isinstance(condition, str):
            raise ConfigurationError(
                f"connect({source!r}, {target!r}, condition={condition!r}): a condition is a function of the "
                f"state here, not an expression in a string: condition=lambda state: ..."
            )
        self.runner.add_edge(source, target, condition, max_iterations)
        return self

    def execute(self, initial_state: dict[str, Any] | None = None, *, execution_id: str | None = None) -> Result:
        """Run to the end or to a pause, blocking; refused inside a running event loop (use `aexecute`)."""
        return _blocking(partial(self.aexecute, initial_state, execution_id=execution_id), "execute", "aexecute")

    async def aexecute(self, initial_state: dict[str, Any] | None = None, *,
                       execution_id: str | None = None) -> Result:
        """Run to the end or to a pause. The execution id is an idempotency key (default: a new one)."""
        return await self._start(initial_state or {}, execution_id)

    async def resume(self, execution_id: str, modified_state: dict[str, Any] | None = None, *,
                     resume_value: Resume | BaseModel | dict[str, Any] | None = None,
                     path: str | None = None) -> Result:
        """`aresume` (a chain's ``resume`` is async). ``modified_state`` is refused: fork the run instead."""
        if modified_state:
            raise ConfigurationError(
                "resume(modified_state=...) would change a journaled run. Fork it instead, with the state you "
                "want, from a boundary of its history: runner.fork(execution_id, at=..., new_execution_id=...)."
            )
        return await self.aresume(execution_id, resume_value=resume_value, path=path)
