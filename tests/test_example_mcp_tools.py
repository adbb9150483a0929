"""examples/mcp_tools.py runs as a user would run it: a real MCP server, a pause, a resume.

It runs on asyncio and on trio: two runs of the script as ``__main__``, one
after the other in one Python process, so the two share one start-up (each run
starts its own MCP server processes, as a user's does).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parent.parent / "examples" / "mcp_tools.py"
BACKENDS = ["asyncio", "trio"]

# Runs the script as `python SCRIPT ARGS...` would, once per ARGS, and says after each how it exited.
RUN_EACH = r"""
import json, runpy, sys
script = sys.argv[1]
for n, args in enumerate(json.loads(sys.argv[2])):
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exit:
        code = exit.code
    print(f"=== run {n} exited {code!r} ===", flush=True)
"""
ENDED = re.compile(r"^=== run (\d+) exited (.*) ===\n", re.MULTILINE)


def test_mcp_tools_example() -> None:
    runs = [["--backend", backend] for backend in BACKENDS]
    done = subprocess.run([sys.executable, "-c", RUN_EACH, str(EXAMPLE), json.dumps(runs)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    *parts, rest = ENDED.split(done.stdout)  # each run's output, its number and its exit code, in turn
    assert rest == "", done.stdout
    outputs, numbers, codes = parts[0::3], parts[1::3], parts[2::3]
    assert numbers == [str(n) for n in range(len(BACKENDS))], done.stdout + done.stderr
    for backend, output, code in zip(BACKENDS, outputs, codes, strict=True):
        assert code == "0", f"{backend}: exited {code}\n{output}{done.stderr}"
        assert output.splitlines() == [
            "tools: lookup_order, refund",
            f"paused on {backend} at agent:orders/tool:refund, waiting for approve_refund",
            "completed: Refunded $120 for order A1.",
            "journaled: turn:1, turn:1/tool:lookup_order, turn:2, turn:2/tool:refund, turn:3",
            # Each call reached the server once, across the pause and the resume.
            "the server was called: lookup_order A1, refund A1 120",
        ], f"{backend}\n{done.stderr}"
