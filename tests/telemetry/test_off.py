"""Telemetry off costs nothing: no OpenTelemetry module imported, nothing measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


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


MISSING = """
import logging, sys
import anyio
sys.modules["opentelemetry"] = None  # as if tether[otel] were not installed
logging.basicConfig(format="%(name)s %(levelname)s %(message)s")
from tether.actors import Chain
from tether.stores import MemoryStore

async def main():
    for n in range(2):
        print((await Chain("plain", [lambda state: {"ok": True}], store=MemoryStore()).run({}, execution_id="x")).status)

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_otel_variables_without_the_extra_leave_telemetry_off_with_one_warning(backend: str) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("OTEL_", "TETHER_TELEMETRY"))}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    child = subprocess.run([sys.executable, "-c", MISSING, backend], env=env, capture_output=True, text=True,
                           timeout=120, check=False)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["completed", "completed"]
    warning = ("tether.runtime WARNING telemetry stays off: Telemetry needs OpenTelemetry, which is not installed "
               "here: pip install 'tether[otel]'.")
    assert child.stderr.splitlines() == [warning]  # once, however many runs
