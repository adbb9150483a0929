"""Following an execution from outside its process: SSE, the live timeline page, `tether watch`.

Each starts from a refund chain paused at its approval and has it decided by
another process (``tether resume --app``, which carries the run to its end):

- ``GET /api/executions/{id}/events`` of a real ``tether serve`` read with a real
  SSE client (httpx-sse): the events through the pause, a disconnect, the decision
  elsewhere, a reconnect with ``Last-Event-ID``, and the rest once each; plus its
  401, 404 and 400;
- ``/executions/{id}`` in Chromium: the page shows the new rows and the verdict by
  itself, never reloading;
- ``tether watch``: to the pause and its hint, through the pause to the end, and an
  unknown id;
- ``tether serve`` stopped while a follower waits at a pause: it lets go.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from httpx_sse import aconnect_sse, connect_sse
from playwright.sync_api import expect
from tether.runtime._core.events import EVENTS
from tether.runtime.ops._cli import main
from tether.runtime.ops._watching import LAST_CURSOR
from tether.stores import open_store

from .conftest import start_paused
from .test_browser import APP, CHROMIUM, backend, chromium, serving

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from tether.runtime._core.events import Event
    from tether.stores import JournalEntry

__all__ = ["backend"]  # a fixture, reused from the browser tests: the backend of the processes started

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "streaming-test-token"
BEARER = {"authorization": f"Bearer {TOKEN}"}
WAIT = 60.0  # seconds: the most any one wait below may take


def tether(*args: str, url: str, backend: str) -> list[str]:
    """The ``tether`` command line for a process of its own, on this store and backend."""
    return [sys.executable, "-m", "tether.runtime.ops", *args, "--store", url, "--backend", backend]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_TOKEN", "TETHER_STORE")}
    env["COLUMNS"] = "400"  # rows unwrapped
    return env


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=WAIT, check=False)


def approve_elsewhere(url: str, backend: str, execution_id: str) -> None:
    """Decide it from another process, which continues the run there to its end."""
    done = run(tether("resume", execution_id, "--set", "approved=true", "--app", APP, url=url, backend=backend))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("completed:"), done.stdout


async def journal(url: str, execution_id: str) -> list[JournalEntry]:
    async with open_store(url) as store:
        return await store.read_journal(execution_id)


def rows(events: Iterable[Event]) -> list[tuple[int | None, str, str, Any]]:
    """What identifies an event as a journal entry: its cursor, path, label and time."""
    return [(event.cursor, event.path, event.label, event.at) for event in events]


def entries(journaled: Iterable[JournalEntry]) -> list[tuple[int | None, str, str, Any]]:
    return [(entry.seq, entry.path, entry.label, entry.created_at) for entry in journaled]


def cursors(events: Sequence[Event]) -> list[int | None]:
    return [event.cursor for event in events]


# -- server-sent events -------------------------------------------------------------


async def follow(client: httpx.AsyncClient, execution_id: str, *, stop: str | None = None,
                 headers: dict[str, str] | None = None, params: dict[str, str] | None = None) -> list[Event]:
    """The events of one connection: until the server ends it, or until an event of type ``stop`` (then it
    disconnects). Checks each message's ``event`` and ``id`` against the event it holds."""
    got: list[Event] = []
    with anyio.fail_after(WAIT):
        async with aconnect_sse(client, "GET", f"/api/executions/{quote(execution_id, safe='')}/events",
                                headers=headers or {}, params=params or {}) as source:
            assert source.response.status_code == 200
            assert source.response.headers["cache-control"] == "no-store"
            # Closed at once when it breaks off, so its connection goes then (a disconnect).
            async with contextlib.aclosing(source.aiter_sse()) as messages:
                async for message in messages:
                    if not message.data:  # the stream's opening "retry:", which httpx-sse hands on
                        assert message.retry is not None
                        continue
                    event = EVENTS.validate_json(message.data)
                    assert event.execution_id == execution_id
                    assert message.event == event.type
                    if event.cursor is not None:
                        assert message.id == str(event.cursor)
                    got.append(event)
                    if event.type == stop:
                        break
    return got


