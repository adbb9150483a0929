"""`tether serve` as a real server (uvicorn under asyncio, hypercorn under trio), driven by a real browser.

Headless Chromium (Debian's, /usr/bin/chromium, which .ci/run installs when it
is missing) through Playwright: open /approvals, approve, see the approval go
and the execution complete. Then two Approve requests at once: one 202, one 409.
Ids holding ``/ ? # %`` are linked and approved; a page served from another
127.0.0.1 port that plants a cookie and posts a matching token is refused; a
50 MB body is refused without the server's memory growing; and a server
without runners says, at start and on each decision, that nothing here continues.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, sync_playwright

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


@dataclass
class Served:
    """A running ``tether serve``."""

    base: str  # its URL, http://127.0.0.1:<port>
    pid: int
    log: list[str]  # what it logged before it listened


@contextmanager
def serving(url: str, backend: str, *options: str) -> Iterator[Served]:
    """A ``tether serve`` process on a free port, until the block ends."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "tether.runtime.ops", "--store", url, "--backend", backend,
               "serve", *options, "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k != "TETHER_TOKEN"}
    log: list[str] = []
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:  # both servers say so once they listen
            if "Uvicorn running on" in line or "Running on" in line:
                break
            log.append(line)
        else:
            pytest.fail(f"tether serve exited with {proc.wait()} before listening")
        # Keep reading its log, or a full pipe would stall the server.
        drain = threading.Thread(target=proc.stderr.read, daemon=True)
        drain.start()
        try:
            yield Served(f"http://127.0.0.1:{port}", proc.pid, log)
        finally:
            proc.terminate()
            proc.communicate(timeout=30)


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend ``tether serve`` runs on: uvicorn under asyncio, hypercorn under trio."""
    return str(request.param)


@pytest.fixture
def served(url: str, backend: str) -> Iterator[Served]:
    """A ``tether serve --app`` that continues the refund chain's executions."""
    with serving(url, backend, "--app", APP) as running:
        yield running


@pytest.fixture
def server(served: Served) -> str:
    """The base URL of ``served``."""
    return served.base


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def test_approve_in_a_real_browser(server: str, url: str, tmp_path: Path) -> None:
    start_paused(url, "b-1", note="<b>urgent</b>")
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/approvals")
        card = page.locator("[data-testid=pending]")
        assert card.count() == 1
        assert card.locator("[data-testid=path]").inner_text() == "chain:refund/node:approve"
        assert card.locator("[data-testid=reason]").inner_text() == "manager_approval"
        assert '"note": "<b>urgent</b>"' in card.locator("[data-testid=context]").inner_text()  # shown as text
        card.locator("input[name=approver]").fill("alice")
        card.locator("input[name=note]").fill("fine by me")
        with page.expect_navigation(url="**/approvals"):  # the flash comes in a cookie
            card.get_by_role("button", name="Approve", exact=True).click()
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
    done = subprocess.run([sys.executable, "-m", "tether.runtime.ops", "--store", url, "serve",
                           "--host", "0.0.0.0", "--port", "1"],
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 1
    assert "without a token" in done.stderr and "TETHER_TOKEN" in done.stderr


def test_ids_with_url_characters_are_linked_and_approved(server: str, url: str) -> None:
    ids = ["b/1", "b?2=x", "b#3", "b%4", "b%2F5", "b/resume"]
    for execution_id in ids:
        start_paused(url, execution_id)
    with chromium() as browser:
        page = browser.new_page()
        for execution_id in ids:
            page.goto(f"{server}/approvals")
            card = page.locator(f"[data-testid=pending][data-execution={json.dumps(execution_id)}]")
            card.get_by_role("link", name=execution_id, exact=True).click()
            page.wait_for_url(f"{server}/executions/{quote(execution_id, safe='')}")
            assert page.locator("[data-testid=execution]").inner_text() == execution_id
            assert page.locator("[data-testid=status]").inner_text() == "paused"

            page.goto(f"{server}/approvals")
            card.locator("input[name=approver]").fill("alice")
            with page.expect_navigation(url="**/approvals"):  # the flash comes in a cookie
                card.get_by_role("button", name="Approve", exact=True).click()
            assert f"{execution_id}: approved." in page.get_by_role("status").inner_text()
            view = httpx.get(f"{server}/api/executions/{quote(execution_id, safe='')}", params={"wait": 30},
                             timeout=60).json()
            assert view["execution"]["execution_id"] == execution_id
            assert view["execution"]["status"] == "completed"
    assert httpx.get(f"{server}/api/pending").json() == []


def test_a_page_on_another_port_cannot_forge_a_decision(server: str, url: str) -> None:
    start_paused(url, "b-9")
    seq = httpx.get(f"{server}/api/pending").json()[0]["seq"]
    # Cookies are not port-isolated, and SameSite counts another port as the same site: this page
    # plants a session and CSRF cookie for 127.0.0.1 and posts a form with a token to match them.
    attack = f"""<!doctype html><title>cute cats</title>
<form method=post action="{server}/approvals/decide">
<input name=csrf value=forged><input name=execution_id value=b-9><input name=path value="chain:refund/node:approve">
<input name=seq value={seq}><input name=approver value=mallory><input name=decision value=approve></form>
<script>
document.cookie = "tether_sid=forged; path=/";
document.cookie = "tether_csrf=forged; path=/";
document.forms[0].submit();
</script>""".encode()

    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(attack)))
            self.end_headers()
            self.wfile.write(attack)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Attacker) as evil, chromium() as browser:
        threading.Thread(target=evil.serve_forever, daemon=True).start()
        try:
            page = browser.new_page()
            with page.expect_response(f"{server}/approvals/decide") as answer:
                page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
            assert "tether_sid=forged" in answer.value.request.all_headers()["cookie"]  # the cookie crossed over
            assert answer.value.status == 403
            pending = httpx.get(f"{server}/api/pending").json()
            assert [(p["execution_id"], p["seq"]) for p in pending] == [("b-9", seq)]

            # The same browser, planted cookie and all, still approves from the server's own page.
            page.goto(f"{server}/approvals")
            page.locator("input[name=approver]").fill("alice")
            with page.expect_navigation(url="**/approvals"):  # the flash comes in a cookie
                page.get_by_role("button", name="Approve", exact=True).click()
            assert "b-9: approved." in page.get_by_role("status").inner_text()
        finally:
            evil.shutdown()
    view = httpx.get(f"{server}/api/executions/b-9", params={"wait": 30}, timeout=60).json()
    assert view["execution"]["status"] == "completed"
    assert view["execution"]["result"]["approver"] == "alice"


