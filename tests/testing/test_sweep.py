"""The kit proves itself: every runner, crashed at every boundary in-process, recovers to the reference.

Each case runs on memory, SQLite and Postgres, under asyncio and trio.
"""

from __future__ import annotations

from typing import Any

import pytest
from tether.runtime import Resume
from tether.runtime.testing import crash_sweep
from tether.stores import Store

from tests.testing.flows import FLOWS, INPUTS, build


@pytest.mark.parametrize("flow", FLOWS)
async def test_every_boundary_of_every_runner_recovers(flow: str, tether_store: Store) -> None:
    runner = build(flow, tether_store)
    report = await crash_sweep(runner, INPUTS.get(flow, {}), decide=lambda pending: Resume(approved=True))

    assert report.reference.status == "completed"
    assert len(report.runs) == len(report.boundaries) >= 4  # one crash per journal write
    # Branches running at once may commit in another order from run to run.
    assert {run.boundary for run in report.runs} <= set(report.boundaries)
    assert all(run.result.output == report.reference.output for run in report.runs)
    # Every side effect of every run (reference, crashed, recovered) happened once per call site,
    # or twice where the crash fell while it ran in a parallel branch (cut: done, unrecorded).
    effects = report.effects
    assert effects.runs and all(n == 1 or (n == 2 and key in effects.cut) for (_, key), n in effects.runs.items())
    assert not effects.cut or flow in ("fanout", "agent", "swarm", "supervisor")  # only where branches overlap
    # Each crashed-and-recovered run made exactly the reference run's side effects.
    per_run: dict[str, int] = {}
    for _function, key in report.effects.runs:
        per_run[key.split("|", 1)[0]] = per_run.get(key.split("|", 1)[0], 0) + 1
    assert set(per_run.values()) == {per_run["sweep-ref"]}


async def test_a_sweep_reports_a_recovery_that_differs(tether_store: Store) -> None:
    # A node whose update depends on how often it ran in this process: its recovery differs.
    calls: list[int] = []

    def unstable(state: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        return {"seen": len(calls)}

    from tether.actors import Chain

    chain = Chain("unstable", [unstable], store=tether_store)
    with pytest.raises(AssertionError, match=r"crash after write 1 \(chain:unstable/inbox\): completed"):
        await crash_sweep(chain, {})
    report = await crash_sweep(chain, {}, prefix="again", check=False)
    assert report.mismatches
