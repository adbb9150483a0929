"""State deltas: journaled boundaries rebuild exactly the state they recorded."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings, strategies as st
from tether.runtime._core.delta import apply, diff, restore, snapshot

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
values = scalars | st.lists(scalars, max_size=4) | st.dictionaries(st.text(max_size=3), scalars, max_size=3)
keys = st.sampled_from(["count", "messages", "name", "results", "meta"])


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A sequence of states; lists mostly grow, as conversations do."""
    state: dict[str, Any] = {}
    states = [dict(state)]
    for _ in range(draw(st.integers(1, 12))):
        state = json.loads(json.dumps(state))
        for key in draw(st.lists(keys, max_size=3)):
            current = state.get(key)
            if isinstance(current, list) and draw(st.booleans()):
                current.extend(draw(st.lists(scalars, min_size=1, max_size=3)))
            else:
                state[key] = draw(values)
        states.append(state)
    return states


@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_deltas_and_snapshots_rebuild_the_state(states: list[dict[str, Any]], data: st.DataObject) -> None:
    journal: list[tuple[str, dict[str, Any]]] = [("delta", {"set": dict(states[0])})]
    replayed = dict(states[0])
    for before, after in itertools.pairwise(states):
        delta = diff(before, after)
        apply(replayed, delta)
        assert replayed == after
        if delta:
            journal.append(("delta", delta))
        if data.draw(st.booleans()):
            journal.append(("snapshot", snapshot(after)))
    assert restore(journal) == states[-1]


def test_a_growing_conversation_costs_only_its_new_messages() -> None:
    before = {"turn": 3, "messages": [{"role": "user", "content": "x" * 1000}] * 40}
    after = {"turn": 4, "messages": [*before["messages"], {"role": "assistant", "content": "ok"}]}
    delta = diff(before, after)
    assert delta == {"set": {"turn": 4}, "append": {"messages": [{"role": "assistant", "content": "ok"}]}}
    assert snapshot(after) == {"turn": 4}


def test_nothing_changed_is_an_empty_delta() -> None:
    assert diff({"a": [1], "b": 2}, {"a": [1], "b": 2}) == {}
