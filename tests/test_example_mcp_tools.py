"""examples/mcp_tools.py runs as a user would run it: a real MCP server, a pause, a resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent.parent / "examples" / "mcp_tools.py"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_mcp_tools_example(backend: str) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLE), "--backend", backend], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "tools: lookup_order, refund",
        f"paused on {backend} at agent:orders/tool:refund, waiting for approve_refund",
        "completed: Refunded $120 for order A1.",
        "journaled: turn:1, turn:1/tool:lookup_order, turn:2, turn:2/tool:refund, turn:3",
        # Each call reached the server once, across the pause and the resume.
        "the server was called: lookup_order A1, refund A1 120",
    ]
