"""`Swarm` and `Supervisor`: agents as actors in one execution's tree, talking by messages.

A swarm's members and a supervisor's workers are durable child actors of the
team's root actor, each with its own mailbox and journal:

- a **handoff** (``handoff_to_<peer>``) ends the member's turn loop; the swarm
  journals it as ``handoff:N`` (who, to whom, the blackboard) and sends the task
  to the peer's mailbox;
- a **delegation** (``delegate_to_<role>``) is a tool call of the supervisor's
  own loop: the task goes to the worker's mailbox (``delegate:N``) and the
  worker's answer comes back as the reply (``reply:N``).

Paths come from where an agent runs, never from the agent object:
``swarm:<s>/agent:<a>/tool:<t>`` and ``supervisor:<s>/worker:<role>/tool:<t>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, Field, JsonValue
from tether.runtime import Actor, ActorRef, NoState, Runner, Start, TetherError
from tether.stores import ConfigurationError, Store

from ._agent import Agent
from ._loop import Final, Handoff, TurnLoop
from ._messages import Message, SystemMessage, UserMessage
from ._retry import LLM_RETRY
from ._threads import Threaded, exchange, opening, start_of, user_text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import timedelta

    from tether.runtime import RetryPolicy

    from ._llm import LLM
    from ._tools import FunctionTool


class MaxHandoffsExceeded(TetherError):
    """A swarm's agents handed the task on more than ``max_handoffs`` times; the run fails with this."""


class Note(BaseModel):
    """One handoff, as the team remembers it."""

    by: str
    to: str
    message: str


class Blackboard(BaseModel):
    """What a swarm's agents share: the task, and every handoff's message so far."""

    task: str
    notes: list[Note] = Field(default_factory=list)


class Task(BaseModel):
    """The message that activates a team member or asks a worker."""

    input: str
    blackboard: Blackboard | None = None
    after: str | None = None
    """In a swarm's thread run: the run it continues, whose exchange the member reads first."""


class Outcome(BaseModel):
    """A member's reply: its final answer, or the peer it handed the task to."""

    output: JsonValue = None
    handoff_to: str | None = None
    message: str = ""


class _MemberActor(Actor[NoState, Task, Any]):
    """An agent in a team: each `Task` is one turn loop over its own journal.

    Asked from its durable parent, it replies with the JSON form of its `Outcome`: hence ``Any``.
    """

    messages: ClassVar[tuple[type[BaseModel], ...]] = (Task,)
    agent: Agent
    peers: tuple[str, ...] = ()
    team: Runner | None = None  # a swarm's (whose thread runs its members continue)

    async def receive(self, message: Task) -> Outcome:
        conversation: list[Message] = [SystemMessage(content=self.agent.system_prompt)] if self.agent.system_prompt else []
        if self.team is not None:
            conversation += await exchange(self.team, message.after)
        conversation.append(UserMessage(content=message.input))
        board = message.blackboard
        if board is not None and board.notes:
            notes = "\n".join(f"- {note.by} to {note.to}: {note.message or '(no message)'}" for note in board.notes)
            conversation.append(UserMessage(content=f"Handoffs so far:\n{notes}"))
        outcome = await TurnLoop(self.context, self.agent, handoffs=self.peers).run(conversation)
        if isinstance(outcome, Handoff):
            return Outcome(handoff_to=outcome.to, message=outcome.message)
        return Outcome(output=outcome.output)


def _member(agent: Agent, kind: str, peers: Sequence[str] = (), team: Runner | None = None) -> type[_MemberActor]:
    return type(f"Member[{kind}:{agent.name}]", (_MemberActor,),
                {"kind": kind, "agent": agent, "peers": tuple(peers), "team": team})


