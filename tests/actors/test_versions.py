"""Versions: a run continues on the version it started on; a migration moves it to another."""

from __future__ import annotations

from typing import Any

import pytest
from tether.actors import Agent, Chain, ScriptedLLM, Supervisor, Swarm, ToolCall, Worker
from tether.runtime import Migration, MigrationFailed, Resume, interrupt, migrate
from tether.runtime._executions.runner import newest, runner_for
from tether.runtime._executions.service import FORKING
from tether.runtime.ops._operator import Operator
from tether.stores import ConfigurationError, NewExecution, Store


def validate(state: dict[str, Any]) -> dict[str, Any]:
    return {"valid": True}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"amount": 5}).approved}


def sign_off(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"amount": 5}).approved, "signed": True}


def charge(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": "v1" if state["approved"] else None}


def charge_v2(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": "v2" if state["approved"] else None}


def v1(store: Store | None) -> Chain:
    return Chain("refund", [validate, approve, charge], store=store, version="1")


def v2(store: Store | None) -> Chain:
    chain = Chain("refund", [validate, sign_off, named("charge", charge_v2)], store=store, version="2")
    return chain


def named(name: str, fn: Any) -> Any:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        return fn(state)  # type: ignore[no-any-return]

    node.__name__ = name
    return node


async def paused_on_v1(store: Store, *ids: str) -> None:
    for execution_id in ids:
        result = await v1(store).run({}, execution_id=execution_id)
        assert result.status == "paused", result


async def test_a_run_continues_on_its_own_version_while_new_runs_start_on_the_newest(store: Store) -> None:
    await paused_on_v1(store, "old")
    both = Operator(store, [v2(store), v1(store)])
    execution = await store.get_execution("old")
    assert execution is not None and execution.version == "1"
    assert both.runner_for(execution).version == "1"  # type: ignore[union-attr]
    result = await both.resume("old", Resume(approved=True))
    assert (result.status, result.output["charged"]) == ("completed", "v1")

    fresh = newest(both.runners)
    assert fresh.version == "2"
    started = await fresh.run({}, execution_id="new")
    assert started.status == "paused" and started.pending_interrupt is not None
    assert started.pending_interrupt.agent_path == "chain:refund/node:sign_off"
    new = await store.get_execution("new")
    assert new is not None and new.version == "2"


async def test_a_process_without_its_version_refuses_it_and_names_the_change(store: Store) -> None:
    await paused_on_v1(store, "old")
    with pytest.raises(ConfigurationError) as refused:
        await v2(store).resume("old", Resume(approved=True))
    message = str(refused.value)
    assert "version '1'" in message and "version '2'" in message
    assert "node 'approve'" in message and "removed or renamed" in message
    assert "tether migrate old --to 2" in message
    [pending] = await store.list_pending(execution_id="old")  # nothing was claimed
    assert pending.agent_path == "chain:refund/node:approve"


async def test_a_migration_moves_a_paused_run_once_and_it_completes_on_the_new_version(store: Store) -> None:
    await paused_on_v1(store, "old")
    target = with_migration(store)

    before = await store.read_journal("old")
    preview = await migrate(store, "old", target, dry_run=True)
    assert not preview.written and preview.changes and "renamed node:approve to node:sign_off" in preview.changes[0]
    assert await store.read_journal("old") == before  # a dry run writes nothing

    moved = await migrate(store, "old", target, by="cli:alice")
    assert moved.written and (moved.from_version, moved.to_version) == ("1", "2")
    execution = await store.get_execution("old")
    assert execution is not None and (execution.version, execution.status) == ("2", "paused")
    [pending] = await store.list_pending(execution_id="old")
    assert pending.agent_path == "chain:refund/node:sign_off"
    journal = await store.read_journal("old")
    assert journal[-1].label == "migrated"
    assert journal[-1].payload == {"from": "1", "to": "2", "changes": moved.changes, "by": "cli:alice"}
    assert [e.seq for e in journal[:-1]] == [e.seq for e in before]

    with pytest.raises(ConfigurationError, match="already"):
        await migrate(store, "old", target)  # applied once
    with pytest.raises(ConfigurationError, match="version '2'"):
        await v1(store).resume("old", Resume(approved=True))  # the old code no longer continues it
    result = await target.resume("old", Resume(approved=True))
    assert result.status == "completed"
    assert result.output == {"valid": True, "approved": True, "signed": True, "charged": "v2"}


def with_migration(store: Store) -> Chain:
    target = v2(store)
    target.migrate(from_version="1")(lambda run: run.rename("node:approve", "node:sign_off"))
    return target


def migrated_before_next(store: Store, method: str, target: Chain) -> None:
    """The store's next ``method`` call is preceded by a migration of "old" to ``target`` (once)."""
    original = getattr(store, method)

    async def migrated_first(*args: Any, **kwargs: Any) -> Any:
        setattr(store, method, original)
        await migrate(store, "old", target)
        return await original(*args, **kwargs)

    setattr(store, method, migrated_first)


async def test_a_migration_between_a_resumes_check_and_its_lease_is_caught(store: Store) -> None:
    await paused_on_v1(store, "old")
    target = with_migration(store)
    migrated_before_next(store, "claim_and_lease", target)  # an operator, between the v1 process's check and its claim
    with pytest.raises(ConfigurationError, match=r"is on version '2'.*decisions stay recorded"):
        await v1(store).resume("old", Resume(approved=True))
    execution = await store.get_execution("old")
    assert execution is not None and execution.version == "2" and execution.lease_owner is None
    result = await target.resume("old")  # v2 carries the recorded decision out
    assert result.output["charged"] == "v2" and result.output["signed"] is True


async def test_a_run_that_changes_while_it_is_migrated_is_not_migrated_twice(store: Store) -> None:
    await paused_on_v1(store, "old")
    target = with_migration(store)
    migrated_before_next(store, "acquire_lease", target)  # another migration, between this one's read and lease
    with pytest.raises(ConfigurationError, match="changed while it was being migrated"):
        await migrate(store, "old", target)
    journal = await store.read_journal("old")
    assert [e.label for e in journal].count("migrated") == 1
    execution = await store.get_execution("old")
    assert execution is not None and (execution.status, execution.lease_owner) == ("paused", None)
    with pytest.raises(ConfigurationError, match="on version '2' already"):
        await migrate(store, "old", target)


async def test_a_migration_that_raises_changes_nothing(store: Store) -> None:
    await paused_on_v1(store, "old")
    target = v2(store)

    @target.migrate(from_version="1")
    def broken(run: Migration) -> None:
        run.rename("node:approve", "node:sign_off")
        raise KeyError("approver")

    before = await store.load_execution("old")
    with pytest.raises(MigrationFailed, match="raised KeyError") as failed:
        await migrate(store, "old", target)
    assert "stays on version '1'" in str(failed.value)
    after = await store.load_execution("old")
    assert before is not None and after is not None
    assert after[1] == before[1] and after[0].version == "1" and after[0].status == "paused"
    assert after[0].lease_owner is None  # the migration's lease was given back
    [pending] = await store.list_pending(execution_id="old")
    assert pending.agent_path == "chain:refund/node:approve"
    result = await v1(store).resume("old", Resume(approved=True))  # still runs on its version
    assert result.output["charged"] == "v1"


async def test_a_migration_that_leaves_a_misfit_changes_nothing(store: Store) -> None:
    await paused_on_v1(store, "old")
    target = v2(store)

    @target.migrate(from_version="1")
    def forgot(run: Migration) -> None:
        run.rename("node:validate", "node:validate")  # not the node that moved

    with pytest.raises(MigrationFailed, match=r"still does not fit version '2'.*node 'approve'"):
        await migrate(store, "old", target)
    execution = await store.get_execution("old")
    assert execution is not None and execution.version == "1"


async def test_a_run_whose_journal_does_not_fit_needs_a_registered_migration(store: Store) -> None:
    await paused_on_v1(store, "old")
    with pytest.raises(ConfigurationError, match=r"@runner\.migrate\(from_version='1'\)"):
        await migrate(store, "old", v2(store))


async def test_a_run_whose_journal_fits_moves_without_a_migration_function(store: Store) -> None:
    await paused_on_v1(store, "old")
    v3 = Chain("refund", [validate, approve, named("charge", charge_v2)], store=store, version="3")
    moved = await migrate(store, "old", v3)
    assert moved.changes == ["none needed: its journal fits"]
    result = await v3.resume("old", Resume(approved=True))
    assert result.output["charged"] == "v2"


def approve_refund(amount: int) -> str:
    return "approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def request_approval(amount: int) -> str:
    return "granted" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def legacy_check(amount: int) -> str:
    return "ok" if interrupt("legacy_check", {"amount": amount}).approved else "no"


async def test_a_renamed_tool_is_renamed_in_the_llm_turn_that_called_it(store: Store) -> None:
    old = Agent("refunds", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 70}), "done"]),
                tools=[approve_refund], store=store, version="1")
    assert (await old.run("refund 70", execution_id="a")).status == "paused"
    llm = ScriptedLLM([ToolCall("unused", {}), "done"])
    new = Agent("refunds", llm=llm, tools=[request_approval], store=store, version="2")
    new.migrate(from_version="1")(lambda run: run.rename("tool:approve_refund", "tool:request_approval"))
    await migrate(store, "a", new)
    [pending] = await store.list_pending(execution_id="a")
    assert pending.agent_path == "agent:refunds/tool:request_approval"
    result = await new.resume("a", Resume(approved=True))
    assert result.status == "completed"
    [asked] = llm.requests  # turn 1 came from the journal, renamed; the tool's answer is v2's
    assert [m.content for m in asked.messages if m.role == "tool"] == ["granted"]


