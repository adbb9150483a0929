"""Shared life cycle of the stores that sit on an asyncio-only driver."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, TypeVar

import anyio

from ._bridge import DriverLoop, OpFn, open_driver_loop
from ._errors import UsageError
from ._protocol import Store

if TYPE_CHECKING:
    from collections.abc import Awaitable

T = TypeVar("T")


class DriverStore(Store):
    """A `Store` whose operations run through a `DriverLoop`.

    Opening is lazy: the first operation (or ``setup()``) picks the loop for the
    current backend, connects and migrates. Subclasses implement `_open` and
    `_close`, which run on the driver loop.
    """

    def __init__(self) -> None:
        self._driver_loop: DriverLoop | None = None
        self._open_lock: anyio.Lock | None = None
        self._closed = False
        self._in_flight = 0
        self._drained: anyio.Event | None = None

    @abstractmethod
    async def _open(self) -> None:
        """Connect and apply migrations (runs on the driver loop)."""

    @abstractmethod
    async def _close(self) -> None:
        """Close driver objects (runs on the driver loop)."""

    @abstractmethod
    async def _abandon(self) -> None:
        """Release driver objects whose event loop is gone (runs on the caller's loop)."""

    async def setup(self) -> None:
        await self._loop()

    async def _loop(self) -> DriverLoop:
        if self._driver_loop is not None:
            return self._driver_loop
        if self._closed:
            raise UsageError(f"{self!r} is closed. Create a new store to use the database again.")
        if self._open_lock is None:
            self._open_lock = anyio.Lock()
        async with self._open_lock:
            if self._closed:  # closed while this call waited for the lock
                raise UsageError(f"{self!r} is closed. Create a new store to use the database again.")
            if self._driver_loop is None:
                loop = open_driver_loop()
                try:
                    await loop.run(lambda op: self._open())
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await loop.aclose()
                    raise
                self._driver_loop = loop
        return self._driver_loop

    async def _run(self, fn: OpFn[T]) -> T:
        """Run one operation (one transaction) on the driver loop."""
        loop = self._driver_loop or await self._loop()
        return await self._counted(loop.run(fn))

    async def _counted(self, operation: Awaitable[T]) -> T:
        """Await an operation that `aclose` must let finish first."""
        self._in_flight += 1
        try:
            return await operation
        finally:
            self._finished_one()

    def _finished_one(self) -> None:
        """An operation counted in ``_in_flight`` ended; the last one lets a waiting `aclose` go on."""
        self._in_flight -= 1
        if self._in_flight == 0 and self._drained is not None:
            self._drained.set()

    async def aclose(self) -> None:
        self._closed = True
        with anyio.CancelScope(shield=True):
            if self._open_lock is not None:
                async with self._open_lock:  # let an open in progress finish first
                    pass
            if self._in_flight:
                # Operations already running finish (and learn their outcome) before
                # the connections and the loop under them go away.
                self._drained = anyio.Event()
                with anyio.move_on_after(30):
                    await self._drained.wait()
        loop, self._driver_loop = self._driver_loop, None
        if loop is None:
            return
        with anyio.CancelScope(shield=True):
            if not loop.reachable():
                # Opened under another event loop (say, an earlier anyio.run()).
                await self._abandon()
                await loop.aclose()
                return
            try:
                await loop.run(lambda op: self._close())
            finally:
                await loop.aclose()
