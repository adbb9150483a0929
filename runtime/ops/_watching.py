"""`tether watch`: an execution's events in the terminal, as they happen."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.text import Text
from tether.runtime._executions.stream import events

if TYPE_CHECKING:
    from rich.console import Console
    from tether.runtime._core.events import Event
    from tether.runtime._executions.stream import Until
    from tether.stores import Store

LAST_CURSOR = 2**63 - 1
"""The largest cursor a store holds (a journal seq is SQLite's INTEGER, Postgres' bigint)."""

_BASE = frozenset({"execution_id", "path", "label", "cursor", "at", "type"})
_STYLES = {"execution_completed": "green", "execution_failed": "red", "execution_cancelled": "yellow",
           "execution_timed_out": "red",
           "execution_paused": "yellow", "interrupt": "yellow", "execution_resumed": "cyan"}


async def watch(store: Store, execution_id: str, console: Console, *, after: int, until: Until,
                as_json: bool) -> Event | None:
    """Print the execution's events until it ends (or pauses, with ``until="paused"``); the last one.

    Journal events are rows (cursor, path, label, what it holds); tokens of a run
    in this process are written as they come; with ``as_json``, one event per line.

    Raises:
        ExecutionNotFound: No such execution.
    """
    last: Event | None = None
    streaming = False  # tokens written on the current line
    async with events(store, execution_id, after=after, until=until) as stream:
        async for event in stream:
            last = event
            if as_json:
                console.out(json.dumps(event.model_dump(mode="json")), highlight=False)  # ASCII: always printable
                continue
            if event.type == "token":
                console.out(event.text, end="", highlight=False)
                streaming = True
                continue
            if streaming:
                console.out("")
                streaming = False
            console.print(_row(event))
            if event.type == "interrupt" and event.pending is not None:
                row = event.pending
                console.print(Text.assemble("      waiting for a decision: ", (row.reason, "bold"), " ",
                                            json.dumps(row.context, ensure_ascii=False)))
    return last


def _row(event: Event) -> Text:
    cursor = "" if event.cursor is None else str(event.cursor)
    fields = {key: value for key, value in event.model_dump(mode="json").items() if key not in _BASE}
    return Text.assemble(f"{cursor:>5}  ", (event.type, _STYLES.get(event.type, "cyan")), "  ",
                         event.path, "  ", (event.label, "dim"), "  ", _short(fields))


def _short(fields: dict[str, Any], width: int = 160) -> str:
    text = json.dumps(fields, ensure_ascii=False) if fields else ""
    return text if len(text) <= width else text[: width - 1] + "\u2026"
