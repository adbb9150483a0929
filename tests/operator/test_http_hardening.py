"""The HTTP app's edges, in process (httpx over ASGI, lifespan running), on SQLite and Postgres, both backends.

Execution ids with any character, CSRF tokens signed for one browser, foreign
origins, the ``wait=`` long poll's argument, the request body limit, and what a
server without the runner says when it accepts a decision.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from html import escape
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from tether.runtime.ops._http import create_app
from tether.runtime.ops._session import LOGIN_COOKIE, SID_COOKIE
from tether.stores import ConfigurationError, Store

from ._flows import refund
from .test_http import PATH, paused, serving, settled

# One of each character a URL treats specially, and ids that look like routes or encodings.
ODD_IDS = ["a/b", "why?x=1&y=2", "tag#1", "50%off", "a%2Fb", "x/resume", "/lead/and/trail/", "sp ace+plus",
           "new\nline", "ends in space "]


def api(execution_id: str, suffix: str = "") -> str:
    return f"/api/executions/{quote(execution_id, safe='')}{suffix}"


@asynccontextmanager
async def browser(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """A client with a cookie jar of its own: one browser."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client:
        yield client


@asynccontextmanager
async def app_for(store: Store, runners: Sequence[Any] = (refund,), **options: Any) -> AsyncIterator[Starlette]:
    app = create_app(store, list(runners), **options)
    async with app.router.lifespan_context(app):
        yield app


class _Chunks(httpx.AsyncByteStream):
    """A body produced only as the server reads it: ``head``, ``count`` times ``chunk``, ``tail``."""

    def __init__(self, head: bytes, chunk: bytes, count: int, tail: bytes) -> None:
        self.parts = [head, *[chunk] * count, tail]
        self.pulled = 0

    def __aiter__(self) -> _Chunks:  # an iterator, not a generator: nothing is left to finalize
        return self

    async def __anext__(self) -> bytes:
        if self.pulled == len(self.parts):
            raise StopAsyncIteration
        self.pulled += 1
        return self.parts[self.pulled - 1]