async def test_a_dropped_call_is_made_again_on_the_new_version(store: Store) -> None:
    old = Agent("refunds", llm=ScriptedLLM([ToolCall("legacy_check", {"amount": 70}), "done"]),
                tools=[legacy_check], store=store, version="1")
    assert (await old.run("refund 70", execution_id="a")).status == "paused"
    llm = ScriptedLLM([ToolCall("unused", {}), "done"])
    new = Agent("refunds", llm=llm, tools=[approve_refund], store=store, version="2")

    @new.migrate(from_version="1")
    def without_legacy(run: Migration) -> None:
        run.drop("tool:legacy_check")

    before = await store.read_journal("a")
    moved = await migrate(store, "a", new)
    assert "dropped tool:legacy_check" in moved.changes[0]
    journal = await store.read_journal("a")
    # The suspension at the end was dropped; the migrated entry still takes a number never used.
    assert journal[-1].label == "migrated" and journal[-1].seq == before[-1].seq + 1
    assert await store.list_pending(execution_id="a") == []
    execution = await store.get_execution("a")
    assert execution is not None and execution.status == "running" and execution.lease_owner is None
    result = await new.resume("a")  # nothing to decide any more: it continues
    assert result.status == "completed"
    [told] = [m.content for m in llm.requests[0].messages if m.role == "tool"]
    assert "no tool named 'legacy_check'" in str(told)


