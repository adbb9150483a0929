"""Medians with their spread, and the rule that flags a cell one hiccup could have moved.

A benchmark cell is the median of a few samples, one per round (or per round's
batch). A median of three hides one stall, but it cannot say whether the rounds
agreed; the spread (lowest-highest sample) beside it does. The rule here: a
cell is *noisy* when its spread (max - min) exceeds its median, i.e. the rounds
disagree by more than the figure itself. Such a cell is marked with a trailing
" !" and listed under "noisy cells:" at the end of its workload's output, so a
reader (and ``python -m bench``'s summary) knows which figures to rerun before
trusting them.

    noisy = Noisy()
    noisy.cell("SQLite FULL, LangGraph, us per node", [410, 395, 2900])
    # -> '410 (395-2,900) !'
    print(noisy.report())
    # -> 'noisy cells: 1 (spread max-min above the median)' and one '- ...' line per cell

Ratios keep their one-number line (``ratio ... = x.xx``, which tools parse);
`spread_line` adds the round-by-round range of the same ratio on a line of its
own, starting with "spread" so that the ratio's pattern does not match it.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from typing import NamedTuple

NOISY = " !"
NOISY_HEADER = "noisy cells:"


class Spread(NamedTuple):
    """The median of some samples and the range they span."""

    median: float
    low: float
    high: float

    @property
    def noisy(self) -> bool:
        """The flag rule: the samples span more than their median."""
        return self.high - self.low > abs(self.median)


def spread(samples: Iterable[float]) -> Spread:
    values = list(samples)
    return Spread(statistics.median(values), min(values), max(values))


def formatted(s: Spread, fmt: str = ",.0f") -> str:
    """'median (low-high)', with the noisy mark when the rule says so."""
    text = f"{s.median:{fmt}} ({s.low:{fmt}}-{s.high:{fmt}})"
    return text + NOISY if s.noisy else text


class Noisy:
    """Formats a workload's cells and remembers the noisy ones for its closing list."""

    def __init__(self) -> None:
        self.cells: list[str] = []

    def cell(self, where: str, samples: Iterable[float], fmt: str = ",.0f") -> str:
        """The table cell for `samples`; `where` names it in the list should it be noisy."""
        s = spread(samples)
        text = formatted(s, fmt)
        if s.noisy:
            self.cells.append(f"- {where}: {text}")
        return text

    def report(self) -> str:
        if not self.cells:
            return f"{NOISY_HEADER} none"
        return "\n".join([f"{NOISY_HEADER} {len(self.cells)} (spread max-min above the median)", *self.cells])


def paired_ratios(peer: Sequence[float], base: Sequence[float]) -> list[float]:
    """peer/base round by round: rounds are interleaved, so a slow moment shared by both cancels."""
    return [p / b for p, b in zip(peer, base, strict=True)]


def spread_line(name: str, ratios: Iterable[float]) -> str:
    """The range of a ratio over the rounds, for the line after ``ratio <name> = x.xx``."""
    s = spread(ratios)
    return f"spread {name} = {s.low:.2f}-{s.high:.2f}" + (NOISY if s.noisy else "")


def noisy_lines(text: str) -> list[str]:
    """The "noisy cells:" list of a workload's output: its header and the '- ' lines after it."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        if line.startswith(NOISY_HEADER):
            return [line, *itertools.takewhile(lambda item: item.startswith("- "), lines[k + 1:])]
    return []
