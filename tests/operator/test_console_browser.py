"""The console in headless Chromium against a real ``tether serve``, on SQLite and Postgres, under both backends.

A token made with the installed ``tether tokens create``, limited to approving
under ``supervisor:planner/``, logs in; finds the planner's run with the filter
form (keyboard only); opens it; sees its actor tree with the paused tool marked;
approves from that page. An admin watches another run's page while a decision is
made from another process, and the timeline grows without a reload. Bulk
approval asks first. Each page is screenshotted (into ``$TETHER_SCREENSHOTS``
when set: that is how docs/operator.md's pictures are made), must fit 1024 px
without scrolling sideways, and labels every field.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest
from playwright.sync_api import Page, expect

from ._console_app import PLANNER_PATH, start_planner
from .conftest import start_paused
from .test_browser import backend, chromium, serving

__all__ = ["backend"]  # the fixture, shared with the other browser tests

ADMIN = "console-admin-token"
APP = "tests.operator._console_app:runners"
HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go: ``$TETHER_SCREENSHOTS`` (the docs' pictures) or the test's own directory."""
    return Path(os.environ.get("TETHER_SCREENSHOTS") or tmp_path)


def tether(url: str, *args: str) -> str:
    """The installed ``tether`` command on ``url``: what it printed on stdout."""
    done = subprocess.run([sys.executable, "-m", "tether.runtime.ops", "--store", url, *args],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def log_in(page: Page, base: str, secret: str) -> None:
    page.goto(f"{base}/login")
    page.get_by_label("token").fill(secret)
    with page.expect_navigation(url="**/executions"):
        page.get_by_label("token").press("Enter")


def fits_and_labels(page: Page) -> None:
    """No sideways scroll at the page's width, and every field a person fills has a label."""
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"), page.url
    unlabelled = page.evaluate("""[...document.querySelectorAll('input:not([type=hidden]), select')]
        .filter(el => !el.labels || el.labels.length === 0).map(el => el.name)""")
    assert unlabelled == [], (page.url, unlabelled)


def test_find_open_and_approve_with_a_scoped_token(url: str, backend: str, shots: Path) -> None:
    anyio.run(start_planner, url, "plan-1")
    for n in range(3):
        start_paused(url, f"refund-{n}", note=HOSTILE)
    secret = tether(url, "tokens", "create", "support", "--scope", "approve", "--path", "supervisor:planner/").strip()
    assert secret.startswith("tether_")
    alerts: list[str] = []
    with serving(url, backend, "--app", APP, "--token", ADMIN) as served, chromium() as browser:
        page = browser.new_page(viewport={"width": 1024, "height": 900})
        page.on("dialog", lambda dialog: (alerts.append(dialog.message), dialog.dismiss()))
        log_in(page, served.base, secret)
        expect(page.get_by_test_id("who")).to_have_text("support")
        assert page.locator("[data-testid=execution-row]").count() == 4
        fits_and_labels(page)
        page.screenshot(path=str(shots / "console-executions.png"), full_page=True)

        # Keyboard only: the skip link first, then the filter's fields in order, Enter submits.
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to the content"
        page.get_by_label("runner").focus()
        page.keyboard.type("supervisor:planner")
        with page.expect_navigation(url="**/executions?*runner=supervisor%3Aplanner*"):
            page.keyboard.press("Enter")
        rows = page.locator("[data-testid=execution-row]")
        assert rows.count() == 1
        rows.get_by_role("link", name="plan-1").click()
        page.wait_for_url("**/executions/plan-1")

        waiting = page.locator(f"[data-testid=actor][data-path='{PLANNER_PATH}']")
        expect(waiting.locator("[data-testid=waiting]").first).to_contain_text("manager_approval")
        assert page.locator("[data-testid=actor]").count() >= 3  # the planner, its auditor worker, the tool
        fits_and_labels(page)
        page.screenshot(path=str(shots / "console-execution.png"), full_page=True)

        # A state a click away: the first boundary's.
        page.get_by_role("link", name="state as of boundary 1").click()
        expect(page.get_by_test_id("state")).to_be_visible()

        card = page.locator("#pending [data-testid=pending]")
        card.get_by_label("note").fill("within policy")
        with page.expect_navigation(url="**/executions/plan-1"):
            card.get_by_role("button", name="Approve", exact=True).click()
        expect(page.get_by_role("status")).to_have_text("plan-1: approved.")

        # The refunds are outside its prefix: shown, not decidable, and no bulk for them.
        page.goto(f"{served.base}/approvals")
        assert page.locator("[data-testid=not-yours]").count() == 3
        assert page.get_by_role("button", name="Approve", exact=True).count() == 0
        assert page.locator("form[action$='/approvals/bulk']").count() == 0
        fits_and_labels(page)
    assert alerts == []  # the hostile note stayed text on every page
    view = tether(url, "show", "plan-1", "--json")
    assert '"by": "page:support"' in view
    pending = tether(url, "pending", "--json")
    assert pending.count('"execution_id": "refund-') == 3


def test_the_page_follows_a_decision_made_in_another_process(url: str, backend: str, shots: Path) -> None:
    start_paused(url, "live-1")
    # No --app: this server continues nothing, so every new row comes from another process.
    with serving(url, backend, "--token", ADMIN) as served, chromium() as browser:
        page = browser.new_page(viewport={"width": 1024, "height": 900})
        refused: list[str] = []  # what the content policy blocked: nothing may be
        page.on("console", lambda message: refused.append(message.text)
                if "Content Security Policy" in message.text else None)
        log_in(page, served.base, ADMIN)
        with page.expect_response(lambda answer: answer.url.split("?")[0].endswith("/events")):
            page.goto(f"{served.base}/executions/{quote('live-1', safe='')}")
        expect(page.locator("h1 + p [data-testid=status]")).to_have_text("paused")
        tether(url, "resume", "live-1", "--set", "approved=true", "--detach", "--by", "cli:carol")
        expect(page.locator("[data-testid=live]").first).to_contain_text("chain:refund/node:approve")
        expect(page.locator("h1 + p [data-testid=status]")).to_have_text("decided")
        expect(page.locator("#pending [data-testid=pending]")).to_have_count(0)
        expect(page.locator("[data-testid=waiting]")).to_have_count(0)  # the tree no longer marks it
        expect(page.locator("#pending")).to_have_text("Nothing.")
        page.screenshot(path=str(shots / "console-live.png"), full_page=True)
        # Under the policy the style block applied (the body's margin is the page's, not the browser's
        # 8px) and the script ran (the rows above came from it); nothing was blocked.
        assert page.evaluate("getComputedStyle(document.body).margin") == "0px"
        assert refused == []


def test_bulk_approval_asks_first(url: str, backend: str, shots: Path) -> None:
    for n in range(3):
        start_paused(url, f"bulk-{n}")
    with serving(url, backend, "--app", APP, "--token", ADMIN) as served, chromium() as browser:
        page = browser.new_page(viewport={"width": 1024, "height": 900})
        log_in(page, served.base, ADMIN)
        page.goto(f"{served.base}/approvals")
        expect(page.locator("[data-testid=group]")).to_have_count(1)  # all three wait at one actor
        approve, reject = (page.get_by_role("button", name=name, exact=True).first for name in ("Approve", "Reject"))
        assert approve.evaluate("b => getComputedStyle(b).backgroundColor") != \
            reject.evaluate("b => getComputedStyle(b).backgroundColor")
        fits_and_labels(page)
        page.screenshot(path=str(shots / "console-approvals.png"), full_page=True)
        for box in page.get_by_label("select").all()[:2]:
            box.check()
        with page.expect_navigation():
            page.get_by_role("button", name="Approve the selected").click()
        expect(page.locator("[data-testid=chosen]")).to_have_count(2)
        assert tether(url, "pending", "--json").count('"execution_id"') == 3  # nothing yet
        page.screenshot(path=str(shots / "console-confirm.png"), full_page=True)
        page.get_by_label("approver").fill("dana")
        with page.expect_navigation(url="**/approvals"):
            page.get_by_role("button", name="Approve 2").click()
        expect(page.get_by_role("status")).to_have_text("Approved 2 of 2.")
        expect(page.locator("[data-testid=pending]")).to_have_count(1)
