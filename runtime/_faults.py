"""Fault injection for crash tests: die exactly where a real crash would hurt most.

``TETHER_FAULTS`` is a comma-separated list of points; the process SIGKILLs
itself when it reaches one. Unset, a point costs one lookup in an empty set.

- ``after_claim``: a resume's claim committed, nothing after it has run;
- ``write:N``: just after the Nth journal write of this process committed
  (every boundary: a message accepted or handled, a step, a suspension);
- ``at:LABEL``: just after the first journal write holding an entry named
  ``LABEL`` committed (``node:charge``, ``turn:2/tool:charge``, or a full
  path such as ``chain:refund/node:charge``);
- ``before_record``: an ``@idempotent`` function returned (its side effect is
  done) and its record is not written yet.

`tether.runtime.testing` stops a run the same way without a process: its hooks
below are empty unless a test installs them.
"""

from __future__ import annotations

import os
import signal
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tether.stores import NewEntry, Store

_ARMED = frozenset(p for p in os.environ.get("TETHER_FAULTS", "").split(",") if p)
_WRITE_AT = next((int(p.split(":", 1)[1]) for p in _ARMED if p.startswith("write:")), 0)
_LABELS = tuple(p.split(":", 1)[1] for p in _ARMED if p.startswith("at:"))
_writes = 0


def names(spec: str, path: str, label: str) -> bool:
    """Whether a boundary spec names the entry ``label`` written at ``path``."""
    full = f"{path}/{label}"
    return spec in (label, full) or full.endswith("/" + spec)


def reached(point: str) -> None:
    """Die here with SIGKILL if this point is armed."""
    if point in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)


def wrote(entries: Sequence[NewEntry] = ()) -> None:
    """Count a committed journal write; die after the armed one."""
    global _writes
    if _LABELS and any(names(spec, e.path, e.label) for e in entries for spec in _LABELS):
        os.kill(os.getpid(), signal.SIGKILL)
    if not _WRITE_AT:
        return
    _writes += 1
    if _writes == _WRITE_AT:
        os.kill(os.getpid(), signal.SIGKILL)


def writes() -> int:
    """Journal writes this process committed so far (counted only while ``write:N`` is armed)."""
    return _writes


# -- in-process hooks (tether.runtime.testing) ---------------------------------------

store_wrapper: ContextVar[Callable[[Store], Store] | None] = ContextVar("tether_store_wrapper", default=None)
"""Wraps the store of every `Runtime` created in this context (an in-process crash)."""

heirs: dict[str, str] = {}
"""Execution id -> lease owner of a run known to be dead: the next drive of it in
this process takes the lease over at once instead of waiting for it to expire."""

effect_observers: list[Callable[[str, str, str], None]] = []
"""Called with ("ran", function, key) each time an ``@idempotent`` body runs, and with
("cut", "", key) when a simulated crash refuses the record of a body that ran."""


def ran(function: str, key: str) -> None:
    """An ``@idempotent`` body ran (its side effect happened) under ``key``."""
    for observe in effect_observers:
        observe("ran", function, key)


def cut(key: str) -> None:
    """A body ran under ``key``, and the process died before its record was written."""
    for observe in effect_observers:
        observe("cut", "", key)