class _Page(HTMLParser):
    """What a browser takes from a page: its links and its forms' fields, unescaped."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.links: list[str] = []
        self.forms: list[dict[str, str]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        fields = {name: value or "" for name, value in attrs}
        if tag == "a":
            self.links.append(fields["href"])
        elif tag == "form":
            # The decisions' forms and the login: not the filter, the bulk approval or the logout.
            self.deciding = fields["action"].endswith(("/decide", "/login"))
            if self.deciding:
                self.forms.append({"action": fields["action"]})
        elif tag == "input" and fields.get("type") == "hidden" and getattr(self, "deciding", False):
            self.forms[-1][fields["name"]] = fields["value"]


async def continued(app: Starlette, execution_id: str) -> None:
    """Wait until the run the server continues for ``execution_id`` has settled."""
    with anyio.fail_after(30):
        await app.state.settled[execution_id].wait()


def decision(form: dict[str, str], verdict: str = "approve", approver: str = "alice") -> dict[str, str]:
    return {**{k: v for k, v in form.items() if k != "action"}, "approver": approver, "decision": verdict}


# -- execution ids ----------------------------------------------------------------------


async def test_an_id_with_any_character_is_fetched_and_resumed_percent_encoded(db_store: Store) -> None:
    for execution_id in [*ODD_IDS, "x"]:
        await paused(db_store, execution_id)
    async with serving(db_store) as client:
        for execution_id in ODD_IDS:
            view = await client.get(api(execution_id))
            assert view.status_code == 200, (execution_id, view.text)
            assert view.json()["execution"]["execution_id"] == execution_id
            assert [p["execution_id"] for p in view.json()["pending"]] == [execution_id]
            answer = await client.post(api(execution_id, "/resume"),
                                       json={"approved": True, "metadata": {"approver": execution_id}})
            assert answer.status_code == 202, (execution_id, answer.text)
            assert answer.json()["execution_id"] == execution_id
            await settled(client, execution_id)
            done = (await client.get(api(execution_id))).json()["execution"]
            assert done["status"] == "completed"
            assert done["result"]["approver"] == execution_id
        # "x/resume" was resumed, and "x" (which its resume URL starts with) was not.
        assert [p.execution_id for p in await db_store.list_pending()] == ["x"]
        assert (await client.get(api("x"))).json()["execution"]["status"] == "paused"


async def test_the_page_links_each_id_and_its_form_decides_it(db_store: Store) -> None:
    tricky = [*ODD_IDS, "it's \"<quoted>\" & so on"]
    for execution_id in tricky:
        await paused(db_store, execution_id)
    async with serving(db_store) as client:
        html = (await client.get("/approvals")).text
        assert "<quoted>" not in html  # the hidden fields and the link text are escaped
        page = _Page(html)
        links = [link for link in page.links if link.startswith("/executions/")]
        assert len(links) == len(tricky)
        for execution_id in tricky:
            link = f"/executions/{quote(execution_id, safe='')}"
            assert link in links
            timeline = await client.get(link)
            assert timeline.status_code == 200, (link, timeline.text)
            assert f"<h1 data-testid=execution>{escape(execution_id)}</h1>" in timeline.text
        assert len(page.forms) == len(tricky)
        for form in page.forms:
            done = await client.post(form["action"], data=decision(form))
            assert done.status_code == 303, done.text
            shown = (await client.get(done.headers["location"])).text
            assert f"<p class=flash role=status>{escape(form['execution_id'])}: approved.</p>" in shown
        assert sorted(form["execution_id"] for form in page.forms) == sorted(tricky)
        for execution_id in tricky:
            await settled(client, execution_id)
    assert await db_store.list_pending() == []


# -- CSRF -------------------------------------------------------------------------------


async def test_a_planted_cookie_with_a_matching_field_cannot_forge_a_decision(db_store: Store) -> None:
    await paused(db_store, "c-1")
    async with app_for(db_store) as app, browser(app) as victim:
        form = _Page((await victim.get("/approvals")).text).forms[0]
        # What a page on another 127.0.0.1 port can do: set cookies for the host, and post.
        for name in (SID_COOKIE, "tether_csrf"):
            victim.cookies.set(name, "forged", domain="testserver.local")
        assert victim.cookies[SID_COOKIE] == "forged"  # replaced, not a second cookie beside it
        forged = await victim.post("/approvals/decide", data={**decision(form), "csrf": "forged"})
        assert forged.status_code == 403
        assert "CSRF token" in forged.json()["detail"]
        assert [p.agent_path for p in await db_store.list_pending()] == [PATH]


async def test_a_token_is_only_good_for_the_browser_it_was_given_to(db_store: Store) -> None:
    await paused(db_store, "c-2")
    async with app_for(db_store) as app, browser(app) as alice, browser(app) as mallory:
        form = _Page((await alice.get("/approvals")).text).forms[0]
        await mallory.get("/approvals")  # a session of mallory's own
        assert mallory.cookies[SID_COOKIE] != alice.cookies[SID_COOKIE]
        stolen = await mallory.post("/approvals/decide", data=decision(form, approver="mallory"))
        assert stolen.status_code == 403
        assert [p.agent_path for p in await db_store.list_pending()] == [PATH]
        mine = await alice.post("/approvals/decide", data=decision(form))
        assert mine.status_code == 303
        await continued(app, "c-2")


async def test_a_form_posted_from_another_origin_is_refused(db_store: Store) -> None:
    await paused(db_store, "c-3")
    async with app_for(db_store) as app, browser(app) as client:
        form = _Page((await client.get("/approvals")).text).forms[0]
        for origin in ("http://127.0.0.1:9999", "http://testserver:8080", "null", "https://evil.example"):
            refused = await client.post("/approvals/decide", data=decision(form), headers={"origin": origin})
            assert refused.status_code == 403, origin
            assert origin in refused.json()["detail"]
        assert [p.agent_path for p in await db_store.list_pending()] == [PATH]
        own = await client.post("/approvals/decide", data=decision(form), headers={"origin": "http://testserver"})
        assert own.status_code == 303
        await continued(app, "c-3")


async def test_the_login_is_signed_for_a_fresh_session(db_store: Store) -> None:
    await paused(db_store, "c-4")
    async with app_for(db_store, token="s3cret") as app, browser(app) as alice, browser(app) as mallory:
        login_form = _Page((await alice.get("/login")).text).forms[0]
        planted = alice.cookies[SID_COOKIE]
        foreign = await alice.post("/login", data={"csrf": login_form["csrf"], "token": "s3cret"},
                                   headers={"origin": "http://127.0.0.1:9999"})
        assert foreign.status_code == 403
        assert (await alice.post("/login", data={"csrf": "0" * 64, "token": "s3cret"})).status_code == 403
        good = await alice.post("/login", data={"csrf": login_form["csrf"], "token": "s3cret"})
        assert good.status_code == 303
        assert alice.cookies[SID_COOKIE] != planted  # a session id known before the login is not kept
        approvals = await alice.get("/approvals")
        assert approvals.status_code == 200
        csrf = _Page(approvals.text).forms[0]["csrf"]
        assert csrf != alice.cookies[LOGIN_COOKIE]  # the token on the page is not the login

        # The page's token as a login, or alice's login with another session id: not logged in.
        await mallory.get("/login")
        mallory.cookies.set(LOGIN_COOKIE, csrf, domain="testserver.local")
        assert (await mallory.get("/approvals")).headers["location"] == "/login"
        mallory.cookies.set(LOGIN_COOKIE, alice.cookies[LOGIN_COOKIE], domain="testserver.local")
        assert (await mallory.get("/approvals")).headers["location"] == "/login"
    assert [p.agent_path for p in await db_store.list_pending()] == [PATH]


async def test_the_signing_secret_is_random_per_app_unless_a_token_gives_it(db_store: Store) -> None:
    await paused(db_store, "c-5")

    async def post(app: Starlette, form: dict[str, str], sid: str, login: str | None = None) -> int:
        async with browser(app) as client:
            client.cookies.set(SID_COOKIE, sid, domain="testserver.local")
            if login is not None:
                client.cookies.set(LOGIN_COOKIE, login, domain="testserver.local")
            return (await client.post("/approvals/decide", data=decision(form))).status_code

    async with app_for(db_store, runners=()) as first, app_for(db_store, runners=()) as second:
        async with browser(first) as client:
            form = _Page((await client.get("/approvals")).text).forms[0]
            sid = client.cookies[SID_COOKIE]
        assert await post(second, form, sid) == 403  # another app (a restart): the page is stale
        assert [p.agent_path for p in await db_store.list_pending()] == [PATH]

    async with app_for(db_store, runners=(), token="s3cret") as first, \
            app_for(db_store, runners=(), token="s3cret") as second:
        async with browser(first) as client:
            login = _Page((await client.get("/login")).text).forms[0]
            await client.post("/login", data={"csrf": login["csrf"], "token": "s3cret"})
            form = _Page((await client.get("/approvals")).text).forms[0]
            sid, logged_in = client.cookies[SID_COOKIE], client.cookies[LOGIN_COOKIE]
        assert await post(second, form, sid, logged_in) == 303  # same token: a replica, or a restart
    assert await db_store.list_pending() == []


# -- wait= ------------------------------------------------------------------------------


async def test_wait_takes_a_finite_number_of_seconds(db_store: Store) -> None:
    refused = ["nan", "inf", "-inf", "-1", "abc", "", "1e999"]
    await paused(db_store, "w-1")
    async with serving(db_store) as client:
        for wait in refused:
            before = await client.get("/api/executions/w-1", params={"wait": wait})
            assert before.status_code == 400, wait
            assert "finite number" in before.json()["detail"] and repr(wait) in before.json()["detail"]
        assert (await client.post("/api/executions/w-1/resume", json={"approved": True})).status_code == 202
        for wait in refused:  # and for a run this server continues, which the long poll waits for
            assert (await client.get("/api/executions/w-1", params={"wait": wait})).status_code == 400, wait
        long = await client.get("/api/executions/w-1", params={"wait": "1e9"})  # capped at 60, not refused
        assert long.status_code == 200
        assert long.json()["execution"]["status"] == "completed"
        assert (await client.get("/api/executions/w-1", params={"wait": "0"})).status_code == 200


# -- the body limit ---------------------------------------------------------------------


async def test_a_body_over_the_limit_is_refused_and_claims_nothing(db_store: Store) -> None:
    await paused(db_store, "l-1")
    async with serving(db_store, max_body_bytes=2048) as client:
        big = {"approved": True, "metadata": {"pad": "x" * 4096}}
        answer = await client.post("/api/executions/l-1/resume", json=big)
        assert answer.status_code == 413
        assert "2048 bytes" in answer.json()["detail"] and "max_body_bytes" in answer.json()["detail"]
        assert answer.headers["connection"] == "close"
        form = _Page((await client.get("/approvals")).text).forms[0]
        posted = await client.post("/approvals/decide", data={**decision(form), "note": "x" * 4096})
        assert posted.status_code == 413
        assert [p.agent_path for p in await db_store.list_pending()] == [PATH]

        body = _Chunks(b'{"approved": true, "metadata": {"pad": "', b"x" * 1024, 1000, b'"}}')
        streamed = await client.send(httpx.Request(  # no Content-Length: the server counts as it reads
            "POST", "http://testserver/api/executions/l-1/resume", stream=body,
            headers={"content-type": "application/json", "transfer-encoding": "chunked"}))
        assert streamed.status_code == 413
        assert body.pulled <= 3  # cut off once past 2048 bytes, not read to the end
        assert [p.agent_path for p in await db_store.list_pending()] == [PATH]

        head = b'{"approved": true, "metadata": {"pad": "'
        exact = head + b"x" * (2048 - len(head) - 3) + b'"}}'
        assert len(exact) == 2048
        fits = await client.post("/api/executions/l-1/resume", content=exact,
                                 headers={"content-type": "application/json"})
        assert fits.status_code == 202
        await settled(client, "l-1")
    assert await db_store.list_pending() == []


async def test_the_default_limit_is_one_mebibyte(db_store: Store) -> None:
    await paused(db_store, "l-2")
    async with serving(db_store) as client:
        over = json.dumps({"approved": True, "metadata": {"pad": "x" * (1 << 20)}})
        answer = await client.post("/api/executions/l-2/resume", content=over,
                                   headers={"content-type": "application/json"})
        assert answer.status_code == 413
        assert "1048576 bytes" in answer.json()["detail"]
    assert [p.agent_path for p in await db_store.list_pending()] == [PATH]


def test_a_limit_below_one_byte_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_body_bytes=0"):
        create_app(None, max_body_bytes=0)  # type: ignore[arg-type]


# -- a server without the runner --------------------------------------------------------


async def test_without_the_runner_the_answer_and_the_page_say_nothing_continues_here(db_store: Store) -> None:
    await paused(db_store, "job-1")
    await paused(db_store, "job 2")
    async with serving(db_store, runners=()) as client:
        answer = await client.post("/api/executions/job-1/resume", json={"approved": True})
        assert answer.status_code == 202
        assert answer.json()["continuing"] is False
        assert answer.json()["detail"] == (
            "Decision recorded; no process here continues it: run it with a worker "
            "(`tether worker --app module:attr`) or `tether resume job-1 --app module:attr`.")
        form = _Page((await client.get("/approvals")).text).forms[0]
        assert form["execution_id"] == "job 2"
        done = await client.post("/approvals/decide", data=decision(form, "reject"))
        flash = ("job 2: rejected and recorded; no process here continues it: run it with a worker "
                 "(`tether worker --app module:attr`) or `tether resume 'job 2' --app module:attr`.")
        page = (await client.get(done.headers["location"])).text
        assert escape(flash) in page
    assert await db_store.list_pending() == []
    for execution_id in ("job-1", "job 2"):
        execution = await db_store.get_execution(execution_id)
        assert execution is not None and execution.status != "completed"


@pytest.fixture(autouse=True)
def _no_store_left_on_the_runner() -> None:
    refund.store = None


# -- wrong tokens, the content policy, the logs --------------------------------------------


async def test_wrong_tokens_are_slowed_per_address_and_never_logged(db_store: Store,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    from tether.runtime.ops._throttle import FAILURES

    guesses = [f"tether_guess{n:04d}" for n in range(FAILURES)]
    async with app_for(db_store, token="s3cret-admin") as app, browser(app) as client:
        for guess in guesses:
            assert (await client.get("/api/pending", headers={"authorization": f"Bearer {guess}"})).status_code == 401
        # Now even the right token waits: the address is slowed, not the token checked.
        slowed = await client.get("/api/pending", headers={"authorization": "Bearer s3cret-admin"})
        assert slowed.status_code == 429
        assert 1 <= int(slowed.headers["retry-after"]) <= 60
        assert "try again in" in slowed.json()["detail"]
        login_page = await client.get("/login")
        form = _Page(login_page.text).forms[0]
        refused = await client.post("/login", data={"csrf": form["csrf"], "token": "s3cret-admin"})
        assert refused.status_code == 429 and "try again in" in refused.text
        assert LOGIN_COOKIE not in client.cookies
        # Another address is not slowed by this one's guesses.
        elsewhere = httpx.ASGITransport(app=app, client=("10.0.0.9", 4000))
        async with httpx.AsyncClient(transport=elsewhere, base_url="http://testserver") as other:
            ok = await other.get("/api/pending", headers={"authorization": "Bearer s3cret-admin"})
            assert ok.status_code == 200
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "wrong or revoked token" in logged
    assert not any(guess in logged for guess in guesses) and "s3cret-admin" not in logged


def test_the_throttle_forgets_failures_once_they_are_a_window_old() -> None:
    from tether.runtime.ops._throttle import Throttle

    now = [0.0]
    throttle = Throttle(failures=3, window=60.0, clock=lambda: now[0])
    for _ in range(3):
        throttle.failed("a")
    assert throttle.wait("a") == 60 and throttle.wait("b") == 0
    now[0] = 59.5
    assert throttle.wait("a") == 1
    now[0] = 60.0
    assert throttle.wait("a") == 0  # all three fell out of the window
    throttle.failed("a")
    throttle.failed("a")
    assert throttle.wait("a") == 0  # two in the window now, under three
    throttle.failed("a")
    assert throttle.wait("a") == 60
    throttle.succeeded("a")
    assert throttle.wait("a") == 0


async def test_every_answer_carries_a_content_policy_that_runs_no_inline_script(db_store: Store) -> None:
    await paused(db_store, "csp-1")
    async with app_for(db_store) as app, browser(app) as client:
        for path in ("/executions", "/executions/csp-1", "/approvals", "/login", "/api/pending", "/healthz"):
            answer = await client.get(path)
            policy = dict(part.strip().split(" ", 1) for part in answer.headers["content-security-policy"].split(";"))
            assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'", path
            assert "unsafe-inline" not in answer.headers["content-security-policy"]
            assert policy["frame-ancestors"] == "'none'" and policy["form-action"] == "'self'"
            assert answer.headers["x-frame-options"] == "DENY"
            assert answer.headers["referrer-policy"] == "same-origin"
            assert answer.headers["x-content-type-options"] == "nosniff"
        page = (await client.get("/executions/csp-1")).text
        assert "<script>" not in page and " onclick=" not in page and " style=" not in page


@pytest.mark.parametrize("secure", [False, True], ids=["http", "tls"])
async def test_cookies_are_httponly_strict_and_secure_over_tls(db_store: Store, secure: bool) -> None:
    scheme = "https" if secure else "http"  # a client sends a Secure cookie back only over TLS
    async with app_for(db_store, token="s3cret-admin", secure_cookies=secure) as app, httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=f"{scheme}://testserver") as client:
        login_page = await client.get("/login")
        form = _Page(login_page.text).forms[0]
        logged_in = await client.post("/login", data={"csrf": form["csrf"], "token": "s3cret-admin"})
        assert logged_in.status_code == 303
        cookies = [value for name, value in login_page.headers.multi_items() + logged_in.headers.multi_items()
                   if name == "set-cookie"]
        assert {cookie.split("=", 1)[0] for cookie in cookies} >= {SID_COOKIE, LOGIN_COOKIE}
        for cookie in cookies:
            flags = {flag.strip().lower() for flag in cookie.split(";")[1:]}
            assert "httponly" in flags and "samesite=strict" in flags
            assert ("secure" in flags) is secure
