"""How many wrong tokens an address may try: guessing is slowed to a crawl, nobody is locked out for long.

A token has 256 bits, so guessing cannot succeed anyway; the limit keeps a
guesser from loading the store with lookups and the logs with failures. It
counts failures only: a right token always counts for nothing, and one that
works clears its address's count.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

FAILURES = 10
"""Wrong tokens an address may present in any `WINDOW` seconds."""
WINDOW = 60.0
ADDRESSES = 10_000
"""Addresses remembered at once; past it the one heard from longest ago is forgotten (bounded memory)."""


class Throttle:
    """Failed sign-ins per client address, in a sliding window (one server process's own count)."""

    def __init__(self, failures: int = FAILURES, window: float = WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = failures
        self.window = window
        self._clock = clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def wait(self, address: str) -> int:
        """Whole seconds until ``address`` may try again; 0 when it may now."""
        times = self._recent(address)
        if times is None or len(times) < self.failures:
            return 0
        return max(1, math.ceil(times[0] + self.window - self._clock()))

    def failed(self, address: str) -> None:
        times = self._recent(address)
        if times is None:
            times = self._seen[address] = deque(maxlen=self.failures)
            while len(self._seen) > ADDRESSES:
                self._seen.popitem(last=False)
        times.append(self._clock())
        self._seen.move_to_end(address)

    def succeeded(self, address: str) -> None:
        self._seen.pop(address, None)

    def _recent(self, address: str) -> deque[float] | None:
        times = self._seen.get(address)
        if times is not None:
            horizon = self._clock() - self.window
            while times and times[0] <= horizon:
                times.popleft()
        return times
