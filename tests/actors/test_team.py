"""Swarm and Supervisor: handoffs and delegations as messages, nested paths, pauses, on every store and backend."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from tether.actors import (
    Agent,
    Message,
    ScriptedLLM,
    Supervisor,
    Swarm,
    ToolCall,
    ToolMessage,
    UserMessage,
    Worker,
)
from tether.runtime import AlreadyResumed, NoPendingInterrupt, Resume, interrupt
from tether.stores import ConfigurationError, MemoryStore, Store

RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _clean() -> None:
    RUNS.clear()


def approve_publish(title: str) -> str:
    RUNS["approve_publish"] += 1
    return "published" if interrupt("publish_approval", {"title": title}).approved else "held back"


def approve_refund(amount: int) -> str:
    RUNS["approve_refund"] += 1
    return "refund approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def freeze_account(account: str) -> str:
    RUNS["freeze_account"] += 1
    return "frozen" if interrupt("security_approval", {"account": account}).approved else "left open"


def content_team(store: Store, **options: Any) -> tuple[Swarm, dict[str, ScriptedLLM]]:
    llms = {
        "researcher": ScriptedLLM([ToolCall("handoff_to_analyst", {"message": "three sources found"})]),
        "analyst": ScriptedLLM([ToolCall("approve_publish", {"title": "Findings"}),
                                ToolCall("handoff_to_reporter", {"message": "cleared for publishing"})]),
        "reporter": ScriptedLLM(["Report: three sources, published."]),
    }
    agents = [Agent(name, llm=llm, tools=[approve_publish]) for name, llm in llms.items()]
    swarm = Swarm("content_team", agents=agents, entrypoint="researcher",
                  handoffs={"researcher": ["analyst"], "analyst": ["reporter"], "reporter": []},
                  store=store, **options)
    return swarm, llms


async def test_a_swarm_pauses_inside_a_member_and_resumes(store: Store) -> None:
    swarm, llms = content_team(store)
    paused = await swarm.run("Investigate the topic.", execution_id="trip-456")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "swarm:content_team/agent:analyst/tool:approve_publish"
    assert len(paused.pending) == 1  # one row for the whole tree

    done = await swarm.resume("trip-456", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == "Report: three sources, published."
    # Nobody's LLM was asked a journaled turn again; the suspended tool ran again.
    assert {name: llm.calls for name, llm in llms.items()} == {"researcher": 1, "analyst": 2, "reporter": 1}
    assert RUNS == {"approve_publish": 2}
    journal = await store.read_journal("trip-456")
    handoffs = [e.payload["result"] for e in journal if e.label.startswith("handoff:")]
    assert [(h["by"], h["to"]) for h in handoffs] == [("researcher", "analyst"), ("analyst", "reporter")]
    assert [n["message"] for n in handoffs[1]["blackboard"]["notes"]] == ["three sources found",
                                                                          "cleared for publishing"]
    with pytest.raises(AlreadyResumed):
        await swarm.resume("trip-456", Resume(approved=False))


async def test_the_peer_sees_the_blackboard(store: Store) -> None:
    seen: list[list[Message]] = []

    def reporter(messages: list[Message]) -> Any:
        seen.append(messages)
        return "ok"

    swarm = Swarm("pair", agents=[
        Agent("a", llm=ScriptedLLM([ToolCall("handoff_to_b", {"message": "over to you"})])),
        Agent("b", llm=ScriptedLLM(reporter), system_prompt="You are b."),
    ], entrypoint="a", store=store)
    assert (await swarm.run("Task T.", execution_id="pair")).output == "ok"
    roles = [m.role for m in seen[0]]
    assert roles == ["system", "user", "user"]
    assert seen[0][1].content == "Task T."  # type: ignore[union-attr]
    assert "a to b: over to you" in seen[0][2].content  # type: ignore[union-attr]


async def test_a_handoff_only_to_allowed_peers(store: Store) -> None:
    def researcher(messages: list[Message]) -> Any:
        last = messages[-1]
        if isinstance(last, UserMessage):
            return ToolCall("handoff_to_reporter", {"message": "skip the analyst"})
        assert isinstance(last, ToolMessage) and last.is_error
        assert "no tool named 'handoff_to_reporter'" in last.content
        return "I answer myself."

    swarm = Swarm("strict", agents=[
        Agent("researcher", llm=ScriptedLLM(researcher)),
        Agent("analyst", llm=ScriptedLLM(["never"])),
        Agent("reporter", llm=ScriptedLLM(["never"])),
    ], entrypoint="researcher", handoffs={"researcher": ["analyst"]}, store=store)
    result = await swarm.run("Go.", execution_id="strict")
    assert result.output == "I answer myself."


async def test_max_handoffs(store: Store) -> None:
    ping = Agent("ping", llm=ScriptedLLM(lambda m: ToolCall("handoff_to_pong")))
    pong = Agent("pong", llm=ScriptedLLM(lambda m: ToolCall("handoff_to_ping")))
    swarm = Swarm("tennis", agents=[ping, pong], entrypoint="ping", store=store, max_handoffs=3)
    result = await swarm.run("Rally.", execution_id="rally")
    assert result.status == "failed"
    assert result.error is not None
    assert "MaxHandoffsExceeded" in result.error and "max_handoffs=3" in result.error


def planner(store: Store, script: list[Any], *workers: Worker, **options: Any) -> Supervisor:
    return Supervisor("planner", llm=ScriptedLLM(script), workers=list(workers), store=store, **options)


async def test_a_supervisor_pauses_inside_a_worker_and_resumes(store: Store) -> None:
    auditor_llm = ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}), "Audit passed."])
    auditor = Worker(Agent("auditor", llm=auditor_llm, tools=[approve_refund]), "auditor", "Audits refunds.")
    boss = planner(store, [ToolCall("delegate_to_auditor", {"task": "Audit refund R1."}), "R1 is fine."], auditor)
    paused = await boss.run("Investigate and report.", execution_id="job-42")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "supervisor:planner/worker:auditor/tool:approve_refund"

    done = await boss.resume("job-42", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == "R1 is fine."
    supervisor_llm = boss.agent.llm
    assert isinstance(supervisor_llm, ScriptedLLM)
    assert supervisor_llm.calls == 2  # fastaiagent 1.94 re-runs the supervisor's LLM from scratch on resume
    assert auditor_llm.calls == 2
    labels = [e.label for e in await store.read_journal("job-42") if e.path == "supervisor:planner"]
    # The verdicts (paused, then completed) are journaled at the root, where followers see them.
    assert labels == ["inbox", "turn:1", "delegate:1", "paused", "reply:1", "turn:2", "msg:1", "completed"]


async def test_parallel_delegations_pause_twice_and_resume_by_path(store: Store) -> None:
    auditor = Worker(Agent("auditor", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 9}), "audited"]),
                           tools=[approve_refund]), "auditor")
    security = Worker(Agent("security", llm=ScriptedLLM([ToolCall("freeze_account", {"account": "X"}), "secured"]),
                            tools=[freeze_account]), "security")
    boss = planner(store, [[ToolCall("delegate_to_auditor", {"task": "a"}),
                            ToolCall("delegate_to_security", {"task": "s"})], "both done"], auditor, security)
    paused = await boss.run("Go.", execution_id="both")
    assert sorted(p.agent_path for p in paused.pending) == [
        "supervisor:planner/worker:auditor/tool:approve_refund",
        "supervisor:planner/worker:security/tool:freeze_account",
    ]
    with pytest.raises(NoPendingInterrupt, match="2 pending interrupts; name one with path="):
        await boss.resume("both", Resume(approved=True))  # which one? nothing is consumed
    half = await boss.resume("both", Resume(approved=True), path="supervisor:planner/worker:security/tool:freeze_account")
    assert half.status == "paused"
    assert [p.agent_path for p in half.pending] == ["supervisor:planner/worker:auditor/tool:approve_refund"]
    done = await boss.resume("both", Resume(approved=True), path="supervisor:planner/worker:auditor/tool:approve_refund")
    assert done.status == "completed"
    assert done.output == "both done"
    # Resuming the security worker's interrupt replayed the tree: the auditor's tool ran up
    # to its interrupt() again and paused again at once (same row, no duplicate).
    assert RUNS == {"approve_refund": 3, "freeze_account": 2}


async def test_two_different_approvals_pause_twice(store: Store) -> None:
    def check_and_freeze(amount: int) -> str:
        first = approve_refund(amount)
        second = freeze_account("A1")
        return f"{first}, {second}"

    worker = Worker(Agent("auditor", llm=ScriptedLLM([ToolCall("check_and_freeze", {"amount": 5}), "ok"]),
                          tools=[check_and_freeze]), "auditor")
    boss = planner(store, [ToolCall("delegate_to_auditor", {"task": "t"}), "done"], worker)
    first = await boss.run("Go.", execution_id="twice")
    assert first.pending_interrupt is not None
    assert first.pending_interrupt.reason == "manager_approval"
    second = await boss.resume("twice", Resume(approved=True))
    # fastaiagent 1.94 approves the second, different interrupt with the first decision.
    assert second.status == "paused"
    assert second.pending_interrupt is not None
    assert second.pending_interrupt.reason == "security_approval"
    done = await boss.resume("twice", Resume(approved=False))
    assert done.status == "completed"
    [tool] = [e.payload for e in await store.read_journal("twice") if e.label == "turn:1/tool:check_and_freeze"]
    assert tool["result"]["content"] == "refund approved, left open"  # each decision went to its own call


async def test_max_delegations(store: Store) -> None:
    worker = Worker(Agent("w", llm=ScriptedLLM(lambda m: "done")), "w")
    boss = planner(store, [ToolCall("delegate_to_w", {"task": "1"}), ToolCall("delegate_to_w", {"task": "2"}),
                           "never"], worker, max_delegations=1)
    result = await boss.run("Go.", execution_id="bounded")
    assert result.status == "failed"
    assert result.error is not None
    assert "MaxDelegationsExceeded" in result.error and "max_delegations=1" in result.error


async def test_one_agent_object_serves_two_teams(store: Store) -> None:
    shared = Agent("helper", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 1}), "helped"]),
                   tools=[approve_refund])
    swarm = Swarm("team_a", agents=[shared], entrypoint="helper", store=store)
    boss = planner(store, [ToolCall("delegate_to_aide", {"task": "help"}), "fine"], Worker(shared, "aide"))
    in_swarm = await swarm.run("Help.", execution_id="in-swarm")
    in_supervisor = await boss.run("Help.", execution_id="in-supervisor")
    assert in_swarm.pending_interrupt is not None
    assert in_supervisor.pending_interrupt is not None
    assert in_swarm.pending_interrupt.agent_path == "swarm:team_a/agent:helper/tool:approve_refund"
    assert in_supervisor.pending_interrupt.agent_path == "supervisor:planner/worker:aide/tool:approve_refund"


def test_team_definitions_are_checked() -> None:
    store = MemoryStore()
    a, b = Agent("a", llm=ScriptedLLM(["x"])), Agent("b", llm=ScriptedLLM(["y"]))
    with pytest.raises(ConfigurationError, match="entrypoint 'c'"):
        Swarm("s", agents=[a, b], entrypoint="c", store=store)
    with pytest.raises(ConfigurationError, match="names 'c'"):
        Swarm("s", agents=[a, b], entrypoint="a", handoffs={"a": ["c"]}, store=store)
    with pytest.raises(ConfigurationError, match="two agents named 'a'"):
        Swarm("s", agents=[a, a], entrypoint="a", store=store)
    with pytest.raises(ConfigurationError, match="roles must be unique"):
        Supervisor("p", llm=ScriptedLLM(["z"]), workers=[Worker(a, "r"), Worker(b, "r")], store=store)


async def test_an_agent_without_a_store_says_how_to_run_it() -> None:
    with pytest.raises(ConfigurationError, match="has no store"):
        await Agent("loner", llm=ScriptedLLM(["hi"])).run("hi", execution_id="x")


async def test_a_supervisors_own_tool_pauses_at_its_path(store: Store) -> None:
    boss = Supervisor("planner", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 1}), "ok"]),
                      workers=[], tools=[approve_refund], store=store)
    paused = await boss.run("Go.", execution_id="own-tool")
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "supervisor:planner/tool:approve_refund"
    assert (await boss.resume("own-tool", Resume(approved=True))).output == "ok"
