"""Fault injection for crash tests: die exactly where a real crash would hurt most.

``TETHER_FAULTS=after_claim`` (a comma-separated list of points) makes the
process SIGKILL itself when it reaches that point. Unset, a point costs one
lookup in an empty set. The points:

- ``after_claim``: a resume's claim committed, nothing after it has run.
"""

from __future__ import annotations

import os
import signal

_ARMED = frozenset(p for p in os.environ.get("TETHER_FAULTS", "").split(",") if p)


def reached(point: str) -> None:
    """Die here with SIGKILL if this point is armed."""
    if point in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
