"""examples/mcp_tools.py runs as a user would run it: a real MCP server, a pause, a resume.

It runs on asyncio and on trio: two runs of the script as ``__main__``, one
after the other in one Python process, so the two share one start-up (each run
starts its own MCP server processes, as a user's does).
"""

from __future__ import annotations

from pathlib import Path

from tests._run_each import run_each

EXAMPLE = Path(__file__).parent.parent / "examples" / "mcp_tools.py"
BACKENDS = ["asyncio", "trio"]

def test_mcp_tools_example() -> None:
    runs = [["--backend", backend] for backend in BACKENDS]
    results, stderr = run_each(EXAMPLE, runs)
    for backend, (output, code) in zip(BACKENDS, results, strict=True):
        assert code == "0", f"{backend}: exited {code}\n{output}{stderr}"
        assert output.splitlines() == [
            "tools: lookup_order, refund",
            f"paused on {backend} at agent:orders/tool:refund, waiting for approve_refund",
            "completed: Refunded $120 for order A1.",
            "journaled: turn:1, turn:1/tool:lookup_order, turn:2, turn:2/tool:refund, turn:3",
            # Each call reached the server once, across the pause and the resume.
            "the server was called: lookup_order A1, refund A1 120",
        ], f"{backend}\n{stderr}"
