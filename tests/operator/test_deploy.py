"""A deploy, in processes: 50 runs paused on v1 live through v2's arrival, then migrate to it and finish.

Every step is a process of its own (tests/operator/_versions_app.py, the installed
``tether`` script), on SQLite and Postgres, under asyncio and trio.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.operator.test_cli_operator import ROOT, shell

APP = Path(__file__).with_name("_versions_app.py")
MODULE = "tests.operator._versions_app"
APPROVE, SIGN_OFF, AUDIT = "chain:refund/node:approve", "chain:refund/node:sign_off", "chain:refund/node:audit"


def step(url: str, backend: str, mode: str, app: str, *args: str) -> Any:
    done = subprocess.run([sys.executable, str(APP), url, backend, mode, app, *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_fifty_paused_runs_live_through_a_deploy_and_migrate(url: str, anyio_backend: str) -> None:
    paused = step(url, anyio_backend, "start", "v1", "50")
    assert sorted(set(paused.values())) == [APPROVE, AUDIT]  # paused in two places
    ids = sorted(paused)

    # A process with only v2 refuses every v1 run, naming the change; nothing is claimed.
    refused = step(url, anyio_backend, "refuse", "v2")
    assert sorted(refused) == ids
    for message in refused.values():
        assert "is on version '1'" in message and "node 'approve'" in message
        assert "removed or renamed" in message and "--to 2" in message

    # A process with both: half the old runs finish on v1 while new runs start on v2.
    first_half = ids[:25]
    served = step(url, anyio_backend, "serve", "both", *first_half)
    assert served["outputs"] == {i: {**served["outputs"][i], "charged": "v1"} for i in first_half}
    assert all("signed" not in output for output in served["outputs"].values())
    assert served["started"] == {f"new-{n}": [SIGN_OFF, "2"] for n in range(5)}

    # The rest move to v2: a dry run first, which writes nothing; then the migration, once.
    code, out, err = shell("migrate", "--all", "--from", "1", "--to", "2", "--app", f"{MODULE}:v2",
                           "--dry-run", "--json", store=url)
    assert code == 0, err
    preview = json.loads(out)
    assert sorted(r["execution_id"] for r in preview) == ids[25:] and not any(r["written"] for r in preview)
    assert step(url, anyio_backend, "refuse", "v2").keys() == set(ids[25:])  # still v1, still refused
    code, out, err = shell("migrate", "--all", "--from", "1", "--to", "2", "--app", f"{MODULE}:v2", store=url)
    assert code == 0, err
    assert out.count("moved from version '1' to '2': renamed node:approve to node:sign_off") == 25

    finished = step(url, anyio_backend, "finish", "v2")
    assert sorted(finished) == sorted([*ids[25:], *(f"new-{n}" for n in range(5))])
    assert all(output["charged"] == "v2" for output in finished.values())
    code, out, err = shell("show", ids[-1], store=url)
    assert code == 0 and "version 2" in out and "migrated" in out


def test_migrating_to_a_version_no_process_has_is_refused(url: str, anyio_backend: str) -> None:
    step(url, anyio_backend, "start", "v1", "1")
    code, out, err = shell("migrate", "d-00", "--to", "3", "--app", f"{MODULE}:both", store=url)
    assert code != 0
    assert "No runner of chain:refund at version '3' here (versions here: '1', '2')" in err
    code, out, err = shell("migrate", "d-00", "--to", "2", store=url)
    assert code != 0 and "--app" in err
    code, out, err = shell("show", "d-00", "--json", store=url)
    assert json.loads(out)["execution"]["version"] == "1"
