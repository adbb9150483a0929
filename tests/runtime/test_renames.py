"""Old names keep working for a release, and say what replaced them."""

from __future__ import annotations

from typing import Any

import pytest
from tether.actors import Chain
from tether.runtime import Resume, Runtime, interrupt
from tether.runtime._core.interrupt import loaded_model
from tether.stores import MemoryStore, Store


def approval(store: Store) -> Chain:
    async def approve(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("ok", {}).approved}

    chain = Chain("renamed", store=store)
    chain.add_node(approve)
    return chain


async def test_submit_resume_and_claim_still_decide_with_a_deprecation_warning() -> None:
    store = MemoryStore()
    chain = approval(store)
    for execution_id in ("a", "b"):
        assert (await chain.run({}, execution_id=execution_id)).status == "paused"
    with pytest.warns(DeprecationWarning, match=r"submit_resume\(\) is now \.decide\(\)"):
        await chain.submit_resume("a", Resume(approved=True))
    async with Runtime(store) as rt:
        with pytest.warns(DeprecationWarning, match=r"Runtime.claim\(\) is now Runtime.decide\(\)"):
            await rt.claim("b", Resume(approved=False))
    assert [(await store.get_execution(i)).status for i in "ab"] == ["decided", "decided"]  # type: ignore[union-attr]


async def test_run_leased_still_drives_with_a_deprecation_warning() -> None:
    store = MemoryStore()
    chain = approval(store)
    await chain.start({}, execution_id="q")
    [lease] = await store.take_work(owner="w", lease_seconds=30, limit=1)
    with pytest.warns(DeprecationWarning, match=r"run_leased\(\) is now \.drive\(\)"):
        result = await chain.run_leased(lease)
    assert result.status == "paused"


def test_a_journal_naming_resume_by_its_old_module_still_finds_it() -> None:
    # Journals written before the kernel moved name tether's own decision type by its old module.
    assert loaded_model("tether.runtime._interrupt:Resume") is Resume
    assert loaded_model("tether.runtime._interrupt.Resume") is Resume
    assert loaded_model("tether.runtime:Resume") is Resume
    assert loaded_model("someone_else:Resume") is None  # another application's type is never taken for it


async def test_a_journal_names_tethers_types_by_their_public_module() -> None:
    # So that the next move of a private module changes nothing a journal holds.
    store = MemoryStore()
    chain = approval(store)
    assert (await chain.run({}, execution_id="new")).status == "paused"
    [suspended] = [e for e in await store.read_journal("new") if e.kind == "suspended"]
    assert isinstance(suspended.payload, dict) and suspended.payload["expect"] == "tether.runtime:Resume"
