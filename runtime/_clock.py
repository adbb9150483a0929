"""The wall clock that durable timers and approval deadlines read.

It is ``datetime.now(UTC)`` unless a test installs another (see
`tether.runtime.testing.Clock`), so a "two days" deadline can pass in a
millisecond. Leases are not on this clock: their expiry is the database's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_source: Callable[[], datetime] | None = None


def now() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(UTC) if _source is None else _source()


def install(source: Callable[[], datetime] | None) -> Callable[[], datetime] | None:
    """Read time from ``source`` from now on (None: the real clock); returns the previous source."""
    global _source
    previous, _source = _source, source
    return previous
