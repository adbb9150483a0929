"""Every benchmark, in one command, against fastaiagent 1.94 and LangGraph (and DBOS) in the same run.

    python3 -m venv .venv-bench && .venv-bench/bin/pip install '.[bench]'
    .venv-bench/bin/python -m bench            # everything
    .venv-bench/bin/python -m bench --quick    # a reduced set: the same tables, in under 5 minutes

Each workload runs in a process of its own (no warm caches or loops shared
between them), prints its tables, and the run ends with every
``ratio <workload> <store> <peer>/tether = <x.xx>`` line together, each followed
by ``spread <the same name> = <low>-<high>``, the ratio's range round by round,
and then every workload's "noisy cells:" list. ``--out`` writes the whole report
as Markdown; ``--plots DIR`` draws the per-step overhead and the storage growth
as PNG files.

Every cell of every table is a median over interleaved rounds with its spread
(min-max) beside it, and a cell whose spread exceeds its median is marked " !"
(`bench._spread`). ``--quick`` runs smaller workloads, never fewer than 3 rounds:
with one round, a single stall in a 100-node line moved a cell tenfold and
nothing in the table said so.

1. sequential durable steps: a line of nodes, per store, with the raw-driver floor (`bench.chain`)
2. concurrency: executions at once in one process, steps/s, peak RSS, loop lag (`bench.concurrency`)
3. agent turns with a scripted LLM, and bytes stored after 10, 20, 40 turns (`bench.agent`)
4. human in the loop: pause, and claim+resume to completion (`bench.hitl`)
5. tether under trio: the trio columns of 1, as ratios to asyncio
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._spread import NOISY_HEADER, noisy_lines, paired_ratios, spread_line

RATIO = re.compile(r"^ratio .+ = [0-9.]+$")
SPREAD = re.compile(r"^spread .+ = [0-9.]+-[0-9.]+( !)?$")  # the line after a ratio: its range over the rounds


def workloads(quick: bool, postgres: str, tmp: Path) -> list[tuple[str, list[str]]]:
    pg = ["--postgres", postgres]
    if quick:
        return [
            # Chain and agent rounds are short, so they get 5; the other two keep 3 in their own --quick.
            ("1. sequential durable steps", ["bench.chain", "--rounds", "5", "--nodes", "100",
                                             "--json", str(tmp / "chain.json"), *pg]),
            ("2. concurrency", ["bench.concurrency", "--quick", *pg]),
            ("3. agent turns", ["bench.agent", "--rounds", "5", "--turns", "20", "--json", str(tmp / "agent.json"), *pg]),
            ("4. human in the loop", ["bench.hitl", "--quick", *pg]),
        ]
    return [
        ("1. sequential durable steps", ["bench.chain", "--rounds", "9", "--nodes", "200",
                                         "--json", str(tmp / "chain.json"), *pg]),
        ("2. concurrency", ["bench.concurrency", *pg]),
        ("3. agent turns", ["bench.agent", "--rounds", "3", "--turns", "40", "--json", str(tmp / "agent.json"), *pg]),
        ("4. human in the loop", ["bench.hitl", *pg]),
    ]


def run(title: str, command: list[str]) -> str:
    print(f"\n## {title}  (python -m {' '.join(command)})\n", flush=True)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True, check=False)
    print(proc.stdout, flush=True)
    if proc.returncode != 0:
        print(f"FAILED ({proc.returncode}):\n{proc.stderr[-3000:]}", flush=True)
    print(f"({time.monotonic() - started:.0f} s)", flush=True)
    return proc.stdout


def trio_ratios(chain: dict[str, Any]) -> list[str]:
    """Workload 5: tether under trio against tether under asyncio, from workload 1's samples."""
    lines = []
    for config, peers in chain["per_node"].items():
        asyncio_us, trio_us = peers["tether (asyncio)"], peers["tether (trio)"]
        name = f"chain-{chain['nodes']} {config} tether-trio/tether-asyncio"
        lines.append(f"ratio {name} = {statistics.median(trio_us) / statistics.median(asyncio_us):.2f}")
        lines.append(spread_line(name, paired_ratios(trio_us, asyncio_us)))
    return lines