def boss(role: str, store: Store, version: str) -> Supervisor:
    worker = Worker(Agent("refunds", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 70}), "refunded"]),
                          tools=[approve_refund]), role)

    def plan(messages: list[Any]) -> Any:
        answered = [m.content for m in messages if m.role == "tool"]
        return f"all done: {answered[0]}" if answered else ToolCall(f"delegate_to_{role}", {"task": "refund 42"})

    return Supervisor("boss", llm=ScriptedLLM(plan), workers=[worker], store=store, version=version)


def team(member: str, store: Store, version: str) -> Swarm:
    lead = Agent("lead", llm=ScriptedLLM([ToolCall(f"handoff_to_{member}", {"message": "refund it"})]))
    refunder = Agent(member, llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 1}), "refunded"]),
                     tools=[approve_refund])
    return Swarm("team", agents=[lead, refunder], entrypoint="lead", store=store, version=version)


async def test_a_renamed_worker_or_member_is_renamed_in_the_delegation_and_the_handoff(store: Store) -> None:
    assert (await boss("refunder", store, "1").run("go", execution_id="s")).status == "paused"
    supervisor = boss("refunds", store, "2")
    supervisor.migrate(from_version="1")(lambda run: run.rename("worker:refunder", "worker:refunds"))
    await migrate(store, "s", supervisor)
    [pending] = await store.list_pending(execution_id="s")
    assert pending.agent_path == "supervisor:boss/worker:refunds/tool:approve_refund"
    result = await supervisor.resume("s", Resume(approved=True))
    assert (result.status, result.output) == ("completed", "all done: refunded")  # the worker's answer came back

    assert (await team("a", store, "1").run("go", execution_id="w")).status == "paused"
    swarm = team("b", store, "2")
    swarm.migrate(from_version="1")(lambda run: run.rename("agent:a", "agent:b"))
    await migrate(store, "w", swarm)
    result = await swarm.resume("w", Resume(approved=True))
    assert (result.status, result.output) == ("completed", "refunded")
    asked = [e for e in await store.read_journal("w") if e.label == "inbox" and e.path == "swarm:team/agent:b"]
    assert len(asked) == 1  # the member was not asked a second time under another id


async def test_an_unfinished_fork_is_not_migrated(store: Store) -> None:
    started = await store.start_execution(
        NewExecution(execution_id="half", runner="refund", root_path="chain:refund", version=FORKING),
        owner="a-dead-fork", lease_seconds=0)
    assert started.lease is not None
    with pytest.raises(ConfigurationError, match=r"a fork that was never finished.*Fork again with the same id"):
        await migrate(store, "half", with_migration(store))
    assert await store.read_journal("half") == []


def test_versions_are_ordered_as_numbers_and_bad_ones_are_refused() -> None:
    chains = [Chain("c", [validate], version=v) for v in ("9", "10", "2")]
    assert newest(chains).version == "10"
    assert newest([Chain("c", [validate]), Chain("c", [validate], version="1")]).version == "1"
    for bad in ("", " 2", "x" * 201):
        with pytest.raises(ConfigurationError, match="version="):
            Chain("c", [validate], version=bad)
    with pytest.raises(ConfigurationError, match="no version to migrate runs to"):
        Chain("c", [validate]).migrate(from_version="1")
    # An unversioned runner's hash is what it was before versions existed.
    assert Chain("c", [validate]).fingerprint != Chain("c", [validate], version="1").fingerprint


async def test_an_unversioned_run_is_continued_by_a_versioned_definition_that_fits(store: Store) -> None:
    before = Chain("refund", [validate, approve, charge], store=store)
    assert (await before.run({}, execution_id="u")).status == "paused"
    after = Chain("refund", [validate, approve, named("charge", charge_v2)], store=store, version="2")
    execution = await store.get_execution("u")
    assert execution is not None and execution.version == ""
    assert runner_for([after], execution) is after
    result = await after.resume("u", Resume(approved=True))
    assert result.output["charged"] == "v2"
