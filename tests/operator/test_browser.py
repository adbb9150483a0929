"""`tether serve` as a real server (uvicorn under asyncio, hypercorn under trio), driven by a real browser.

Headless Chromium (Debian's, /usr/bin/chromium, which .ci/run installs when it
is missing) through Playwright: open /approvals, approve, see the approval go
and the execution complete. Then two Approve requests at once: one 202, one 409.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import sync_playwright

from .conftest import start_paused

APP = "tests.operator._flows:runners"
CHROMIUM = "/usr/bin/chromium"
# Headless, as root, on a machine with no network beyond localhost.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(autouse=True)
def _chromium() -> None:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium); .ci/run does.")


@pytest.fixture(params=["asyncio", "trio"])
def server(request: pytest.FixtureRequest, url: str) -> Iterator[str]:
    """A ``tether serve`` process on a free port; yields its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "tether.runtime._cli", "--store", url, "--backend", request.param,
               "serve", "--app", APP, "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k != "TETHER_TOKEN"}
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:  # both servers say so once they listen
            if "Uvicorn running on" in line or "Running on" in line:
                break
        else:
            pytest.fail(f"tether serve exited with {proc.wait()} before listening")
        # Keep reading its log, or a full pipe would stall the server.
        drain = threading.Thread(target=proc.stderr.read, daemon=True)
        drain.start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.communicate(timeout=30)


def test_approve_in_a_real_browser(server: str, url: str, tmp_path: Path) -> None:
    start_paused(url, "b-1", note="<b>urgent</b>")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(f"{server}/approvals")
            card = page.locator("[data-testid=pending]")
            assert card.count() == 1
            assert card.locator("[data-testid=path]").inner_text() == "chain:refund/node:approve"
            assert card.locator("[data-testid=reason]").inner_text() == "manager_approval"
            assert '"note": "<b>urgent</b>"' in card.locator("[data-testid=context]").inner_text()  # shown as text
            card.locator("input[name=approver]").fill("alice")
            card.locator("input[name=note]").fill("fine by me")
            card.get_by_role("button", name="Approve").click()
            page.wait_for_url("**/approvals?flash=*")
            assert "b-1: approved." in page.get_by_role("status").inner_text()
            assert page.locator("[data-testid=pending]").count() == 0
            assert page.locator("#empty").is_visible()
            page.screenshot(path=str(tmp_path / "approvals.png"))

            # The run continues in the server process; the API's long poll answers once it settled.
            httpx.get(f"{server}/api/executions/b-1", params={"wait": 30}, timeout=60).raise_for_status()
            page.goto(f"{server}/executions/b-1")
            assert page.locator("[data-testid=status]").inner_text() == "completed"
            output = page.locator("[data-testid=output]").inner_text()
            assert '"approver": "alice"' in output and '"charged": 50000' in output
        finally:
            browser.close()


def test_two_approve_clicks_at_once(server: str, url: str) -> None:
    start_paused(url, "b-2")

    def click(approver: str) -> int:
        answer = httpx.post(f"{server}/api/executions/b-2/resume", timeout=30,
                            json={"approved": True, "metadata": {"approver": approver}})
        return answer.status_code

    with ThreadPoolExecutor(2) as pool:
        codes = sorted(pool.map(click, ["alice", "bob"]))
    assert codes == [202, 409]


def test_serve_refuses_to_listen_off_loopback_without_a_token(url: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "tether.runtime._cli", "--store", url, "serve",
                           "--host", "0.0.0.0", "--port", "1"],
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 1
    assert "without a token" in done.stderr and "TETHER_TOKEN" in done.stderr
