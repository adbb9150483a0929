"""State deltas: what one message boundary changed, small enough to journal every time.

A durable actor's state is a pydantic model. At each boundary the runtime
compares the state's JSON form before and after the handler and journals only
the difference:

- ``set``: top-level fields whose value changed, with their new value;
- ``append``: list fields that only grew, with just the new items.

So a conversation that grows by one message per turn costs one message per
entry, never the whole list again. A snapshot holds the fields that are not
lists; lists are rebuilt from their own ``set``/``append`` history, so a
snapshot never copies an append-only list (that would be quadratic again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

JsonObject = dict[str, Any]


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> JsonObject:
    """Return the delta that turns ``before`` into ``after`` (both JSON objects).

    An empty dict means nothing changed.
    """
    changed: JsonObject = {}
    grown: JsonObject = {}
    for key, new in after.items():
        old = before.get(key, _MISSING)
        if old is _MISSING or old != new:
            if isinstance(old, list) and isinstance(new, list) and new[: len(old)] == old:
                grown[key] = new[len(old):]
            else:
                changed[key] = new
    delta: JsonObject = {}
    if changed:
        delta["set"] = changed
    if grown:
        delta["append"] = grown
    return delta


def apply(state: JsonObject, delta: Mapping[str, Any]) -> None:
    """Apply a delta produced by `diff` to ``state`` in place.

    Lists are copied in, never shared with the delta: appends extend them in place.
    """
    for key, value in delta.get("set", {}).items():
        state[key] = list(value) if isinstance(value, list) else value
    for key, items in delta.get("append", {}).items():
        state.setdefault(key, []).extend(items)


def snapshot(state: Mapping[str, Any]) -> JsonObject:
    """The part of a state a snapshot stores: every field that is not a list."""
    return {key: value for key, value in state.items() if not isinstance(value, list)}


def restore(snapshots_and_deltas: Iterable[tuple[str, Mapping[str, Any]]]) -> JsonObject:
    """Rebuild a state from its history, oldest first.

    Items are ``("snapshot", fields)`` or ``("delta", delta)``. Non-list fields
    come from the latest snapshot and the deltas after it; list fields from
    every delta (a ``set`` replaces the list, an ``append`` extends it), which
    is why the whole history is read.
    """
    scalars: JsonObject = {}
    lists: dict[str, list[Any]] = {}
    for kind, body in snapshots_and_deltas:
        if kind == "snapshot":
            scalars = dict(body)
            continue
        for key, value in body.get("set", {}).items():
            if isinstance(value, list):
                lists[key] = list(value)
                scalars.pop(key, None)
            else:
                scalars[key] = value
                lists.pop(key, None)
        for key, items in body.get("append", {}).items():
            lists.setdefault(key, []).extend(items)
    return {**scalars, **lists}


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()