def test_a_large_body_is_refused_without_the_server_growing(served: Served, url: str) -> None:
    start_paused(url, "b-8")
    before = _memory(served.pid)
    # Declared too large: refused before a byte of the body is sent.
    status, _ = _post_raw(served.base, "/api/executions/b-8/resume", 50 << 20, chunked=False)
    assert status.startswith("HTTP/1.1 413")
    # Chunked, so only reading tells: cut off once past the limit, long before its 50 MB.
    status, sent = _post_raw(served.base, "/api/executions/b-8/resume", 50 << 20, chunked=True)
    assert status.startswith("HTTP/1.1 413")
    assert sent < 20 << 20
    after = _memory(served.pid)
    grown = {key: after[key] - before[key] for key in before}
    assert all(growth < 16 << 20 for growth in grown.values()), (before, after)
    pending = httpx.get(f"{served.base}/api/pending").json()
    assert [p["execution_id"] for p in pending] == ["b-8"]


def test_a_server_without_runners_says_nothing_here_continues(url: str, backend: str) -> None:
    start_paused(url, "b-7")
    start_paused(url, "b-6")
    with serving(url, backend) as bare:
        warning = "".join(bare.log)
        assert "WARNING" in warning and "decisions are recorded, but no process here continues them" in warning
        assert "--app module:attr" in warning and "tether worker --app module:attr" in warning

        answer = httpx.post(f"{bare.base}/api/executions/b-7/resume", json={"approved": True}, timeout=30)
        assert answer.status_code == 202
        assert answer.json()["continuing"] is False
        assert "no process here continues it" in answer.json()["detail"]
        assert "tether resume b-7 --app module:attr" in answer.json()["detail"]

        with chromium() as browser:
            page = browser.new_page()
            page.goto(f"{bare.base}/approvals")
            page.locator("input[name=approver]").fill("alice")
            with page.expect_navigation(url="**/approvals"):  # the flash comes in a cookie
                page.get_by_role("button", name="Approve", exact=True).click()
            flash = page.get_by_role("status").inner_text()
        assert flash.startswith("b-6: approved and recorded; no process here continues it")
        assert "tether resume b-6 --app module:attr" in flash
        assert httpx.get(f"{bare.base}/api/pending").json() == []


def _memory(pid: int) -> dict[str, int]:
    """The process's resident memory and its peak, in bytes."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}


def _post_raw(base: str, path: str, size: int, *, chunked: bool) -> tuple[str, int]:
    """POST a decision of ``size`` bytes, reading the answer while sending; its status line and bytes sent.

    With ``chunked=False`` only the headers go (Content-Length says ``size``): the answer must come
    without any of the body.
    """
    address = urlsplit(base)
    head = b'{"approved": true, "metadata": {"pad": "'
    framing = b"transfer-encoding: chunked" if chunked else b"content-length: %d" % size
    answer = bytearray()
    sent = 0
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n%s\r\n\r\n"
                     % (path.encode(), address.netloc.encode(), framing))

        def read() -> None:
            try:
                while data := sock.recv(65536):
                    answer.extend(data)
            except OSError:  # reset once the server closes on a body it did not read: the answer came first
                pass

        reader = threading.Thread(target=read)
        reader.start()
        if chunked:
            pad = b"x" * (64 << 10)
            try:
                for piece in [head, *[pad] * (size // len(pad)), b'"}}']:
                    sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                    sent += len(piece)
                sock.sendall(b"0\r\n\r\n")
            except OSError:  # the server closed the connection after its 413
                pass
        reader.join(60)
    return bytes(answer).split(b"\r\n", 1)[0].decode(), sent


def test_a_server_without_a_token_answers_only_to_loopback_names(server: str, url: str) -> None:
    """A page at evil.example, its name rebound to 127.0.0.1, is same-origin to the browser: refused."""
    start_paused(url, "h-1")
    port = server.rsplit(":", 1)[1]
    rebound = httpx.get(f"{server}/api/pending", headers={"host": f"evil.example:{port}"}, timeout=30)
    assert rebound.status_code == 400
    assert "evil.example" in rebound.text
    forged = httpx.post(f"{server}/api/executions/h-1/resume", json={"approved": True},
                        headers={"host": f"evil.example:{port}"}, timeout=30)
    assert forged.status_code == 400
    for name in ("127.0.0.1", "localhost"):
        listed = httpx.get(f"{server}/api/pending", headers={"host": f"{name}:{port}"}, timeout=30)
        assert listed.status_code == 200
        assert [row["execution_id"] for row in listed.json()] == ["h-1"]  # nothing was decided
