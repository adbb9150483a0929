"""Tests of the refund flow (refund_chain.py) with tether's testing kit: copy this file for your own flows.

    pytest --tether examples/test_refund_chain.py

Each test runs six times: asyncio and trio, on a memory store, a SQLite file and
a Postgres schema (TETHER_TEST_POSTGRES_DSN, or a server on 127.0.0.1:5432;
without one those cases skip and say why). docs/testing.md explains each tool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from refund_chain import page_manager, refund_chain
from tether.runtime import AlreadyResumed, Resume
from tether.runtime.testing import Effects, crash_at, crash_sweep

if TYPE_CHECKING:
    from tether.stores import Store

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_big_refund_waits_for_a_manager(tether_store: Store) -> None:
    chain = refund_chain(tether_store)
    paused = await chain.run({"amount": 50_000}, execution_id="r-1")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "chain:refund/node:approve_refund"

    done = await chain.resume("r-1", Resume(approved=True, metadata={"approver": "alice"}))
    assert done.output["message"] == "$50,000 refunded"
    with pytest.raises(AlreadyResumed):  # a second click changes nothing
        await chain.resume("r-1", Resume(approved=False))


async def test_a_crash_after_the_approval_neither_asks_again_nor_pages_twice(tether_store: Store) -> None:
    chain = refund_chain(tether_store)
    with Effects() as effects:
        await chain.run({"amount": 50_000}, execution_id="r-2")
        async with crash_at("node:approve_refund"):  # dies right after the decision is journaled
            await chain.resume("r-2", Resume(approved=True))
        result = await chain.resume("r-2")  # recovery, as a new process would
    assert result.status == "completed"
    assert result.output["approved"] is True
    effects.assert_exactly_once(page_manager, calls=1)


async def test_every_crash_point_recovers_to_the_same_refund(tether_store: Store) -> None:
    report = await crash_sweep(refund_chain(tether_store), {"amount": 50_000},
                               decide=lambda pending: Resume(approved=True))
    assert report.reference.output["message"] == "$50,000 refunded"
    assert len(report.runs) == len(report.boundaries)  # one crash per journal write, each recovered
