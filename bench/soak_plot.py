"""Draw the soak's RSS and open-fd samples (tests/soak) as one PNG for docs/reliability.md.

    .venv-bench/bin/python -m bench.soak_plot OUT/sqlite-3600s/samples.csv OUT/postgres-3600s/samples.csv \
        --plot docs/soak.png

Each CSV is the ``samples.csv`` a soak run wrote to TETHER_SOAK_OUT (columns
store, t, process, pid, rss_kb, fds). One line per store and long-lived process;
the shaded bands are the windows the test compares (20-40 % and the last 20 %).
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path


def load(paths: list[Path]) -> dict[str, list[tuple[float, float, int]]]:
    """``{"store/process": [(minutes, rss MB, fds), ...]}`` from the CSVs."""
    series: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for path in paths:
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                series[f"{row['store']} / {row['process']}"].append(
                    (float(row["t"]) / 60, int(row["rss_kb"]) / 1024, int(row["fds"])))
    return dict(series)


def plot(series: dict[str, list[tuple[float, float, int]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rss, fds) = plt.subplots(1, 2, figsize=(12, 4))
    for name, points in sorted(series.items()):
        minutes = [p[0] for p in points]
        rss.plot(minutes, [p[1] for p in points], label=name, linewidth=1.2)
        fds.plot(minutes, [p[2] for p in points], label=name, linewidth=1.2)
    end = max((p[0] for points in series.values() for p in points), default=0.0)
    for axis in (rss, fds):
        axis.axvspan(0.2 * end, 0.4 * end, color="grey", alpha=0.12)
        axis.axvspan(0.8 * end, end, color="grey", alpha=0.25)
        axis.set_xlabel("minutes")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    rss.set_ylabel("RSS, MB")
    rss.set_title("resident memory of the long-lived processes")
    fds.set_ylabel("open file descriptors")
    fds.set_title("open file descriptors")
    fds.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples", nargs="+", type=Path, help="samples.csv files of soak runs")
    parser.add_argument("--plot", type=Path, default=Path("soak.png"), help="the PNG to write")
    args = parser.parse_args()
    plot(load(args.samples), args.plot)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