# Breaking off a streamed response leaves httpx's and httpcore's inner generators (Response.aiter_text
# and below) to the garbage collector, which trio warns of (encode/httpx#3686): only those are ignored.
@pytest.mark.filterwarnings(r"ignore:Async generator '(httpx|httpcore)\._:ResourceWarning")
async def test_sse_reconnects_after_a_decision_made_in_another_process(url: str, anyio_backend: str) -> None:
    """One protected server per store and backend (uvicorn under asyncio, hypercorn under trio, the client
    on the same backend), and every assertion on it."""
    await anyio.to_thread.run_sync(start_paused, url, "sse-1")
    with serving(url, anyio_backend, "--app", APP, "--token", TOKEN) as served:
        async with httpx.AsyncClient(base_url=served.base, headers=BEARER, timeout=WAIT) as client:
            before = await follow(client, "sse-1", stop="execution_paused")  # and disconnect
            assert cursors(before) == list(range(1, len(before) + 1))
            assert before[0].type == "execution_started" and before[-1].type == "execution_paused"
            interrupt = next(event for event in before if event.type == "interrupt")
            assert interrupt.pending is not None and interrupt.pending.reason == "manager_approval"
            assert rows(before) == entries(await journal(url, "sse-1"))

            # until=paused ends by itself at the pause; ?after= starts after the cursor given.
            tail = await follow(client, "sse-1", params={"until": "paused", "after": "2"})
            assert rows(tail) == rows(before[2:])

            await anyio.to_thread.run_sync(approve_elsewhere, url, anyio_backend, "sse-1")

            last = before[-1].cursor
            rest = await follow(client, "sse-1", headers={"last-event-id": str(last)})  # the server ends it
            assert cursors(rest) == list(range(len(before) + 1, len(before) + len(rest) + 1))
            assert rest[0].type == "execution_resumed"
            assert rest[-1].type == "execution_completed"
            assert rest[-1].output == {"amount": 50_000, "note": "", "valid": True, "approved": True,
                                       "approver": None, "charged": 50_000}
            assert rows(before + rest) == entries(await journal(url, "sse-1"))
            # Last-Event-ID wins over ?after= (an EventSource reconnects to the URL it opened, with the header).
            again = await follow(client, "sse-1", headers={"last-event-id": str(last)}, params={"after": "0"})
            assert rows(again) == rows(rest)
            # After the last event there is nothing more, and the stream ends at once.
            assert await follow(client, "sse-1", headers={"last-event-id": str(rest[-1].cursor)}) == []

            unknown = await client.get("/api/executions/nope/events")
            assert unknown.status_code == 404 and "nope" in unknown.text
            for bad in ("abc", "-1", "1.5", "\N{SUPERSCRIPT TWO}", str(LAST_CURSOR + 1)):
                refused = await client.get("/api/executions/sse-1/events", params={"after": bad})
                assert refused.status_code == 400, bad
                assert repr(bad) in refused.json()["detail"]
            for raw in (b"abc", b"\xb2", b"9" * 5000):  # a header's bytes: "\xb2" reads as "\N{SUPERSCRIPT TWO}"
                refused = await client.get("/api/executions/sse-1/events", headers={b"last-event-id": raw})
                assert refused.status_code == 400, raw[:10]
                assert "Cannot continue after" in refused.json()["detail"]
            assert await follow(client, "sse-1", headers={"last-event-id": str(LAST_CURSOR)}) == []
            refused = await client.get("/api/executions/sse-1/events", params={"until": "soon"})
            assert refused.status_code == 400 and "until='soon'" in refused.json()["detail"]

        async with httpx.AsyncClient(base_url=served.base, timeout=WAIT) as stranger:
            for path in ("/api/executions/sse-1/events", "/api/executions/nope/events"):  # unknown or not: 401
                assert (await stranger.get(path)).status_code == 401
                wrong = await stranger.get(path, headers={"authorization": "Bearer not-the-token"})
                assert wrong.status_code == 401
            # The page's own stream wants the login cookie, not a bearer token.
            assert (await stranger.get("/executions/sse-1/events")).status_code == 401


# -- the live page ------------------------------------------------------------------


def test_the_timeline_page_shows_a_decision_made_elsewhere_without_a_reload(url: str, backend: str) -> None:
    """Served without --app: the server continues nothing, so every new row is another process's write.
    Behind a token, so the page's stream goes by the login cookie."""
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
    execution_id = "live/1 ?#%"  # the script's stream URL is the page's own path, percent-encoded
    start_paused(url, execution_id)
    with serving(url, backend, "--token", TOKEN) as bare, chromium() as browser:
        page = browser.new_page()
        page.goto(f"{bare.base}/login")
        page.locator("input[name=token]").fill(TOKEN)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url("**/executions")
        with page.expect_response(lambda answer: answer.url.split("?")[0].endswith("/events")) as stream:
            page.goto(f"{bare.base}/executions/{quote(execution_id, safe='')}")
        assert stream.value.status == 200
        assert stream.value.headers["content-type"].startswith("text/event-stream")
        status = page.locator("[data-testid=status]")
        table = page.locator("table#journal")
        waiting = page.locator("#pending [data-testid=pending]")
        expect(status).to_have_text("paused")
        expect(waiting).to_have_count(1)
        assert waiting.get_attribute("data-path") == "chain:refund/node:approve"
        shown = len(table.locator("tr").all()) - 1  # less the header
        assert table.get_attribute("data-cursor") == str(shown)
        page.evaluate("window.__marker = 1")
        navigated: list[str] = []
        page.on("framenavigated", lambda frame: navigated.append(frame.url))

        approve_elsewhere(url, backend, execution_id)

        last_row = table.locator("tr").last
        expect(last_row.locator("td").nth(3)).to_have_text("completed", timeout=WAIT * 1000)
        expect(status).to_have_text("completed")
        expect(waiting).to_have_count(0)
        assert page.evaluate("window.__marker") == 1
        assert navigated == []
        numbers = table.locator("tr td:nth-child(1)").all_inner_texts()
        labels = table.locator("tr td:nth-child(4)").all_inner_texts()
        cursor = table.get_attribute("data-cursor")
    # Every journal entry once, in order: the rendered ones, then the streamed ones.
    journaled = anyio.run(journal, url, execution_id)  # not under Playwright's own event loop
    assert [int(n) for n in numbers] == [entry.seq for entry in journaled]
    assert labels == [entry.label for entry in journaled]
    assert len(journaled) > shown
    assert cursor == str(journaled[-1].seq)


