"""Following an execution: its journal as typed events, from any process, resumable at a cursor."""

from __future__ import annotations

import contextlib
from collections import deque
from typing import TYPE_CHECKING, Literal

import anyio
from tether.runtime._core.events import (
    FINAL_EVENTS,
    Event,
    Grew,
    LiveFeed,
    from_entry,
    subscribe,
    unsubscribe,
)
from tether.stores import ConfigurationError, ExecutionNotFound

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from tether.runtime._core.events import Entry
    from tether.runtime._core.execution import RunResult
    from tether.stores import JournalWatch, Store
    from tether.stores._watch import Handed

Until = Literal["finished", "paused"]

def checked_until(until: str) -> Until:
    """``until`` as `events` takes it, or `ConfigurationError`."""
    if until not in ("finished", "paused"):
        raise ConfigurationError(f"until={until!r}: follow until 'finished' (the default) or 'paused'.")
    return until  # type: ignore[return-value]


_PAGE = 500  # journal entries read at a time: a follower far behind catches up in pages
_ROW_AGAIN = 10.0  # seconds after which an idle follower asks the execution's row again


class EventStream:
    """The events of one execution, in order; ``async for event in stream``.

    Journal events come once each, in journal order, and carry their
    ``cursor``; live events (tokens, starts) come between them as they happen,
    and a follower that reads too slowly misses some, told by a `Dropped`
    event. Iteration ends after the execution's final event (completed, failed,
    cancelled), or at a pause when following ``until="paused"``.

    ``cursor`` is the last journal position delivered: pass it as ``after=`` to
    continue later, from this process or another.
    """

    def __init__(self, store: Store, execution_id: str, watch: JournalWatch, feed: LiveFeed | None,
                 *, after: int, until: Until, driven_here: bool = False) -> None:
        self.store = store
        self.execution_id = execution_id
        self.cursor = after
        self.result: RunResult | None = None
        """What the run returned, for a stream from `Runner.stream`, once it returned."""
        self._watch = watch
        self._feed = feed
        self._until = until
        self._batch: deque[Event] = deque()
        self._last: str | None = None  # the type of the last journal event delivered
        self._over = False  # the run this stream watches returned: end once caught up
        self._error: BaseException | None = None
        self._ended = False
        self._upto: int | None = None  # the entry to read up to before the next live event
        self._known = after  # the last entry known to come before the live events waiting
        self._read_stirred = -1  # the watch's count of others' changes that the last full read saw
        self._row_seen: tuple[int, float] | None = None  # the cursor, and when, the execution's row was read
        self._driven_here = driven_here  # the run is this process's (`Runner.stream`): its return ends it

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        while not self._ended:
            event = self._batch.popleft() if self._batch else None
            if event is None and self._upto is not None:
                # The journal grew here among the live events: what it holds up to that
                # entry comes before the live events after it.
                if self.cursor < self._upto and await self._read(self._upto):
                    continue
                self._upto = None
            if event is None and self._feed is not None:
                live = self._feed.take()
                if isinstance(live, Grew):
                    self._upto, self._known = live.upto, max(self._known, live.upto)
                    continue
                event = live
            if event is not None:
                if event.cursor is not None:
                    self.cursor, self._last = event.cursor, event.type
                    self._ended = event.type in FINAL_EVENTS
                return event
            if await self._read():
                continue
            if self._over or (self._until == "paused" and self._last == "execution_paused"):
                break
            if await self._settled():
                if await self._read(everything=True):
                    continue  # what was committed just before the row said so
                break
            await self._watch.wait()
        self._ended = True
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        raise StopAsyncIteration

    async def _settled(self) -> bool:
        """Caught up and idle: whether the execution's row says nothing more is coming.

        Asked once per cursor position (and again after a while, when the follower gets to
        ask: an SSE stream does every 15 s), not on every wake. It ends a follower of a run
        that finished, or paused (``until="paused"``), without a verdict after the cursor:
        one that followed from the verdict's own cursor, a run paused by a tether too old
        to journal its verdicts, a migrated run. A deleted execution raises.
        """
        now = anyio.current_time()
        if self._driven_here or (self._row_seen is not None and self._row_seen[0] == self.cursor
                                 and now - self._row_seen[1] < _ROW_AGAIN):
            return False
        self._row_seen = (self.cursor, now)
        execution = await self.store.get_execution(self.execution_id)
        if execution is None:
            raise ExecutionNotFound(self.execution_id)
        return execution.finished or (self._until == "paused" and execution.status == "paused")

    async def _read(self, upto: int | None = None, *, everything: bool = False) -> bool:
        """Put the journal after the cursor (up to entry ``upto``) into the batch; False when there is nothing new.

        What this store object wrote was handed to the watch: it is taken from there,
        and the store is read only for what others wrote, or what a slow reader let go.
        """
        entries: Sequence[Entry] = self._handed(upto)
        if not entries:
            watch = self._watch
            stirred = watch.stirred  # other writers' changes, counted: one during the read is not lost
            elsewhere = everything or stirred != self._read_stirred
            wanted = upto if upto is not None else None if elsewhere else watch.grown_to
            if wanted is not None and wanted <= self.cursor:
                return False  # nothing is known to be there: no read
            limit = _PAGE if wanted is None else min(_PAGE, wanted - self.cursor)
            entries = await self.store.read_journal(self.execution_id, after_seq=self.cursor, limit=limit)
            if upto is None and len(entries) < limit:
                self._read_stirred = stirred  # caught up with what others wrote until the read began
        if upto is None and self._feed is not None and entries:
            # Live events may have come while it read: nothing committed after them goes first.
            bound = self._feed.bound(self._known)
            if bound is not None:
                entries = [entry for entry in entries if entry.seq <= bound]
                if not entries:
                    return True  # the live events come first; the journal is read again after them
            self._known = max(self._known, entries[-1].seq)
        if not entries:
            return False
        pending = None
        if any(entry.kind == "suspended" for entry in entries):
            pending = {row.agent_path: row for row in await self.store.list_pending(execution_id=self.execution_id)}
        self._batch.extend(from_entry(entry, pending) for entry in entries)
        return True

    def _handed(self, upto: int | None) -> list[Handed]:
        """The entries handed to the watch that come next, up to ``upto``."""
        handed = self._watch.handed
        entries: list[Handed] = []
        while handed and handed[0].seq <= self.cursor:
            handed.popleft()  # read from the store already
        following = self.cursor + 1
        while handed and handed[0].seq == following and (upto is None or following <= upto) \
                and len(entries) < _PAGE:
            entries.append(handed.popleft())
            following += 1
        return entries

    def _run_returned(self, result: RunResult | None, error: BaseException | None) -> None:
        self.result, self._error, self._over = result, error, True
        self._watch.wake()


