"""Kill at every boundary: each runner's reference run, then one run per journal write, SIGKILLed right
after that write, recovered in another process (itself killed again at random, up to three crashes).

Every final result must equal the uncrashed reference, and every ``@idempotent``
side effect must have happened exactly once where it lands: a SQLite file outside
the store, which deduplicates by `idempotency_key()` as a payment provider would
(a kill between an effect and tether's record of it re-runs the function with the
same key). A run is only complete with nothing pending. A reduced set runs in every CI run; ``pytest -m
torture`` sweeps every scenario on both databases and both backends.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COUNT_ONLY = "write:1000000000"  # armed, so writes are counted, but never reached


@dataclass
class Tally:
    kills: int = 0
    recovered: int = 0
    mismatches: int = 0

    def line(self) -> str:
        return f"torture: {self.kills} kills, {self.recovered} recovered, {self.mismatches} mismatches"


class Sweep:
    def __init__(self, scenario: str, backend: str, tmp: Path, fresh_store: Any) -> None:
        self.scenario, self.backend, self.tmp, self.fresh_store = scenario, backend, tmp, fresh_store

    def child(self, url: str, schema: str | None, mode: str, effects: Path, faults: str) -> tuple[int, Any]:
        command = [sys.executable, "-m", "tests.torture._child", url, self.backend, self.scenario, mode, "run-1",
                   str(effects), *([schema] if schema else [])]
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "TETHER_FAULTS": faults},
                              capture_output=True, text=True, timeout=120, check=False)
        if done.returncode == -signal.SIGKILL:
            return done.returncode, None
        assert done.returncode == 0, done.stderr
        return 0, json.loads(done.stdout.strip().splitlines()[-1])

    def effects(self) -> Path:
        path = self.tmp / f"effects-{uuid.uuid4().hex[:8]}.db"
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE effects (key TEXT PRIMARY KEY, name TEXT)")
            db.execute("CREATE TABLE attempts (name TEXT)")
        return path

    def finish(self, url: str, schema: str | None, effects: Path, mode: str, faults: str) -> tuple[int, Any]:
        """Carry a run on to its end (approving a pause), through the armed faults."""
        code, result = self.child(url, schema, mode, effects, faults)
        if code == 0 and result["status"] == "paused":
            return self.child(url, schema, "approve", effects, faults)
        return code, result

    def reference(self) -> tuple[Any, Counter[str], int]:
        url, schema = self.fresh_store()
        effects = self.effects()
        code, first = self.child(url, schema, "run", effects, COUNT_ONLY)
        assert code == 0
        writes = first["writes"]
        if first["status"] == "paused":
            code, final = self.child(url, schema, "approve", effects, COUNT_ONLY)
            assert code == 0
        else:
            final = first
        assert final["status"] == "completed", final
        return final["output"], done(effects), writes

    def run(self, crashes: int, rng: random.Random) -> Tally:
        expected, expected_done, writes = self.reference()
        tally = Tally()
        for k in range(1, writes + 1):
            url, schema = self.fresh_store()
            effects = self.effects()
            code, result = self.child(url, schema, "run", effects, f"write:{k}")
            assert code == -signal.SIGKILL, f"write {k} of {writes} was never reached"
            tally.kills += 1
            for _ in range(crashes - 1):  # killed again, somewhere later in its recovery
                code, result = self.finish(url, schema, effects, "recover", f"write:{rng.randint(1, writes)}")
                if code != -signal.SIGKILL:
                    break
                tally.kills += 1
            if code == -signal.SIGKILL or result is None or result["status"] != "completed":
                code, result = self.finish(url, schema, effects, "recover", "")
            tally.recovered += 1
            same = (result["status"] == "completed" and result["output"] == expected
                    and done(effects) == expected_done)
            tally.mismatches += not same
            assert same, (f"{self.scenario}: killed after write {k}: {result} against {expected}, "
                          f"side effects {done(effects)} against {expected_done}")
        return tally


def done(effects: Path) -> Counter[str]:
    """Side effects that happened, as the outside system saw them: one per idempotency key."""
    with sqlite3.connect(effects) as db:
        return Counter(row[0] for row in db.execute("SELECT name FROM effects"))


def sqlite_stores(tmp: Path, query: str = "") -> Any:
    def fresh() -> tuple[str, str | None]:
        return f"sqlite:///{tmp / f'torture-{uuid.uuid4().hex[:8]}.db'}{query}", None

    return fresh


def postgres_stores(request: pytest.FixtureRequest) -> Any:
    dsn = request.getfixturevalue("postgres_dsn")

    def fresh() -> tuple[str, str | None]:
        return dsn, f"t_{uuid.uuid4().hex[:12]}"

    return fresh


@pytest.mark.parametrize("scenario", ["line", "fanout", "agent"])
def test_every_boundary_recovers(scenario: str, tmp_path: Path) -> None:
    """The reduced set: one crash per run, SQLite, asyncio."""
    tally = Sweep(scenario, "asyncio", tmp_path, sqlite_stores(tmp_path)).run(crashes=1, rng=random.Random(1))
    print(tally.line())
    assert tally.mismatches == 0
    assert tally.kills > 0


@pytest.mark.torture
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("database", ["sqlite", "sqlite-normal", "postgres"])
@pytest.mark.parametrize("scenario", ["line", "fanout", "route", "cycle", "approval", "agent", "swarm", "supervisor"])
def test_torture_sweep(scenario: str, database: str, backend: str, tmp_path: Path,
                       request: pytest.FixtureRequest) -> None:
    """Every scenario, both databases (SQLite at FULL and NORMAL), both backends, up to three crashes per run."""
    if database == "postgres":
        stores = postgres_stores(request)
    else:  # at NORMAL, uncontended commits are made on the loop's thread
        stores = sqlite_stores(tmp_path, "?synchronous=NORMAL" if database == "sqlite-normal" else "")
    tally = Sweep(scenario, backend, tmp_path, stores).run(crashes=3, rng=random.Random(f"{scenario}{database}"))
    print(tally.line())
    assert tally.mismatches == 0


@pytest.mark.parametrize("scenario", ["line", "agent"])
def test_a_kill_between_a_side_effect_and_its_record(scenario: str, tmp_path: Path) -> None:
    """The gap idempotency keys close: the function runs again, with the same key, and the outside
    system (which deduplicates by key, as a payment provider does) sees the effect once."""
    sweep = Sweep(scenario, "asyncio", tmp_path, sqlite_stores(tmp_path))
    expected, expected_done, _ = sweep.reference()
    url, schema = sweep.fresh_store()
    effects = sweep.effects()
    code, _ = sweep.child(url, schema, "run", effects, "before_record")
    assert code == -signal.SIGKILL
    assert sum(attempts(effects).values()) == 1  # the effect happened, its record did not
    code, result = sweep.finish(url, schema, effects, "recover", "")
    assert code == 0
    assert result["output"] == expected
    assert done(effects) == expected_done  # once, as the outside system saw it
    assert sum(attempts(effects).values()) == sum(expected_done.values()) + 1  # the one repeat, deduplicated


def attempts(effects: Path) -> Counter[str]:
    with sqlite3.connect(effects) as db:
        return Counter(row[0] for row in db.execute("SELECT name FROM attempts"))
