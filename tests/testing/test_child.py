"""The in-process crash and a real SIGKILL agree: same boundary, same resumed result, same journal.

`crash_in_child` runs the flow in a fresh Python process armed with TETHER_FAULTS;
`crash_at` stops it in this one. Each on its own store, then both recover here.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from tether.runtime import Resume
from tether.runtime.testing import crash_at, crash_in_child
from tether.stores import ConfigurationError, JournalEntry, open_store

from tests.testing.flows import INPUTS, build

CASES = [("line", "node:n3", None), ("agent", "turn:2", None), ("approval", "node:charge", {"approved": True})]


@pytest.fixture(params=["sqlite", "postgres"])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    """Two stores of one kind: one for the in-process crash, one for the child's."""
    if request.param == "sqlite":
        return [f"sqlite:///{tmp_path / 'in-process.db'}", f"sqlite:///{tmp_path / 'child.db'}"]
    dsn = request.getfixturevalue("postgres_dsn")
    sep = "&" if "?" in dsn else "?"
    return [f"{dsn}{sep}schema=t_{uuid.uuid4().hex[:12]}" for _ in range(2)]


def shape(entries: list[JournalEntry]) -> list[str]:
    # Sorted: parallel tool calls commit in either order, in a child as in this process.
    return sorted(json.dumps([e.path, e.label, e.kind, e.payload], sort_keys=True) for e in entries)


@pytest.mark.parametrize(("flow", "at", "decision"), CASES, ids=[c[0] for c in CASES])
async def test_an_in_process_crash_and_a_real_sigkill_leave_the_same_run(
    flow: str, at: str, decision: dict[str, Any] | None, urls: list[str]
) -> None:
    outcomes = []
    for url, in_process in zip(urls, (True, False), strict=True):
        async with open_store(url) as store:
            runner = build(flow, store)
            if decision is not None:  # the crash comes in the resume: pause first, uncrashed
                assert (await runner.run(INPUTS.get(flow, {}), execution_id="x")).status == "paused"
            if in_process:
                async with crash_at(at) as point:
                    if decision is None:
                        await runner.run(INPUTS.get(flow, {}), execution_id="x")
                    else:
                        await runner.resume("x", Resume(**decision))
                assert point.happened
            else:
                crash = await crash_in_child(f"tests.testing.flows:{flow}", url, execution_id="x", at=at,
                                             input=INPUTS.get(flow, {}), decision=decision)
                assert crash.killed
            crashed = shape(await store.read_journal("x"))
            result = await runner.resume("x")  # takes the dead run's lease over at once
            outcomes.append((crashed, result.model_dump(), shape(await store.read_journal("x"))))

    (crashed_here, result_here, journal_here), (crashed_child, result_child, journal_child) = outcomes
    assert crashed_here == crashed_child
    assert sum(at in entry for entry in crashed_here) == 1  # both stopped right after the boundary
    assert result_here == result_child and result_here["status"] == "completed"
    assert journal_here == journal_child


async def test_a_child_that_never_reaches_the_boundary_fails_clearly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with pytest.raises(AssertionError, match=r"exited with 0 instead of dying at the boundary"):
        await crash_in_child("tests.testing.flows:line", url, execution_id="y", at="node:n9", input={})
    async with open_store(url) as store:
        assert (await store.get_execution("y")).status == "completed"  # type: ignore[union-attr]


async def test_a_memory_store_cannot_cross_into_a_child() -> None:
    with pytest.raises(ConfigurationError, match="another process can open"):
        await crash_in_child("tests.testing.flows:line", "memory://", execution_id="z", at=1)
