"""Run a script as ``python SCRIPT ARGS...`` several times in one Python process: one start-up for all.

Each run is the script run as ``__main__`` with its own ``sys.argv``; what it
printed and how it exited come back per run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

_RUN_EACH = r"""
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
_ENDED = re.compile(r"^=== run (\d+) exited (.*) ===\n", re.MULTILINE)


def run_each(script: Path, runs: list[list[str]], *, python_options: tuple[str, ...] = (),
             timeout: float = 120) -> tuple[list[tuple[str, str]], str]:
    """Each run's (output, exit code as printed), and the process's stderr."""
    done = subprocess.run([sys.executable, *python_options, "-c", _RUN_EACH, str(script), json.dumps(runs)],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    *parts, rest = _ENDED.split(done.stdout)  # each run's output, its number and its exit code, in turn
    assert rest == "", done.stdout
    outputs, numbers, codes = parts[0::3], parts[1::3], parts[2::3]
    assert numbers == [str(n) for n in range(len(runs))], done.stdout + done.stderr
    return list(zip(outputs, codes, strict=True)), done.stderr
