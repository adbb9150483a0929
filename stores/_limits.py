"""LLM rate limits: the arithmetic of a fixed window, the same in every store.

A store reads the limit's row under its write lock (Postgres: ``FOR UPDATE``),
asks `take` whether a call fits, and writes back the row it returns, in one
transaction: a fleet of processes shares one count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Window:
    """A limit's current window: when it began, the calls and tokens counted in it, and any block."""

    start: float
    requests: int = 0
    tokens: int = 0
    blocked_until: float = 0.0


def current(window: Window | None, now: float, per: float) -> Window:
    """``window`` as of ``now``: a fresh count once its period is over (a block outlives it)."""
    start = math.floor(now / per) * per
    if window is None:
        return Window(start)
    if window.start != start:
        return Window(start, blocked_until=window.blocked_until)
    return window


def take(window: Window | None, now: float, per: float, requests: int | None,
         tokens: int | None) -> tuple[float, Window]:
    """Seconds to wait (0: the call is counted), and the window to store."""
    seen = current(window, now, per)
    if seen.blocked_until > now:
        return seen.blocked_until - now, seen
    if (requests is not None and seen.requests >= requests) or (tokens is not None and seen.tokens >= tokens):
        return max(seen.start + per - now, 0.001), seen
    return 0.0, replace(seen, requests=seen.requests + 1)


def spent(window: Window | None, now: float, per: float, tokens: int) -> Window:
    """The window with ``tokens`` more used."""
    seen = current(window, now, per)
    return replace(seen, tokens=seen.tokens + tokens)


def blocked(window: Window | None, now: float, seconds: float) -> Window:
    """The window blocked for ``seconds`` from ``now`` (never shortening a longer block)."""
    seen = window or Window(now)
    return replace(seen, blocked_until=max(seen.blocked_until, now + seconds))
