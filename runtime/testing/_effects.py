"""Counting side effects: how often each ``@idempotent`` body really ran, per idempotency key."""

from __future__ import annotations

import threading
from collections import Counter
from typing import TYPE_CHECKING, Any, Self

from .. import _faults

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType


class Effects:
    """Records every run of an ``@idempotent`` function's body while the block is open.

    A body runs when its call has no record yet; a replay after a crash or a
    resume returns the record instead. So "each key ran once" is the
    exactly-once promise, observed from the outside. Works for runs in this
    process (`crash_at`, ``resume``); a child process counts its own.

    Example:
        ```python
        with Effects() as effects:
            async with crash_at("node:notify"):
                await chain.run(order, execution_id="o-1")
            await chain.resume("o-1")
        effects.assert_exactly_once(charge)     # charged once, crash or not
        ```
    """

    def __init__(self) -> None:
        self.runs: Counter[tuple[str, str]] = Counter()
        """(function, idempotency key) -> how often its body ran."""
        self._lock = threading.Lock()  # sync bodies run in worker threads

    def _observe(self, function: str, key: str) -> None:
        with self._lock:
            self.runs[function, key] += 1

    def __enter__(self) -> Self:
        _faults.effect_observers.append(self._observe)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _faults.effect_observers.remove(self._observe)

    def count(self, fn: Callable[..., Any]) -> dict[str, int]:
        """How often ``fn``'s body ran, by idempotency key."""
        name = _qualname(fn)
        return {key: n for (function, key), n in self.runs.items() if function == name}

    def assert_exactly_once(self, fn: Callable[..., Any], *, calls: int | None = None) -> None:
        """Assert that ``fn``'s body ran once per idempotency key (and, with ``calls``, for that many keys).

        Raises:
            AssertionError: It never ran, ran twice for a key, or ran for another number of keys.
        """
        runs = self.count(fn)
        name = _qualname(fn)
        twice = {key: n for key, n in runs.items() if n != 1}
        if twice:
            raise AssertionError(
                f"{name} ran more than once for {len(twice)} key(s): {twice}. Its side effect happened "
                f"twice: a crash fell between the effect and its record. Pass idempotency_key() to the "
                f"service it calls, so that service drops the repeat."
            )
        if not runs:
            raise AssertionError(f"{name} never ran (is it @idempotent, and called inside a run?).")
        if calls is not None and len(runs) != calls:
            raise AssertionError(f"{name} ran for {len(runs)} keys, expected {calls}: {sorted(runs)}")


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"
