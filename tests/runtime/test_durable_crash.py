"""A durable actor killed with SIGKILL mid-stream: nothing acknowledged is lost or applied twice."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("_ledger_child.py")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_sigkill_mid_stream(kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if kind == "sqlite":
        url, extra = f"sqlite:///{tmp_path / 'ledger.db'}", []
    else:
        url, extra = request.getfixturevalue("postgres_dsn"), [request.getfixturevalue("pg_schema")]
    kill_after = random.Random(f"{kind}-{backend}").randint(20, 120)

    with subprocess.Popen([sys.executable, str(CHILD), url, backend, "stream", "1", *extra],
                          stdout=subprocess.PIPE, text=True) as streamer:
        assert streamer.stdout is not None
        acked = 0
        for line in streamer.stdout:
            acked = int(line.split()[1])
            if acked >= kill_after:
                streamer.send_signal(signal.SIGKILL)
                break
        streamer.wait(timeout=30)
    assert streamer.returncode == -signal.SIGKILL
    assert acked == kill_after

    report = subprocess.run([sys.executable, str(CHILD), url, backend, "report", *extra],
                            capture_output=True, text=True, timeout=60, check=False)
    assert report.returncode == 0, report.stderr
    state = json.loads(report.stdout)
    deposits = state["deposits"]
    # Every acknowledged deposit is there once, in order; a deposit journaled but not yet
    # acknowledged when the process died may follow, also once.
    assert deposits == list(range(1, len(deposits) + 1))
    assert len(deposits) >= acked
    assert state["balance"] == sum(deposits)
