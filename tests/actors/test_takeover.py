"""The next process after a crash: it takes over at once when the old one is provably dead.

Every child runs with a 60 s lease, so a recovery that had to wait for expiry
would print ``lease_held`` instead of finishing. Each test runs on SQLite and
Postgres under asyncio and trio, with real processes killed with SIGKILL.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from tether.runtime._core.owners import _stat, process_owner

from ._crash import Scenario, make_scenario

CHAIN = Path(__file__).with_name("_chain_child.py")
AGENT = Path(__file__).with_name("_agent_child.py")
TEAM = Path(__file__).with_name("_team_child.py")


@pytest.fixture(params=["sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> pytest.FixtureRequest:
    return request


def scenario_for(child: Path, store_kind: pytest.FixtureRequest, tmp_path: Path, backend: str) -> Scenario:
    return make_scenario(child, store_kind, tmp_path, backend)


def lease_of(scenario: Scenario, execution_id: str) -> tuple[str | None, int]:
    async def read() -> tuple[str | None, int]:
        async with scenario.store() as store:
            execution = await store.get_execution(execution_id)
            assert execution is not None
            return execution.lease_owner, execution.lease_epoch

    return anyio.run(read)


def takeovers(scenario: Scenario, execution_id: str) -> list[dict[str, object]]:
    async def read() -> list[dict[str, object]]:
        async with scenario.store() as store:
            return [e.payload for e in await store.read_journal(execution_id)  # type: ignore[misc]
                    if e.label == "takeover"]

    return anyio.run(read)


def hand_lease_to(scenario: Scenario, execution_id: str, owner: str) -> None:
    """Give the (dead) run's lease, for 10 minutes, to a made-up owner, as if that one held it."""
    async def give() -> None:
        async with scenario.store() as store:
            execution = await store.get_execution(execution_id)
            assert execution is not None and execution.lease_owner is not None
            await store.acquire_lease(execution_id, owner=owner, lease_seconds=600,
                                      replacing=execution.lease_owner)

    anyio.run(give)


# -- killed mid-run: the next process goes on at once --------------------------------------


@pytest.mark.parametrize(("child", "name", "block", "counts"), [
    (CHAIN, "line", "n3:1", {"n1": 1, "n2": 1, "n3": 2, "n4": 1, "n5": 1}),
    (AGENT, "tool", "refunded:1", None),
    (TEAM, "supervisor_crash", "draft:1", None),
], ids=["mid-chain", "mid-agent-tool", "mid-delegation"])
def test_the_next_process_recovers_a_killed_run_without_waiting(
    child: Path, name: str, block: str, counts: dict[str, int] | None, store_kind: pytest.FixtureRequest,
    tmp_path: Path, anyio_backend: str,
) -> None:
    scenario = scenario_for(child, store_kind, tmp_path, anyio_backend)
    scenario.kill_inside(name, block)
    owner, epoch = lease_of(scenario, name)
    assert owner is not None  # the dead process's lease is still live (60 s)
    done = scenario.run(name, "recover")
    assert done["status"] == "completed", done
    if counts is not None:
        assert scenario.counts() == counts
    [taken] = takeovers(scenario, name)
    assert taken["from"] == owner and taken["dead"] is True and taken["forced"] is False
    assert lease_of(scenario, name) == (None, epoch + 1)


def test_a_live_owner_in_another_process_is_refused_until_it_dies(
    store_kind: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str,
) -> None:
    scenario = scenario_for(CHAIN, store_kind, tmp_path, anyio_backend)
    env = {**scenario.env, "TETHER_TEST_BLOCK": "n3:1"}
    with subprocess.Popen(scenario.command("line", "run"), stdout=subprocess.PIPE, text=True, env=env) as alive:
        assert alive.stdout is not None
        for line in alive.stdout:
            if line.strip() == "in n3":
                break
        refused = scenario.run("line", "recover")  # the holder runs: nobody may take its lease
        assert refused["status"] == "lease_held"
        assert refused["owner"].split(":")[1] == str(alive.pid)
        alive.send_signal(signal.SIGKILL)
        alive.communicate(timeout=30)
    done = scenario.run("line", "recover")
    assert done["status"] == "completed"
    assert scenario.counts() == {"n1": 1, "n2": 1, "n3": 2, "n4": 1, "n5": 1}