# -- tether watch -------------------------------------------------------------------

ROW = re.compile(r"^\s*(\d+)  (\w+)  ")


def test_watch_prints_a_paused_run_and_how_to_decide_it(url: str, backend: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    start_paused(url, "w-1")
    journaled = entries(anyio.run(journal, url, "w-1"))

    done = run(tether("watch", "w-1", "--json", url=url, backend=backend))
    assert done.returncode == 0, done.stderr
    events = [EVENTS.validate_json(line) for line in done.stdout.splitlines()]
    assert cursors(events) == list(range(1, len(events) + 1))
    assert events[-1].type == "execution_paused"
    assert rows(events) == journaled
    assert "resume" not in done.stderr  # --json: the events, nothing else

    done = run(tether("watch", "w-1", url=url, backend=backend))
    assert done.returncode == 0, done.stderr
    printed = [match.groups() for match in map(ROW.match, done.stdout.splitlines()) if match]
    assert printed == [(str(event.cursor), event.type) for event in events]
    assert "waiting for a decision: manager_approval" in done.stdout
    assert "Paused. Decide it with: tether --store" in done.stderr
    assert "resume w-1 --set approved=true" in done.stderr
    assert f"watch again with --after {events[-1].cursor}" in done.stderr

    # From the pause's own cursor, as the hint says, before anyone decided: nothing more, it is paused.
    done = run(tether("watch", "w-1", "--after", str(events[-1].cursor), "--json", url=url, backend=backend))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr

    for bad in ("-1", str(LAST_CURSOR + 1)):  # refused before the store is opened: in this process
        assert main(["watch", "w-1", "--after", bad, "--store", url]) == 2
        assert f"Invalid value for '--after': {bad} is not in the range" in capsys.readouterr().err

    done = run(tether("watch", "nope", url=url, backend=backend))
    assert done.returncode != 0
    assert done.stdout == ""
    assert "ExecutionNotFound" in done.stderr and "No execution 'nope'" in done.stderr


def test_watch_through_pauses_follows_a_decision_made_elsewhere(url: str, backend: str) -> None:
    start_paused(url, "w-2")
    command = tether("watch", "w-2", "--through-pauses", "--json", url=url, backend=backend)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                          cwd=ROOT) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        lines: queue.Queue[str | None] = queue.Queue()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)  # its end

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            before: list[Event] = []
            while not before or before[-1].type != "execution_paused":
                line = lines.get(timeout=WAIT)
                assert line is not None, f"watch ended before the pause: {proc.stderr.read()}"
                before.append(EVENTS.validate_json(line))
            assert proc.poll() is None  # still following, through the pause

            approve_elsewhere(url, backend, "w-2")

            rest: list[Event] = []
            while (line := lines.get(timeout=WAIT)) is not None:
                rest.append(EVENTS.validate_json(line))
            assert proc.wait(timeout=WAIT) == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(WAIT)
    events = before + rest
    assert cursors(events) == list(range(1, len(events) + 1))
    assert rest[0].type == "execution_resumed" and rest[-1].type == "execution_completed"
    assert rows(events) == entries(anyio.run(journal, url, "w-2"))


# -- shutting down --------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_serve_stops_while_a_follower_waits_at_a_pause(tmp_path: Path, backend: str) -> None:
    """SIGTERM to ``tether serve`` with a timeline open on a paused run: the server lets go of the stream."""
    url = f"sqlite:///{tmp_path / 'ops.db'}"
    start_paused(url, "stop-1")
    # Reads time out well before the stream's next keepalive (every 15 s): a quiet stream is a held one.
    with (serving(url, backend) as served,
          httpx.Client(base_url=served.base, timeout=httpx.Timeout(WAIT, read=6.0)) as client,
          connect_sse(client, "GET", "/api/executions/stop-1/events") as source):
        messages = source.iter_sse()
        assert "execution_paused" in (message.event for message in messages)  # read up to the pause
        os.kill(served.pid, signal.SIGTERM)
        try:
            for message in messages:
                assert not message.data, message  # nothing happens to a paused run meanwhile
        except httpx.RemoteProtocolError:
            pass  # cut off mid-stream: let go too
        except httpx.ReadTimeout:
            pytest.fail("tether serve still holds the stream after SIGTERM")
