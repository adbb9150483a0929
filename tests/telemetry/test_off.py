"""Telemetry off costs nothing: no OpenTelemetry module imported, nothing measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_off_imports_no_opentelemetry_module_and_measures_nothing(tmp_path: Path) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("OTEL_", "TETHER_TELEMETRY"))}
    child = subprocess.run([sys.executable, str(Path(__file__).with_name("_off_child.py")), str(tmp_path / "off.db")],
                           env=env, capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == {
        "plain-asyncio": ["completed", []], "plain-trio": ["completed", []],
        "switched-off-asyncio": ["completed", []], "switched-off-trio": ["completed", []],
        "no-provider-asyncio": ["completed", True], "no-provider-trio": ["completed", True],
    }
