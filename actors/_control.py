"""What a branch that ran beside others ended with: a failure, a pause, or something to pass on.

A chain's round and an agent's turn run their branches at once, and every
branch settles (finishes, fails or pauses) before anything is raised: a sibling
cancelled half-way would only pause, or fail, one resume later.
"""

from __future__ import annotations

from tether.runtime import Suspension, TetherError


def settled(exc: BaseException) -> bool:
    """Whether ``exc`` ends its branch: an error or a pause (alone or in a group), not a cancellation."""
    if isinstance(exc, BaseExceptionGroup):
        return all(settled(inner) for inner in exc.exceptions)
    return isinstance(exc, Exception | Suspension)


def is_control(exc: BaseException) -> bool:
    """A pause or tether's own error, alone or inside a tool's task group: never a tool's answer."""
    if isinstance(exc, BaseExceptionGroup):
        return any(is_control(inner) for inner in exc.exceptions)
    return isinstance(exc, Suspension | TetherError)
