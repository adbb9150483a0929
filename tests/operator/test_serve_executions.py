"""An application's own process carries out decisions recorded by the CLI in another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import start_paused

APP = Path(__file__).with_name("_serving_app.py")
TETHER = str(Path(sys.executable).with_name("tether"))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_decision_made_anywhere_is_carried_out_by_the_application(url: str, backend: str) -> None:
    start_paused(url, "s-1")
    root = str(Path(__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    with subprocess.Popen([sys.executable, str(APP), url, backend], stderr=subprocess.PIPE, text=True,
                          env=env) as app:
        assert app.stderr is not None
        try:
            for line in app.stderr:
                if "serving decisions" in line:
                    break
            decided = subprocess.run([TETHER, "--store", url, "resume", "s-1", "--set", "approved=true",
                                      "--by", "bob"], capture_output=True, text=True, timeout=60, check=False)
            assert decided.returncode == 0, decided.stderr
            assert "No process here continues" in " ".join(decided.stdout.split())
            for line in app.stderr:  # the application takes it up (polling every 0.1 s on SQLite)
                if "ran s-1:" in line:
                    assert "ran s-1: completed" in line
                    break
            else:
                pytest.fail(f"the application exited with {app.wait()} before carrying the decision out")
        finally:
            app.terminate()
            app.communicate(timeout=30)
    shown = subprocess.run([TETHER, "--store", url, "show", "s-1", "--json"], capture_output=True, text=True,
                           timeout=60, check=True)
    view = json.loads(shown.stdout)
    assert view["execution"]["status"] == "completed"
    assert view["execution"]["result"]["charged"] == 50_000
    [resumed] = [e for e in view["journal"] if e["kind"] == "resumed"]
    assert resumed["payload"]["by"] == "bob"
