"""Watching an execution's journal grow: what `Store.watch` hands out.

A watch wakes its owner when the journal of one execution may have grown,
however the store learns of it: a write by this store object (at once, in
process), a notification from the database (Postgres ``LISTEN``), or a cheap
check at an interval (SQLite's ``data_version``). It never says what was
written: the owner reads the journal after its cursor, so a wake too many
costs one empty read and a missed one is impossible once the watch is open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

Check = Callable[[], Awaitable[bool]]
"""Whether something may have changed since the last check (a periodic, cheap question)."""


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
        """Called at once, with the last sequence number written, when this store object grew
        the journal: a follower orders its live events by it. Before any waiter wakes."""

    def poke(self, upto: int | None = None) -> None:
        """The journal may have grown (to ``upto``): wake a waiter (on the watch's event loop)."""
        if self.on_grew is not None and upto is not None:
            self.on_grew(upto)
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
                break
        self._poked = False
        self._event = None


class Watchers:
    """A store's open watches, by execution id: what its writes poke."""

    def __init__(self) -> None:
        self._by_id: dict[str, set[JournalWatch]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def add(self, watch: JournalWatch) -> None:
        self._by_id.setdefault(watch.execution_id, set()).add(watch)

    def discard(self, watch: JournalWatch) -> None:
        alike = self._by_id.get(watch.execution_id)
        if alike is not None:
            alike.discard(watch)
            if not alike:
                del self._by_id[watch.execution_id]

    def poke(self, execution_id: str, upto: int | None = None) -> None:
        """The journal of ``execution_id`` grew (to ``upto``, when known): wake its watches."""
        for watch in self._by_id.get(execution_id, ()):
            watch.poke(upto)

    def poke_all(self) -> None:
        """Something changed, nobody knows where (a reconnected listener): wake every watch."""
        for alike in self._by_id.values():
            for watch in alike:
                watch.poke()