class Swarm(Threaded):
    """Peer agents that hand a task to one another until one of them answers.

    Each agent gets a ``handoff_to_<peer>(message="")`` tool for each peer it may
    hand off to. The output of a run is the final answer of the agent that
    finished. Agents need no store of their own; an agent object may serve in
    several teams.

    Args:
        name: The swarm's name; its path is ``swarm:<name>``.
        agents: The members; their names must differ.
        entrypoint: The member that gets the task first.
        handoffs: For each member, the members it may hand off to (default: all others).
        store: Where its executions are journaled.
        max_handoffs: Handoffs allowed per run before it fails with `MaxHandoffsExceeded`.
        lease_seconds: How long a crashed run's lease outlives its process.
        version: The version runs start on (``"2"``); a run continues on the version it
            started on when that is loaded (docs/versions.md). Default: none.

    Example:
        ```python
        swarm = Swarm("content_team", agents=[researcher, analyst, reporter], entrypoint="researcher",
                      handoffs={"researcher": ["analyst"], "analyst": ["reporter"], "reporter": []}, store=store)
        result = await swarm.run("Investigate the topic.", execution_id="trip-456")
        ```
    """

    def __init__(
        self,
        name: str,
        *,
        agents: Sequence[Agent],
        entrypoint: str,
        store: Store | None = None,
        handoffs: Mapping[str, Sequence[str]] | None = None,
        max_handoffs: int = 10,
        lease_seconds: float = 30.0,
        version: str | None = None,
    ) -> None:
        self.name: str = self._named("swarm", name)
        self.store = store
        self.lease_seconds = lease_seconds
        self.version = self._versioned(version)
        self.max_handoffs = max_handoffs
        self.agents: dict[str, Agent] = _by_name(agents, f"Swarm {name!r}")
        if entrypoint not in self.agents:
            raise ConfigurationError(f"Swarm {name!r}: the entrypoint {entrypoint!r} is not one of its agents.")
        self.entrypoint = entrypoint
        routes = dict(handoffs) if handoffs is not None else {a: [b for b in self.agents if b != a] for a in self.agents}
        for src, peers in routes.items():
            for node in (src, *peers):
                if node not in self.agents:
                    raise ConfigurationError(
                        f"Swarm {name!r}: the handoff {src!r} -> {list(peers)} names {node!r}, which is not "
                        f"one of its agents ({', '.join(self.agents)})."
                    )
        self.members: dict[str, type[_MemberActor]] = {
            n: _member(a, "agent", routes.get(n, ()), self) for n, a in self.agents.items()
        }
        self._actor = type(f"Swarm[{name}]", (_SwarmActor,), {"kind": "swarm", "swarm": self})

    def shape(self) -> dict[str, Any]:
        return {f"agent:{name}": agent.shape() for name, agent in self.agents.items()}

    def definition(self) -> Any:
        return {"entrypoint": self.entrypoint,
                "members": {n: [a.definition(), list(m.peers)] for (n, a), m in
                            zip(self.agents.items(), self.members.values(), strict=True)}}

    def _input(self, input: Any) -> JsonValue:
        return _text(input, "A swarm")


class _SwarmActor(Actor[NoState]):
    kind = "swarm"
    swarm: Swarm

    async def receive(self, message: Start) -> None:
        swarm = self.swarm
        start = start_of(message.input)  # in a thread run, the run it continues too
        board = Blackboard(task=start.text)
        members = await _spawn_all(self, swarm.members)
        active = swarm.entrypoint
        for hop in range(swarm.max_handoffs + 1):
            task = Task(input=board.task, blackboard=board, after=start.after)
            outcome = Outcome.model_validate(await members[active].ask(task))
            if outcome.handoff_to is None:
                self.context.finish(outcome.output)
                return
            if hop == swarm.max_handoffs:
                break
            note = Note(by=active, to=outcome.handoff_to, message=outcome.message)
            handed = Blackboard(task=board.task, notes=[*board.notes, note]).model_dump(mode="json")
            # The swarm-level checkpoint of a handoff: who, to whom, and the blackboard after it.
            recorded = await self.context.step(f"handoff:{hop + 1}", _record, {**note.model_dump(), "blackboard": handed})
            board = Blackboard.model_validate(recorded["blackboard"])
            active = outcome.handoff_to
        raise MaxHandoffsExceeded(
            f"Swarm {swarm.name!r} handed the task on {swarm.max_handoffs} times without an answer "
            f"(max_handoffs={swarm.max_handoffs}). Raise it, or tell the agents when to answer."
        )


@dataclass(frozen=True)
class Worker:
    """An agent a `Supervisor` may delegate to, under a role: ``delegate_to_<role>(task)``.

    Args:
        agent: The agent that does the work (no store of its own needed).
        role: Its name in the team; its path is ``supervisor:<s>/worker:<role>``.
        description: What the supervisor's LLM is told the worker is for.
    """

    agent: Agent
    role: str
    description: str = ""


