"""Fault injection for crash tests: die exactly where a real crash would hurt most.

``TETHER_FAULTS`` is a comma-separated list of points; the process SIGKILLs
itself when it reaches one. Unset, a point costs one lookup in an empty set.

- ``after_claim``: a resume's claim committed, nothing after it has run;
- ``write:N``: just after the Nth journal write of this process committed
  (every boundary: a message accepted or handled, a step, a suspension);
- ``before_record``: an ``@idempotent`` function returned (its side effect is
  done) and its record is not written yet.
"""

from __future__ import annotations

import os
import signal

_ARMED = frozenset(p for p in os.environ.get("TETHER_FAULTS", "").split(",") if p)
_WRITE_AT = next((int(p.split(":", 1)[1]) for p in _ARMED if p.startswith("write:")), 0)
_writes = 0


def reached(point: str) -> None:
    """Die here with SIGKILL if this point is armed."""
    if point in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)


def wrote() -> None:
    """Count a committed journal write; die after the armed one."""
    global _writes
    if not _WRITE_AT:
        return
    _writes += 1
    if _writes == _WRITE_AT:
        os.kill(os.getpid(), signal.SIGKILL)


def writes() -> int:
    """Journal writes this process committed so far (counted only while ``write:N`` is armed)."""
    return _writes
