"""`Effects` counts the runs of ``@idempotent`` bodies: exactly once holds, and its breach is caught."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from tether.actors import Chain
from tether.runtime.testing import Effects, crash_at
from tether.stores import Store

from tests.testing.flows import build, effect, tool


async def test_a_resume_replays_records_instead_of_running_bodies_again(
    tether_store: Store, tether_effects: Effects
) -> None:
    chain = build("line", tether_store)
    async with crash_at("node:n4"):
        await chain.run({}, execution_id="e-1")
    await chain.resume("e-1")
    await chain.run({}, execution_id="e-1")  # the id is an idempotency key: nothing runs again

    tether_effects.assert_exactly_once(effect, calls=4)
    assert sorted(key.split("|")[3] for key in tether_effects.count(effect)) == [
        "node:n1", "node:n2", "node:n3", "node:n4"]


async def test_a_lost_record_shows_as_a_second_run(tether_store: Store) -> None:
    chain = build("line", tether_store)
    with Effects() as effects:
        await chain.run({}, execution_id="e-2")
        await tether_store.delete_execution("e-2")  # its records go with it
        await chain.run({}, execution_id="e-2")

    assert set(effects.count(effect).values()) == {2}
    with pytest.raises(AssertionError, match=r"ran more than once for 4 key\(s\).*idempotency_key\(\)"):
        effects.assert_exactly_once(effect)


async def test_it_says_when_a_function_never_ran_or_ran_for_other_calls(tether_store: Store) -> None:
    with Effects() as effects:
        await build("line", tether_store).run({}, execution_id="e-3")
    with pytest.raises(AssertionError, match="never ran"):
        effects.assert_exactly_once(tool("unused"))
    with pytest.raises(AssertionError, match="ran for 4 keys, expected 3"):
        effects.assert_exactly_once(effect, calls=3)


def test_it_only_counts_while_open() -> None:
    from tether.runtime._core import hooks

    with Effects() as effects:
        assert effects._observe in hooks.installed().observers
    assert effects._observe not in hooks.installed().observers


def side_by_side(name: str, store: Store, start: Any, slow: Any, quick: Any) -> Chain:
    """``start``, then ``slow`` and ``quick`` at once: a crash in one cuts the other."""
    chain = Chain(name, store=store)
    for fn in (start, slow, quick):
        chain.add_node(fn)
    chain.add_edge("start", "slow")
    chain.add_edge("start", "quick")
    return chain


async def test_a_side_effect_running_in_a_parallel_branch_at_the_crash_is_cut(tether_store: Store) -> None:
    from tether.runtime import idempotent

    crash = crash_at("node:quick")
    point = crash.point
    started = threading.Event()

    @idempotent
    def slow_effect() -> str:
        started.set()
        assert point.died.wait(timeout=30)  # still running when the other branch's write kills the process
        return "done"

    def slow(state: dict[str, object]) -> dict[str, object]:
        return {"slow": slow_effect()}

    def quick(state: dict[str, object]) -> dict[str, object]:
        assert started.wait(timeout=30)  # the slow side effect is under way
        return {"quick": True}

    def start(state: dict[str, object]) -> dict[str, object]:
        return {}

    chain = side_by_side("parallel", tether_store, start, slow, quick)
    with Effects() as effects:
        async with crash:
            await chain.run({}, execution_id="p-1")
        assert point.died.is_set()
        result = await chain.resume("p-1")

    assert result.output == {"slow": "done", "quick": True}
    [key] = effects.count(slow_effect)
    assert effects.count(slow_effect) == {key: 2} and effects.cut == {key}
    with pytest.raises(AssertionError, match="A crash cut 1 of them between the side effect and its record"):
        effects.assert_exactly_once(slow_effect)
    effects.assert_exactly_once(slow_effect, deduplicated=True)


async def test_an_async_side_effect_cancelled_by_the_crash_is_cut(tether_store: Store) -> None:
    import anyio
    from tether.runtime import idempotent

    started = anyio.Event()

    @idempotent
    async def slow_effect() -> str:
        started.set()
        await anyio.sleep_forever()  # cancelled by the crash, partway through its effect
        return "never"

    async def slow(state: dict[str, object]) -> dict[str, object]:
        return {"slow": await slow_effect()}

    async def quick(state: dict[str, object]) -> dict[str, object]:
        await started.wait()
        return {"quick": True}

    async def start(state: dict[str, object]) -> dict[str, object]:
        return {}

    chain = side_by_side("cancelled", tether_store, start, slow, quick)
    with Effects() as effects:
        async with crash_at("node:quick") as point:
            await chain.run({}, execution_id="c-1")
    assert point.happened
    [key] = effects.count(slow_effect)
    assert effects.cut == {key}