class Supervisor(Threaded):
    """An agent whose tools are its workers: it delegates tasks and answers with what they found.

    The supervisor runs its own turn loop with one ``delegate_to_<role>(task)``
    tool per worker (several in one turn run in parallel), plus any tools of its
    own. A delegation is a message to the worker's mailbox, and the worker's
    final answer is the tool's result. The output of a run is the supervisor's
    own final answer.

    Args:
        name: The supervisor's name; its path is ``supervisor:<name>``.
        llm: The supervisor's LLM.
        workers: Who it may delegate to; their roles must differ.
        store: Where its executions are journaled.
        system_prompt: The supervisor's instructions.
        tools: Tools of the supervisor's own.
        max_turns: The supervisor's LLM calls allowed per run.
        llm_timeout: Seconds one of the supervisor's LLM calls may take (as `Agent`'s);
            each worker's agent has its own.
        llm_retry: How the supervisor's failed LLM calls are tried again (as `Agent`'s,
            default `LLM_RETRY`); each worker's agent has its own.
        max_delegations: Delegations allowed per run before it fails with `MaxDelegationsExceeded`.
        lease_seconds: How long a crashed run's lease outlives its process.
        version: The version runs start on (``"2"``); a run continues on the version it
            started on when that is loaded (docs/versions.md). Default: none.
    """

    def __init__(
        self,
        name: str,
        *,
        llm: LLM,
        workers: Sequence[Worker],
        store: Store | None = None,
        system_prompt: str = "",
        tools: Sequence[FunctionTool | Any] = (),
        max_turns: int = 20,
        llm_timeout: float | timedelta | None = None,
        llm_retry: RetryPolicy | None = LLM_RETRY,
        max_delegations: int = 10,
        lease_seconds: float = 30.0,
        version: str | None = None,
    ) -> None:
        self.name: str = self._named("supervisor", name)
        self.store = store
        self.lease_seconds = lease_seconds
        self.version = self._versioned(version)
        self.max_delegations = max_delegations
        self.agent: Agent = Agent(name, llm=llm, tools=tools, system_prompt=system_prompt, max_turns=max_turns,
                                  llm_timeout=llm_timeout, llm_retry=llm_retry)
        self.workers: dict[str, Worker] = {}
        for worker in workers:
            self._named("worker", worker.role)
            if worker.role in self.workers:
                raise ConfigurationError(f"Supervisor {name!r} has two workers with the role {worker.role!r}; "
                                         f"roles must be unique.")
            self.workers[worker.role] = worker
        self.members: dict[str, type[_MemberActor]] = {
            role: _member(w.agent, "worker") for role, w in self.workers.items()
        }
        self._actor = type(f"Supervisor[{name}]", (_SupervisorActor,), {"kind": "supervisor", "supervisor": self})

    def shape(self) -> dict[str, Any]:
        return {**self.agent.shape(), **{f"worker:{role}": w.agent.shape() for role, w in self.workers.items()}}

    def definition(self) -> Any:
        return {"own": self.agent.definition(), "workers": {r: w.agent.definition() for r, w in self.workers.items()}}

    def _input(self, input: Any) -> JsonValue:
        return _text(input, "A supervisor")


class _SupervisorActor(Actor[NoState]):
    kind = "supervisor"
    supervisor: Supervisor

    async def receive(self, message: Start) -> None:
        supervisor = self.supervisor
        workers = await _spawn_all(self, supervisor.members)

        async def delegate(role: str, task: str) -> Any:
            return Outcome.model_validate(await workers[role].ask(Task(input=task))).output

        loop = TurnLoop(self.context, supervisor.agent, delegate=delegate,
                        workers={role: w.description for role, w in supervisor.workers.items()},
                        max_delegations=supervisor.max_delegations)
        outcome = await loop.run(await opening(self.context, supervisor, supervisor.agent, message.input))
        assert isinstance(outcome, Final)
        self.context.finish(outcome.output)


async def _record(value: Any) -> Any:
    """A step whose result is the value itself: a checkpoint of something already decided."""
    return value


async def _spawn_all(
    parent: Actor[Any], members: Mapping[str, type[_MemberActor]]
) -> dict[str, ActorRef[Task, Any]]:
    """Start every member as a durable child; after a crash, each resumes its own journal."""
    return {name: await parent.context.spawn(member, name, durable=True, restart="temporary")
            for name, member in members.items()}


def _by_name(agents: Sequence[Agent], owner: str) -> dict[str, Agent]:
    named: dict[str, Agent] = {}
    for agent in agents:
        if agent.name in named:
            raise ConfigurationError(f"{owner} has two agents named {agent.name!r}; names must differ.")
        named[agent.name] = agent
    return named


def _text(input: Any, who: str) -> JsonValue:
    return user_text(input, who)
