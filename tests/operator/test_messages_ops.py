"""Messages from another process: ``tether send``, ``POST .../messages``, and a worker woken by one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from tether.runtime import events
from tether.runtime.ops._cli import main
from tether.stores import Store, open_store

from ._flows import desk
from .test_http import serving

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.operator._flows:messaging"


def waiting_desk(url: str, execution_id: str, effects: Path) -> None:
    """A desk run to its wait, in a run of its own (as a process that then exits would)."""
    async def run() -> None:
        async with open_store(url) as store:
            desk.store = store
            result = await desk.run({"effects": str(effects)}, execution_id=execution_id)
            assert result.status == "paused"

    anyio.run(run)


def test_a_message_sent_while_no_process_runs_is_delivered_once_after_recovery(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    effects = tmp_path / "effects.txt"
    waiting_desk(url, "d-1", effects)
    code = main(["--store", url, "send", "d-1", "--set", "approved=true", "--set", "by=alice", "--app", APP])
    assert code == 0, capsys.readouterr().err
    assert "Sent to chain:desk of d-1" in capsys.readouterr().out
    bad = main(["--store", url, "send", "d-1", "--set", "approved=maybe", "--app", APP])
    assert bad == 2  # not an Approval: refused, nothing sent
    assert "Not a valid message: (nothing was sent)" in capsys.readouterr().err
    code = main(["--store", url, "recover", "d-1", "--app", APP, "--json"])
    assert (code, json.loads(capsys.readouterr().out)["status"]) == (0, "completed")
    assert effects.read_text().splitlines() == ["booked by alice"]


def test_a_worker_in_another_process_is_woken_by_a_message(url: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    waiting_desk(url, "d-2", effects)
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether.runtime.ops", "--store", url, "worker", "--app", APP,
         "--poll-interval", "0.2", "--grace", "10"],
        cwd=ROOT, env=dict(os.environ), stderr=subprocess.DEVNULL,
    )
    try:
        async def send_and_follow() -> str:
            async with open_store(url) as store:
                from tether.runtime import send_message

                await send_message(store, "d-2", {"approved": True, "by": "bob"}, by="test")
                async with events(store, "d-2", until="finished") as stream:
                    async for event in stream:
                        last = event.type
                return last

        assert anyio.run(send_and_follow) == "execution_completed"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    assert effects.read_text().splitlines() == ["booked by bob"]


async def test_the_api_takes_a_message_and_refuses_bad_ones(db_store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    desk.store = db_store
    assert (await desk.run({"effects": str(effects)}, execution_id="d-3")).status == "paused"
    journal = await db_store.read_journal("d-3")
    async with serving(db_store, [desk]) as client:
        for body, status in [(b"{oops", 400), (b"[1]", 422), (b'{"approved": "maybe"}', 422)]:
            answer = await client.post("/api/executions/d-3/messages", content=body,
                                       headers={"content-type": "application/json"})
            assert answer.status_code == status, answer.text
        assert (await client.post("/api/executions/d-3/messages", content=b"{}")).status_code == 415
        assert (await client.post("/api/executions/d-3/messages?path=chain:other",
                                  json={"approved": True, "by": "x"})).status_code == 404
        assert (await client.post("/api/executions/nope/messages", json={})).status_code == 404
        assert await db_store.read_journal("d-3") == journal  # nothing was sent
        sent = await client.post("/api/executions/d-3/messages", json={"approved": True, "by": "cy"})
        assert sent.status_code == 202, sent.text
        assert sent.json()["path"] == "chain:desk"
    assert (await desk.resume("d-3")).status == "completed"
    assert effects.read_text().splitlines() == ["booked by cy"]