def test_a_pid_reused_by_another_process_does_not_pass_for_the_dead_owner(
    store_kind: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str,
) -> None:
    scenario = scenario_for(CHAIN, store_kind, tmp_path, anyio_backend)
    scenario.kill_inside("line", "n2:1")
    # Alive until its stdin closes (when the block ends): no timer decides when it goes.
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE) as other:
        try:
            stat = _stat(other.pid)
            assert stat is not None
            # An owner with this machine's identity and that live process's pid...
            host, _, rest = process_owner().partition(":")
            facts = rest.partition("@")[2].rsplit(".", 1)[0]
            alive = f"{host}:{other.pid}:feedbeef@{facts}.{stat[2]}/x"
            hand_lease_to(scenario, "line", alive)
            assert scenario.run("line", "recover")["status"] == "lease_held"  # it is that process
            # ... but with another start time: a process that had this pid before, and is gone.
            reused = f"{host}:{other.pid}:feedbeef@{facts}.{stat[2] - 1}/x"
            hand_lease_to(scenario, "line", reused)
            done = scenario.run("line", "recover")
            assert done["status"] == "completed"
            assert other.poll() is None  # the unrelated process was left alone
        finally:
            other.kill()
    [taken] = [t for t in takeovers(scenario, "line") if t["from"] == reused]
    assert taken["dead"] is True


def test_an_owner_on_another_machine_is_waited_out_unless_forced(
    store_kind: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str,
) -> None:
    scenario = scenario_for(CHAIN, store_kind, tmp_path, anyio_backend)
    scenario.kill_inside("line", "n2:1")
    elsewhere = "db-7:4242:0badcafe@00000000000000ff.4026531836.1234/x"  # another boot id: another host
    hand_lease_to(scenario, "line", elsewhere)
    assert scenario.run("line", "recover")["status"] == "lease_held"
    done = scenario.run("line", "force")
    assert done["status"] == "completed"
    [taken] = [t for t in takeovers(scenario, "line") if t["from"] == elsewhere]
    assert taken["forced"] is True and taken["dead"] is False and taken["operator"]


# -- killed between start_execution and its first journal entry ------------------------------


@pytest.mark.parametrize(("child", "name"), [(CHAIN, "line"), (AGENT, "tool"), (TEAM, "supervisor_crash")],
                         ids=["chain", "agent", "supervisor"])
@pytest.mark.parametrize("mode", ["run", "recover"])
def test_a_run_killed_before_its_first_boundary_is_carried_out_by_the_next_call(
    child: Path, name: str, mode: str, store_kind: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str,
) -> None:
    scenario = scenario_for(child, store_kind, tmp_path, anyio_backend)
    scenario.die_at(name, "after_start")
    assert scenario.counts() == {}  # nothing ran: the execution row is all there is
    owner, _ = lease_of(scenario, name)
    assert owner is not None
    done = scenario.run(name, mode)  # it hung, renewing the lease, forever: Scenario.run times out at 120 s
    assert done["status"] == "completed", done
    assert scenario.counts() and all(n == 1 for n in scenario.counts().values()), scenario.counts()


def test_a_decision_recorded_past_a_dead_holder_leaves_the_run_decided(
    store_kind: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str,
) -> None:
    """Killed just after its pause was journaled, before it let go: the next claim hands the run on."""
    scenario = scenario_for(CHAIN, store_kind, tmp_path, anyio_backend)
    scenario.die_at("approval", "at:suspended")
    owner, _ = lease_of(scenario, "approval")
    assert owner is not None

    async def decide() -> tuple[str, str | None]:
        from tether.runtime import Resume, Runtime

        async with scenario.store() as store, Runtime(store) as rt:
            await rt.decide("approval", Resume(approved=True), by="cli:alice")
            execution = await store.get_execution("approval")
            assert execution is not None
            return execution.status, execution.lease_owner

    assert anyio.run(decide, backend=anyio_backend) == ("decided", None)  # not "running" until the lease expires
    done = scenario.run("approval", "recover")
    assert done["status"] == "completed"
    assert done["output"]["approved"] is True
