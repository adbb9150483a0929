"""Counting side effects: how often each ``@idempotent`` body really ran, per idempotency key."""

from __future__ import annotations

import threading
from collections import Counter
from typing import TYPE_CHECKING, Any, Self

from tether.runtime._core import hooks

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
        self.cut: set[str] = set()
        """Keys whose body ran but whose record a simulated crash refused: the
        side effect happened unrecorded, so recovery ran it again."""
        self._lock = threading.Lock()  # sync bodies run in worker threads
        self._previous = hooks.installed()

    def _observe(self, event: str, function: str, key: str) -> None:
        with self._lock:
            if event == "ran":
                self.runs[function, key] += 1
            else:
                self.cut.add(key)

    def __enter__(self) -> Self:
        current = hooks.installed()
        self._previous = hooks.install(current.replace(observers=(*current.observers, self._observe)))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        hooks.install(self._previous)

    def count(self, fn: Callable[..., Any]) -> dict[str, int]:
        """How often ``fn``'s body ran, by idempotency key."""
        name = _qualname(fn)
        return {key: n for (function, key), n in self.runs.items() if function == name}

    def assert_exactly_once(self, fn: Callable[..., Any], *, calls: int | None = None,
                            deduplicated: bool = False) -> None:
        """Assert that ``fn``'s body ran once per idempotency key (and, with ``calls``, for that many keys).

        A crash that falls while a body runs in a parallel branch leaves its
        effect done and unrecorded, and recovery runs it again under the same
        key. That is the one window ``@idempotent`` cannot close alone: pass
        ``idempotency_key()`` to the service, and say so with ``deduplicated=True``
        to accept a repeat of a key that was cut that way (never any other).

        Raises:
            AssertionError: It never ran, ran twice for a key, or ran for another number of keys.
        """
        runs = self.count(fn)
        name = _qualname(fn)
        twice = {key: n for key, n in runs.items() if n != 1 and not (deduplicated and key in self.cut and n == 2)}
        if twice:
            cut = sorted(set(twice) & self.cut)
            why = (f"A crash cut {len(cut)} of them between the side effect and its record, and recovery "
                   f"ran it again. " if cut else "")
            raise AssertionError(
                f"{name} ran more than once for {len(twice)} key(s): {twice}. {why}Pass idempotency_key() "
                f"to the service it calls, so that service drops the repeat."
            )
        if not runs:
            raise AssertionError(f"{name} never ran (is it @idempotent, and called inside a run?).")
        if calls is not None and len(runs) != calls:
            raise AssertionError(f"{name} ran for {len(runs)} keys, expected {calls}: {sorted(runs)}")


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"