@contextlib.asynccontextmanager
async def events(
    store: Store,
    execution_id: str,
    *,
    after: int = 0,
    until: Until = "finished",
    live: bool = True,
    buffer: int = 1000,
    _driven_here: bool = False,
) -> AsyncIterator[EventStream]:
    """Follow an execution's events, wherever it runs: here, in a worker, on another machine.

    Journal events after ``after`` come first (every one of them, in order),
    then each new one as it is committed: on Postgres a ``LISTEN`` wakes the
    follower, on SQLite a cheap check of the file every few milliseconds does;
    neither polls the journal itself. With ``live``, tokens and starts of a run
    in *this* process come too (they are not journaled: a follower in another
    process sees the whole messages only).

    Args:
        store: The execution's store.
        execution_id: Which execution.
        after: The last cursor already seen (0: from the beginning).
        until: ``"finished"`` (default) follows through pauses until the final
            event; ``"paused"`` also stops once the execution waits at a pause.
        live: Also deliver this process's live events.
        buffer: How many live events wait for a slow reader; beyond that the oldest
            are dropped, and a `Dropped` event says how many.

    Raises:
        ExecutionNotFound: No such execution.
        ConfigurationError: ``after`` is negative, or ``until`` unknown.

    Example:
        ```python
        async with events(store, "refund-42", after=cursor) as stream:
            async for event in stream:
                print(event.cursor, event.type, event.path)
        ```
    """
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise ConfigurationError(f"after={after!r}: give the cursor of the last event seen (0 for the beginning).")
    if not isinstance(buffer, int) or buffer < 1:
        raise ConfigurationError(f"buffer={buffer!r}: keep at least one live event for a slow reader.")
    checked_until(until)
    # A run this process drives (`Runner.stream`) holds its lease: only this store object
    # writes its journal meanwhile, and hands what it writes over, so nothing else is watched.
    async with store.watch(execution_id, elsewhere=not _driven_here) as watch:
        if not _driven_here and await store.get_execution(execution_id) is None:
            raise ExecutionNotFound(execution_id)
        feed = LiveFeed(store, execution_id, watch.wake, buffer) if live else None
        if feed is not None:
            watch.on_grew = feed.grew
            subscribe(feed)
        try:
            yield EventStream(store, execution_id, watch, feed, after=after, until=until, driven_here=_driven_here)
        finally:
            if feed is not None:
                unsubscribe(feed)
