"""examples/telemetry.py, run as a user runs it: one trace across the run and its resume, drawn as a page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent.parent / "examples" / "telemetry.py"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_example_prints_one_trace_and_draws_it(backend: str, tmp_path: Path) -> None:
    page = tmp_path / "trace.html"
    done = subprocess.run([sys.executable, str(EXAMPLE), "--backend", backend, "--html", str(page)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "run: paused, waiting at supervisor:planner/worker:auditor/tool:approve_refund"
    assert lines[1] == "resume: completed, 'R1 is fine.'"
    assert lines[3] == "one trace, 28 spans, 1 trace id:"
    assert "run Supervisor[planner]  [tether.status=paused]" in lines
    assert "  resume Supervisor[planner]  [tether.status=completed]" in lines  # a child of the run
    drawn = page.read_text()
    assert drawn.count("<tr>") == 28 and "execute_tool approve_refund" in drawn
