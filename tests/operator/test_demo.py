"""`tether demo`: the quick start's story, in real processes, on SQLite and Postgres, both backends."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_demo_tells_the_whole_story(url: str, backend: str, tmp_path: Path) -> None:
    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tether.runtime.ops", "--store", url, "--backend", backend,
                               *args], capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)

    demo = tether("demo")
    assert demo.returncode == 0, demo.stderr
    story = demo.stdout
    assert "paused at supervisor:planner/worker:auditor/tool:approve_refund: manager_approval" in story
    assert "completed: Order R-7: R-7 is $50,000 for ACME; refunded $50,000" in story
    assert story.count("refund of $50,000 for R-7 sent") == 1
    assert "process B: $ refund of $50,000 for R-7 sent" in story
    # R-8's refund needs no approval: the auditor may send it before process C is killed, or
    # process D sends it. Either way the provider's ledger says it was sent once, and by whom;
    # a repeat after a kill between the refund and its record is dropped by its idempotency key.
    assert story.count("refund of $900 for R-8 sent") == 1
    assert re.search(r"process [CD]: \$ refund of \$900 for R-8 sent", story)
    assert story.count("refund of $900 for R-8 asked again") == story.count("dropped the repeat")
    assert "refused with AlreadyResumed" in story
    assert "process C died inside the researcher's lookup_order tool" in story
    assert "process D recovered it: completed: Order R-8" in story
    # Neither continuation asked the planner to decide its delegations again.
    assert story.count("the planner's LLM was asked 1 time") == 2

    first = re.search(r"tether(?: --store \S+)? show (\S+)", story)
    assert first is not None
    shown = tether("show", first.group(1), "--json")
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["execution"]["status"] == "completed"
    assert {"delegate:1", "delegate:2", "reply:1", "reply:2"} <= {e["label"] for e in view["journal"]}
