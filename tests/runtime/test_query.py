"""`query`: an actor's journaled state, read from the store by anyone, with no lease and no write."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ValidationError
from tether.actors import Agent, Chain, ScriptedLLM, Supervisor, ToolCall, Worker
from tether.runtime import (
    Actor,
    ActorError,
    ActorNotFound,
    ActorState,
    Resume,
    Runtime,
    Start,
    interrupt,
    query,
)
from tether.stores import ExecutionNotFound, Store

AUDITOR = "supervisor:planner/worker:auditor"
FAR_OWNER = "otherhost:123:abcd@0000000000000000.4026531836.1/x"  # another machine: a live owner to us


def approval(store: Store) -> Chain:
    def validate(state: dict[str, Any]) -> dict[str, Any]:
        return {"valid": True}

    def approve(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("manager_approval", {"amount": state["amount"]}).approved}

    return Chain("refund", [validate, approve], store=store)


async def seqs(store: Store, execution_id: str, path: str) -> list[tuple[int, str]]:
    return [(e.seq, e.label) for e in await store.read_journal(execution_id) if e.path == path]


async def test_a_chain_is_read_as_of_its_last_boundary_paused_and_completed(db_store: Store) -> None:
    chain = approval(db_store)
    assert (await chain.run({"amount": 5}, execution_id="r")).status == "paused"
    paused = await query(db_store, "r")
    assert isinstance(paused, ActorState)
    # The root's last entry is the pause; a Chain keeps its working state in its steps' results, not as
    # actor state, so none was journaled.
    assert (paused.execution_id, paused.path, paused.status, paused.state) == ("r", "chain:refund", "paused", {})
    assert (paused.seq, paused.label) == (await seqs(db_store, "r", "chain:refund"))[-1]
    assert paused.label == "paused"
    assert await query(db_store, "r", "chain:refund") == paused  # the root, named

    await chain.resume("r", Resume(approved=True))
    done = await query(db_store, "r")
    assert (done.status, done.label) == ("completed", "completed")
    assert done.seq == len(await db_store.read_journal("r")) > paused.seq
    assert done.model_dump(mode="json") == {"execution_id": "r", "path": "chain:refund", "status": "completed",
                                            "state": {}, "seq": done.seq, "label": "completed"}
    with pytest.raises(ValidationError):
        done.seq = 1  # an answer, not a handle: frozen


def team(store: Store) -> Supervisor:
    def approve_refund(amount: int) -> str:
        return "approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"

    auditor = Agent("auditor", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}), "audited"]),
                    tools=[approve_refund])
    return Supervisor("planner", llm=ScriptedLLM([ToolCall("delegate_to_auditor", {"task": "audit"}), "done"]),
                      workers=[Worker(auditor, "auditor")], store=store)


async def test_a_supervisors_worker_is_read_at_its_own_path(db_store: Store) -> None:
    planner = team(db_store)
    assert (await planner.run("go", execution_id="t")).status == "paused"
    worker = await query(db_store, "t", AUDITOR)
    assert (worker.path, worker.status, worker.label) == (AUDITOR, "paused", "suspended")  # it asked
    assert (worker.seq, worker.label) == (await seqs(db_store, "t", AUDITOR))[-1]
    assert (await query(db_store, "t")).path == "supervisor:planner"

    await planner.resume("t", Resume(approved=True))
    worker = await query(db_store, "t", AUDITOR)
    assert (worker.status, worker.label) == ("completed", "msg:1")  # its one message handled
    assert (worker.seq, worker.label) == (await seqs(db_store, "t", AUDITOR))[-1]


class Audit(BaseModel):
    amount: int


class Trail(BaseModel):
    audits: int = 0
    amounts: list[int] = []


class Auditor(Actor[Trail]):
    kind = "worker"
    messages: ClassVar[tuple[type[BaseModel], ...]] = (Audit,)

    async def receive(self, message: Audit) -> bool:
        approved = message.amount <= 100 or interrupt("manager_approval", {"amount": message.amount}).approved
        self.state.audits += 1
        self.state.amounts.append(message.amount)
        return approved


class Plan(BaseModel):
    delegated: int = 0


class Planner(Actor[Plan]):
    kind = "supervisor"

    async def receive(self, message: Start) -> None:
        auditor = await self.context.spawn(Auditor, "auditor", durable=True)
        verdicts = []
        assert isinstance(message.input, list)
        for amount in message.input:
            verdicts.append(await auditor.ask(Audit.model_validate({"amount": amount})))
            self.state.delegated += 1
        self.context.finish(verdicts)


async def test_an_actors_state_is_rebuilt_from_its_snapshots_and_deltas(db_store: Store) -> None:
    async with Runtime(db_store) as rt:
        paused = await rt.run(Planner, [50, 5_000], execution_id="p", name="planner")
    assert paused.status == "paused"
    # Its first message handled (a delta), the second waiting for a decision (a snapshot at the suspension).
    worker = await query(db_store, "p", AUDITOR)
    assert (worker.state, worker.label) == ({"audits": 1, "amounts": [50]}, "suspended")

    async with Runtime(db_store) as rt:
        assert (await rt.resume(Planner, "p", Resume(approved=True))).output == [True, True]
    worker = await query(db_store, "p", AUDITOR)
    assert (worker.state, worker.label, worker.status) == ({"audits": 2, "amounts": [50, 5_000]}, "msg:2",
                                                          "completed")
    root = await query(db_store, "p")
    assert (root.path, root.state) == ("supervisor:planner", {"delegated": 2})


async def test_an_execution_not_started_yet_has_its_root_with_no_boundary(db_store: Store) -> None:
    await approval(db_store).start({"amount": 5}, execution_id="q")
    queued = await query(db_store, "q")
    assert (queued.status, queued.path, queued.state, queued.seq, queued.label) == (
        "queued", "chain:refund", {}, 0, None)


async def test_an_unknown_execution_or_actor_is_refused_with_the_paths_there_are(db_store: Store) -> None:
    planner = team(db_store)
    await planner.run("go", execution_id="t")
    journal = await db_store.read_journal("t")
    with pytest.raises(ExecutionNotFound, match="'nobody'"):
        await query(db_store, "nobody")
    with pytest.raises(ActorNotFound) as missing:
        await query(db_store, "t", "supervisor:planner/worker:nobody")
    assert isinstance(missing.value, ActorError)
    assert missing.value.path == "supervisor:planner/worker:nobody"
    assert missing.value.execution_id == "t"
    assert missing.value.actors == ("supervisor:planner", AUDITOR)  # sorted
    assert f"Its actors: 'supervisor:planner', '{AUDITOR}'." in str(missing.value)
    assert "tether history t" in str(missing.value)
    # A tool's path names a call its actor made: the message says whose.
    with pytest.raises(ActorNotFound, match=f"is a call made by '{AUDITOR}', not an actor"):
        await query(db_store, "t", f"{AUDITOR}/tool:approve_refund")
    assert await db_store.read_journal("t") == journal


def test_a_long_list_of_actors_is_cut_short() -> None:
    many = ActorNotFound("x", "a:zz", [f"a:{n:02}" for n in range(12, 0, -1)])
    assert many.actors[0] == "a:01" and len(many.actors) == 12
    assert "'a:10' (and 2 more)." in str(many) and "'a:11'" not in str(many)


async def test_a_query_takes_no_lease_and_writes_nothing(db_store: Store) -> None:
    chain = approval(db_store)
    await chain.run({"amount": 5}, execution_id="r")
    # Another live process holds the run now: a query reads past its lease, and leaves it alone.
    held = await db_store.acquire_lease("r", owner=FAR_OWNER, lease_seconds=600)
    row, journal = await db_store.get_execution("r"), await db_store.read_journal("r")
    assert row is not None and row.lease_owner == FAR_OWNER
    found = await query(db_store, "r")
    assert (found.status, found.label) == ("running", "paused")
    with pytest.raises(ActorNotFound):
        await query(db_store, "r", "chain:other")
    after = await db_store.get_execution("r")
    assert after == row  # owner, epoch, expiry, status and updated_at as they were
    assert after is not None and after.lease_epoch == held.epoch
    assert len(await db_store.read_journal("r")) == len(journal)
