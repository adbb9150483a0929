"""Watching an execution's journal grow: what `Store.watch` hands out.

A watch wakes its owner when the journal of one execution may have grown,
however the store learns of it: a write by this store object (at once, in
process), a notification from the database (Postgres ``LISTEN``), or a cheap
check at an interval (SQLite's ``data_version``). It never says what was
written: the owner reads the journal after its cursor, so a wake too many
costs one empty read and a missed one is impossible once the watch is open.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio

from . import _json

if TYPE_CHECKING:
    from datetime import datetime

Check = Callable[[], Awaitable[bool]]
"""Whether something may have changed since the last check (a periodic, cheap question)."""

class Handed(NamedTuple):
    """A journal entry a write committed, handed to the watches of its execution.

    The fields of a `JournalEntry` (the payload freshly parsed from what was
    stored), without a model's cost: it is made for every entry a follower sees.
    """

    execution_id: str
    seq: int
    path: str
    label: str
    kind: str
    payload: Any
    created_at: datetime


Committed = Callable[[], list[Handed]]
"""The entries a write committed, made only if a watch wants them."""

HANDED_KEPT = 1000
"""Entries a watch keeps for a reader that has not taken them; past that it reads them from the store."""


def committed(execution_id: str, seqs: list[int], rows: list[tuple[str, str, str, str]],
              at: datetime) -> Committed:
    """What a write of ``rows`` (as `entry_rows` encoded them) committed, read back as the store would."""
    def entries() -> list[Handed]:
        return [Handed(execution_id, seq, path, label, kind, _json.loads(payload), at)
                for seq, (path, label, kind, payload) in zip(seqs, rows, strict=True)]
    return entries


class JournalWatch:
    """Wakes its owner when an execution's journal may have grown; from `Store.watch`.

    Open a watch *before* reading the journal: a write that commits after it
    opened always wakes the next `wait`, even if it lands between the read and
    the wait.
    """

    def __init__(self, execution_id: str, check: Check | None, interval: float) -> None:
        self.execution_id = execution_id
        self._check = check
        self._interval = interval
        self._poked = False
        self._event: anyio.Event | None = None
        self.on_grew: Callable[[int], object] | None = None
        """Called at once, with the last sequence number written, when the journal grew to
        a known entry: a follower orders its live events by it. Before any waiter wakes."""
        self.grown_to = 0
        """The last entry the journal is known to have grown to (0: none known)."""
        self.stirred = 0
        """How many times the journal may have grown by an unknown amount (a change another
        connection made): a reader that saw fewer reads it."""
        self.handed: deque[Handed] = deque()
        """Entries this store object committed, handed over so that a reader need not read them."""

    def poke(self, upto: int | None = None, entries: list[Handed] | None = None) -> None:
        """The journal may have grown (to entry ``upto``, with ``entries``): wake a waiter.

        Call it on the watch's event loop.
        """
        if upto is None:
            self.stirred += 1
        else:
            self.grown_to = max(self.grown_to, upto)
            if self.on_grew is not None:
                self.on_grew(upto)
        if entries:
            if len(self.handed) + len(entries) > HANDED_KEPT:
                self.handed.clear()  # a reader this far behind reads from the store
            else:
                self.handed.extend(entries)
        self.wake()

    def wake(self) -> None:
        """Wake a waiter, for something else than the journal (a live event to pass on)."""
        self._poked = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Return once the journal may have grown since the previous return (or since opening)."""
        while not self._poked:
            self._event = anyio.Event()
            if self._check is None:
                await self._event.wait()
                continue
            with anyio.move_on_after(self._interval):
                await self._event.wait()
            if not self._poked and await self._check():
                self.stirred += 1
                break
        self._poked = False
        self._event = None


class Watchers:
    """A store's open watches, by execution id: what its writes poke."""

    def __init__(self) -> None:
        self._by_id: dict[str, set[JournalWatch]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def has(self, execution_id: str) -> bool:
        return execution_id in self._by_id

    def add(self, watch: JournalWatch) -> None:
        self._by_id.setdefault(watch.execution_id, set()).add(watch)

    def discard(self, watch: JournalWatch) -> None:
        alike = self._by_id.get(watch.execution_id)
        if alike is not None:
            alike.discard(watch)
            if not alike:
                del self._by_id[watch.execution_id]

    def poke(self, execution_id: str, upto: int | None = None, entries: Committed | None = None) -> None:
        """The journal of ``execution_id`` grew (to ``upto``, when known, by ``entries``): wake its watches."""
        watches = self._by_id.get(execution_id)
        if not watches:
            return
        handed = entries() if entries is not None else None
        for watch in watches:
            watch.poke(upto, handed)

    def poke_all(self) -> None:
        """Something changed, nobody knows where (a reconnected listener): wake every watch."""
        for alike in self._by_id.values():
            for watch in alike:
                watch.poke()
