"""``tether history`` and ``tether fork`` through the installed script, in processes of their own."""

from __future__ import annotations

import json
import os
import signal
import subprocess

from tests.operator._two_pauses import AUDITOR, SECURITY
from tests.operator.test_cli_operator import APP, ROOT, TETHER, journal, shell, start_two_pauses


def test_history_lists_the_boundaries_and_fork_starts_a_run_from_one(url: str) -> None:
    start_two_pauses(url, "job")
    before = journal(url, "job")
    code, out, err = shell("history", "job", "--json", store=url)
    assert code == 0, err
    boundaries = json.loads(out)
    assert [b["seq"] for b in boundaries] == list(range(1, len(before) + 1))
    [start] = [b for b in boundaries if b["label"] == "inbox" and b["path"] == "supervisor:planner"]
    assert start["value"]["type"] == "Start"
    code, out, _ = shell("history", "job", store=url)  # the table names every boundary
    assert code == 0 and all(b["label"] in out for b in boundaries)

    # Forked at its very first boundary and run here: it pauses again at both tools, as the original did.
    code, out, err = shell("fork", "job", "--at", str(start["seq"]), "--as", "job-2", "--app", APP, "--json",
                           store=url)
    assert code == 0, err
    forked = json.loads(out)
    assert forked["status"] == "paused"
    assert sorted(p["agent_path"] for p in forked["pending"]) == [AUDITOR, SECURITY]
    assert journal(url, "job") == before  # the original is as it was
    code, out, _ = shell("show", "job-2", store=url)
    assert code == 0 and f"forked from job at {start['seq']} (inbox)" in out

    # Without --app the fork is only recorded, for a worker or `tether recover` to continue.
    code, out, err = shell("fork", "job", "--at", "1", "--as", "job-3", "--json", store=url)
    assert code == 0, err
    assert json.loads(out)["status"] == "running"


def test_a_fork_that_cannot_be_is_refused_with_what_to_do(url: str) -> None:
    start_two_pauses(url, "job")
    code, _, err = shell("fork", "job", "--at", "node:nowhere", "--as", "x", store=url)
    assert code != 0 and "no boundary 'node:nowhere'" in err and "tether history job" in err
    code, _, err = shell("fork", "job", "--at", "1", "--as", "job", store=url)
    assert code != 0 and "'job' already exists" in err
    code, _, err = shell("fork", "job", "--at", "1", "--as", "y", "--update", "{oops", store=url)
    assert code != 0 and "not JSON" in err
    code, _, err = shell("fork", "nobody", "--at", "1", "--as", "z", store=url)
    assert code != 0 and "nobody" in err
    code, out, _ = shell("executions", "--json", store=url)
    assert sorted(e["execution_id"] for e in json.loads(out)) == ["job"]  # nothing was created


def test_a_fork_killed_before_its_journal_is_written_never_runs_and_is_made_again(url: str) -> None:
    start_two_pauses(url, "job")
    env = {**os.environ, "TETHER_STORE": url, "TETHER_FAULTS": "fork_started"}
    killed = subprocess.run([TETHER, "fork", "job", "--at", "1", "--as", "job-k"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert killed.returncode == -signal.SIGKILL
    assert journal(url, "job-k") == []  # the row is there, and nothing of its journal
    # No process runs it from its start, which would do the original's effects again.
    code, _, err = shell("recover", "job-k", "--app", APP, store=url)
    assert code != 0 and "a fork that was never finished" in err and "Fork again with the same id" in err
    assert journal(url, "job-k") == []
    # The same fork, asked again, is made (the dead process's lease is taken over).
    code, out, err = shell("fork", "job", "--at", "1", "--as", "job-k", "--json", store=url)
    assert code == 0, err
    [first] = journal(url, "job")[:1]
    forked = journal(url, "job-k")
    assert [(e.seq, e.label) for e in forked] == [(1, first.label), (2, "fork")]
    code, out, err = shell("show", "job-k", "--json", store=url)
    assert json.loads(out)["execution"]["version"] == ""