def summary_lines(text: str) -> list[str]:
    """A workload's ratio lines, each with the spread line that follows it, in their order."""
    return [line.strip() for line in text.splitlines() if RATIO.match(line.strip()) or SPREAD.match(line.strip())]


def noisy_summary(outputs: list[tuple[str, str]]) -> list[str]:
    """Every workload's "noisy cells:" list, under the workload's title."""
    lines = []
    for title, text in outputs:
        found = noisy_lines(text)
        lines += [f"{title}: {found[0]}", *found[1:]] if found else [f"{title}: no {NOISY_HEADER!r} list (failed?)"]
    return lines


def plot(chain: dict[str, Any] | None, agent: dict[str, Any] | None, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    drawn = []
    if chain is not None:
        configs = list(chain["per_node"])
        peers = list(chain["per_node"][configs[0]])
        fig, ax = plt.subplots(figsize=(9, 4))
        width = 0.8 / len(peers)
        for k, peer in enumerate(peers):
            values = [statistics.median(chain["per_node"][c].get(peer, [0])) for c in configs]
            ax.bar([i + k * width for i in range(len(configs))], values, width, label=peer)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(configs))], configs)
        ax.set_ylabel("microseconds per durable step (median)")
        ax.set_title(f"a {chain['nodes']}-node line, checkpointed at every node")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / "bench-per-step.png"
        fig.savefig(path, dpi=110)
        drawn.append(path)
    if agent is not None:
        fig, ax = plt.subplots(figsize=(6, 4))
        for peer, sizes in agent["bytes"].items():
            ax.plot(agent["turns"], [s / 1024 for s in sizes], marker="o", label=peer)
        ax.set_xlabel("agent turns (one tool call each)")
        ax.set_ylabel("KiB stored")
        ax.set_title("storage growth with the run's length")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / "bench-storage.png"
        fig.savefig(path, dpi=110)
        drawn.append(path)
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a reduced set, under 5 minutes here")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin DSN; each run uses a schema of its own ('' to skip Postgres)")
    parser.add_argument("--out", help="write the whole report (Markdown) to this file")
    parser.add_argument("--plots", help="draw PNG plots into this directory")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    started = time.monotonic()
    outputs = [(title, run(title, command)) for title, command in workloads(args.quick, args.postgres, tmp)]
    chain = json.loads((tmp / "chain.json").read_text()) if (tmp / "chain.json").exists() else None
    agent = json.loads((tmp / "agent.json").read_text()) if (tmp / "agent.json").exists() else None
    ratios = [line for _, text in outputs for line in summary_lines(text)]
    if chain is not None:
        extra = trio_ratios(chain)
        print("\n## 5. tether under trio\n\n" + "\n".join(extra), flush=True)
        ratios += extra
    noisy = noisy_summary(outputs)
    print("\n## every ratio in this run\n\n" + "\n".join(ratios), flush=True)
    print("\nnoisy cells (spread max-min above the median), per workload:\n" + "\n".join(noisy), flush=True)
    if args.plots:
        for path in plot(chain, agent, Path(args.plots)):
            print(f"plot: {path}")
    if args.out:
        parts = [(f"# tether benchmarks ({'quick' if args.quick else 'full'} run, "
                 f"{time.strftime('%Y-%m-%d')}, {time.monotonic() - started:.0f} s)\n")]
        parts += [f"## {title}\n{text}" for title, text in outputs]
        parts.append("## every ratio in this run\n\n```\n" + "\n".join(ratios) + "\n\n" + "\n".join(noisy) + "\n```\n")
        Path(args.out).write_text("\n".join(parts))
        print(f"report: {args.out}")
    print(f"\nbench: {time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
