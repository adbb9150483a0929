"""What telemetry costs on the chain workload: off (the default), against the same code without it, and on.

    .venv/bin/python -m bench.telemetry [--baseline REV] [--rounds 15] [--nodes 200]

``--baseline`` is a commit without telemetry (default: the parent of the
commit that added it); its tree is exported to a temporary directory and
imported in place of this checkout's, so both run in the same interpreter and
venv. ``--tree`` measures another commit than this checkout the same way (the
one that added telemetry, say, to see its cost alone). Each round runs, in fresh processes and in shuffled order: the baseline,
this tree with telemetry off, and this tree with telemetry on (the SDK's
tracer and meter providers, spans batched to an exporter that drops them);
each process reports its best of 10 runs.
The workload is bench.chain's: a line of async nodes, each journaled, on
SQLite (WAL, synchronous=NORMAL: the fastest store, so the runtime's own cost
shows most) and in memory (nothing but the runtime). Reported: the median
microseconds per node of each, and the median over rounds of each round's
off / baseline and on / off: the runs of one round share the machine's noise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BASELINE = "aeff021"  # the last commit before telemetry

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
import anyio
from tether.actors import Chain
from tether.stores import MemoryStore, SQLiteStore

mode, nodes, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "on":
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from tether.runtime import telemetry

    class Dropped(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    telemetry.enable(provider, MeterProvider(metric_readers=[InMemoryMetricReader()]))

def line(count):
    def make(k):
        async def node(state):
            return {"n": state.get("n", 0) + 1}
        node.__name__ = f"n{k}"
        return node
    return [make(k) for k in range(count)]

async def main():
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore() if kind == "memory" else SQLiteStore(Path(tmp) / "t.db", synchronous="NORMAL")
        async with store:
            chain = Chain("line", line(nodes), store=store)
            await chain.run({}, execution_id="warm")
            timings = []
            for i in range(10):
                began = time.perf_counter()
                await chain.run({}, execution_id=f"r{i}")
                timings.append((time.perf_counter() - began) / nodes * 1e6)
            print(json.dumps(min(timings)))

anyio.run(main)
"""


def baseline_tree(revision: str, tmp: Path) -> Path:
    """``revision``'s packages, importable as ``tether`` from the returned directory."""
    tmp = tmp / revision
    tmp.mkdir()
    archive = tmp / "baseline.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), revision,
                    "actors", "runtime", "stores"], check=True)
    tree = tmp / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    site = tmp / "site" / "tether"
    site.mkdir(parents=True)
    for package in ("actors", "runtime", "stores"):
        (site / package).symlink_to(tree / package)
    return site.parent


def measure(mode: str, nodes: int, kind: str, path: Path | None) -> float:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("OTEL_", "TETHER_"))}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    out = subprocess.run([sys.executable, "-c", CHILD, "off" if mode == "baseline" else mode, str(nodes), kind],
                         env=env, capture_output=True, text=True, check=True)
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--tree", help="A commit to measure off and on instead of this checkout.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        baseline = baseline_tree(args.baseline, Path(tmp))
        measured = None if args.tree is None else baseline_tree(args.tree, Path(tmp))
        results: dict[str, dict[str, list[float]]] = {k: {"baseline": [], "off": [], "on": []}
                                                      for k in ("sqlite", "memory")}
        for _ in range(args.rounds):
            runs = [(kind, mode) for kind in results for mode in ("baseline", "off", "on")]
            random.shuffle(runs)
            for kind, mode in runs:
                results[kind][mode].append(measure(mode, args.nodes, kind, baseline if mode == "baseline" else measured))
    print(f"telemetry, a {args.nodes}-node chain, {args.rounds} rounds; baseline {args.baseline}, "
          f"measured {args.tree or 'this checkout'}")
    for kind, modes in results.items():
        median = {mode: statistics.median(values) for mode, values in modes.items()}
        # Paired within a round (the same minute of the machine's noise), then the median of the pairs.
        pairs = sorted(o / b for o, b in zip(modes["off"], modes["baseline"], strict=True))
        off = statistics.median(pairs)
        low, high = pairs[len(pairs) // 4], pairs[(3 * len(pairs)) // 4]
        on = statistics.median(o / f for o, f in zip(modes["on"], modes["off"], strict=True))
        print(f"  {kind:6}  baseline {median['baseline']:6.1f} us/node   off {median['off']:6.1f}   "
              f"on {median['on']:6.1f}   off/baseline {off:.3f} (quartiles {low:.3f}-{high:.3f})   on/off {on:.2f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
