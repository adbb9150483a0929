"""The console and its tokens in process (httpx over ASGI, lifespan running), on SQLite and Postgres, both backends.

Scoped tokens against the API and the pages (403s that consume nothing, a
revocation that holds at the next request, decisions that journal the token's
name), the executions list's filters and keyset pages, bulk approval with its
confirmation, hostile text in every field a page shows, CSRF on every form, and a
flash message that no URL can set.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import anyio
import httpx
from starlette.applications import Starlette
from tether.runtime.ops._access import create_token
from tether.runtime.ops._http import create_app
from tether.stores import NewExecution, Store

from ._console_app import PLANNER_PATH, planner
from ._flows import refund
from .test_http import PATH, paused

ADMIN = "the-admin-secret"
HOSTILE = "<script>alert(1)</script>\"'&"


@asynccontextmanager
async def console(store: Store, runners: Sequence[Any] = (planner, refund), **options: Any
                  ) -> AsyncIterator[Starlette]:
    app = create_app(store, list(runners), token=ADMIN, **options)
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def client(app: Starlette, secret: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """An API client with ``secret`` as its bearer token (none when None)."""
    headers = {} if secret is None else {"authorization": f"Bearer {secret}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver",
                                 headers=headers) as http:
        yield http


@asynccontextmanager
async def browser(app: Starlette, secret: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser logged in with ``secret``, its cookies its own."""
    async with client(app) as http:
        csrf = _csrf((await http.get("/login")).text)
        logged = await http.post("/login", data={"csrf": csrf, "token": secret})
        assert logged.status_code == 303, logged.text
        yield http


def _csrf(html: str) -> str:
    found = re.search(r"name=csrf value='([0-9a-f]+)'", html)
    assert found is not None, html
    return found.group(1)


class _Text(HTMLParser):
    """A page's text and attribute values as a browser reads them, and every tag it would make."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


async def planner_paused(store: Store, execution_id: str, order: str = "R-7") -> None:
    planner.store = store
    result = await planner.run(order, execution_id=execution_id)
    assert result.status == "paused", result


async def pending_paths(store: Store) -> list[tuple[str, str]]:
    return sorted((row.execution_id, row.agent_path) for row in await store.list_pending())


# -- scopes --------------------------------------------------------------------------------


async def test_an_approver_under_a_prefix_cannot_approve_elsewhere_nor_cancel(db_store: Store) -> None:
    await planner_paused(db_store, "p-1")
    await paused(db_store, "r-1")
    secret = await create_token(db_store, "support", ["approve"], ["supervisor:planner/"])
    before = await pending_paths(db_store)
    assert before == [("p-1", PLANNER_PATH), ("r-1", PATH)]
    async with console(db_store) as app, client(app, secret) as api:
        outside = await api.post("/api/executions/r-1/resume", json={"approved": True})
        assert outside.status_code == 403
        assert outside.json()["missing_scope"] == "approve"
        assert outside.json()["path"] == PATH
        assert "supervisor:planner/" in outside.json()["detail"]
        named = await api.post("/api/executions/r-1/resume", params={"path": PATH}, json={"approved": True})
        assert named.status_code == 403
        cancel = await api.post("/api/executions/p-1/cancel")
        assert cancel.status_code == 403
        assert cancel.json()["missing_scope"] == "operate"
        assert cancel.json()["token"] == "support"
        assert await pending_paths(db_store) == before  # nothing consumed, nothing cancelled
        assert (await db_store.get_execution("p-1")).status == "paused"  # type: ignore[union-attr]

        inside = await api.post("/api/executions/p-1/resume", json={"approved": True})
        assert inside.status_code == 202, inside.text
    assert await pending_paths(db_store) == [("r-1", PATH)]
    journal = await db_store.read_journal("p-1")
    decided = [entry.payload for entry in journal if entry.kind == "resumed"]
    assert [payload["by"] for payload in decided] == ["api:support"]  # type: ignore[index, call-overload]


async def test_a_prefix_covers_whole_segments_only(db_store: Store) -> None:
    await planner_paused(db_store, "p-2")
    secret = await create_token(db_store, "near-miss", ["approve"], ["supervisor:plan"])
    async with console(db_store) as app, client(app, secret) as api:
        refused = await api.post("/api/executions/p-2/resume", json={"approved": True})
        assert refused.status_code == 403  # "supervisor:plan" is not "supervisor:planner"
    assert await pending_paths(db_store) == [("p-2", PLANNER_PATH)]


async def test_read_only_tokens_see_but_do_not_act(db_store: Store) -> None:
    await paused(db_store, "r-2")
    secret = await create_token(db_store, "viewer", ["read"])
    async with console(db_store) as app, client(app, secret) as api:
        assert (await api.get("/api/pending")).status_code == 200
        assert (await api.get("/api/executions")).json()["executions"][0]["execution_id"] == "r-2"
        for route, body in (("resume", {"approved": True}), ("retry", None), ("cancel", None),
                            ("fork", {"at": 1, "as": "copy"}), ("messages", {"x": 1})):
            answer = await api.post(f"/api/executions/r-2/{route}", json=body)
            assert answer.status_code == 403, route
            assert answer.json()["missing_scope"] == ("approve" if route == "resume" else "operate")
    assert await pending_paths(db_store) == [("r-2", PATH)]
    assert await db_store.get_execution("copy") is None


async def test_a_revoked_token_is_refused_at_once_by_the_api_and_the_pages(db_store: Store) -> None:
    await paused(db_store, "r-3")
    secret = await create_token(db_store, "temp", ["approve"])
    async with console(db_store) as app, client(app, secret) as api, browser(app, secret) as page:
        assert (await api.get("/api/pending")).status_code == 200
        assert (await page.get("/approvals")).status_code == 200
        assert await db_store.revoke_token("temp", at=datetime.now(UTC))
        assert (await api.get("/api/pending")).status_code == 401
        assert (await api.post("/api/executions/r-3/resume", json={"approved": True})).status_code == 401
        gone = await page.get("/approvals")
        assert gone.status_code == 303 and gone.headers["location"] == "/login"
        assert (await page.get("/executions/r-3/events")).status_code == 401
    assert await pending_paths(db_store) == [("r-3", PATH)]


async def test_wrong_tokens_and_the_admin_token(db_store: Store) -> None:
    await paused(db_store, "r-4")
    async with console(db_store) as app:
        for header in ("Bearer nope", "Bearer tether_nope", "Basic x", "Bearer"):
            async with client(app) as api:
                answer = await api.get("/api/pending", headers={"authorization": header})
                assert answer.status_code == 401, header
        async with client(app) as anonymous:
            assert (await anonymous.get("/api/pending")).status_code == 401
        async with client(app, ADMIN) as admin:
            done = await admin.post("/api/executions/r-4/resume", json={"approved": True})
            assert done.status_code == 202
    decided = [e.payload for e in await db_store.read_journal("r-4") if e.kind == "resumed"]
    assert decided[0]["by"] == "api:admin"  # type: ignore[index, call-overload]


async def test_the_page_shows_forms_only_where_the_token_may_decide(db_store: Store) -> None:
    await planner_paused(db_store, "p-3")
    await paused(db_store, "r-5")
    secret = await create_token(db_store, "support", ["approve"], ["supervisor:planner"])
    async with console(db_store) as app, browser(app, secret) as page:
        html = (await page.get("/approvals")).text
        assert "signed in as <strong data-testid=who>support</strong>" in html
        assert html.count("action='/approvals/decide'") == 1
        assert html.count("data-testid=not-yours") == 1
        # A forged form for the other tree is refused and consumes nothing.
        csrf = _csrf(html)
        forged = await page.post("/approvals/decide", data={
            "csrf": csrf, "execution_id": "r-5", "path": PATH, "seq": "0", "approver": "x", "decision": "approve"})
        assert forged.status_code == 403
        assert forged.json()["missing_scope"] == "approve"
        # Its own: approved, journaled with the token's name, and the page names it.
        seq = next(r.seq for r in await db_store.list_pending(execution_id="p-3"))
        done = await page.post("/approvals/decide", data={
            "csrf": csrf, "execution_id": "p-3", "path": PLANNER_PATH, "seq": str(seq), "approver": "alice",
            "decision": "approve", "back": "/executions/p-3"})
        assert done.status_code == 303 and done.headers["location"] == "/executions/p-3"
        shown = (await page.get("/executions/p-3")).text
        assert "p-3: approved." in shown
        assert f"decision for {PLANNER_PATH} by page:support" in shown  # the timeline names the token
    by = [e.payload["by"] for e in await db_store.read_journal("p-3") if e.kind == "resumed"]  # type: ignore[index, call-overload]
    assert by == ["page:support"]
    assert await pending_paths(db_store) == [("r-5", PATH)]


# -- the pages -------------------------------------------------------------------------------


async def test_the_flash_cannot_be_set_from_the_url(db_store: Store) -> None:
    async with console(db_store) as app, browser(app, ADMIN) as page:
        for route in ("/approvals", "/executions"):
            html = (await page.get(route, params={"flash": "Your account is locked", "error": "call 555"})).text
            assert "Your account is locked" not in html and "call 555" not in html
        # A flash cookie not signed for this browser is ignored too.
        page.cookies.set("tether_flash", "WyJoaSIsZmFsc2Vd.00", domain="testserver.local")
        assert "role=status" not in (await page.get("/approvals")).text


async def test_every_form_needs_its_csrf_token(db_store: Store) -> None:
    await paused(db_store, "r-6")
    seq = (await db_store.list_pending())[0].seq
    async with console(db_store) as app, browser(app, ADMIN) as page:
        fields = {"execution_id": "r-6", "path": PATH, "seq": str(seq), "approver": "m", "decision": "approve",
                  "pick": f'["r-6", "{PATH}", {seq}]', "confirm": "yes", "at": "1", "as": "copy", "reason": "x"}
        for action in ("/approvals/decide", "/approvals/bulk", "/executions/r-6/cancel", "/executions/r-6/retry",
                       "/executions/r-6/fork", "/logout"):
            for csrf in (None, "0" * 64):
                data = fields if csrf is None else {**fields, "csrf": csrf}
                answer = await page.post(action, data=data)
                assert answer.status_code == 403, (action, answer.text)
                assert "CSRF" in answer.json()["detail"]
        assert (await page.get("/approvals")).status_code == 200  # still logged in: the logout was refused
    assert await pending_paths(db_store) == [("r-6", PATH)]
    assert (await db_store.get_execution("r-6")).status == "paused"  # type: ignore[union-attr]
    assert await db_store.get_execution("copy") is None


async def test_hostile_text_is_escaped_on_every_page(db_store: Store) -> None:
    execution_id = f"x{HOSTILE}"
    await paused(db_store, execution_id, note=HOSTILE)
    async with console(db_store) as app, browser(app, ADMIN) as page:
        pages = ["/approvals", "/executions", f"/executions?id={quote(HOSTILE)}",
                 f"/executions?runner={quote(HOSTILE)}&path={quote(HOSTILE)}",
                 f"/executions/{quote(execution_id, safe='')}",
                 f"/executions/{quote(execution_id, safe='')}?at=1", f"/executions/{quote(HOSTILE, safe='')}"]
        for route in pages:
            html = (await page.get(route)).text
            assert "<script>alert" not in html, route
            assert "script" not in _Text(html).tags or route.startswith("/executions/x"), route
        # The decision's note and approver come back on the execution's page: still text.
        seq = (await db_store.list_pending())[0].seq
        csrf = _csrf((await page.get("/approvals")).text)
        await page.post("/approvals/decide", data={"csrf": csrf, "execution_id": execution_id, "path": PATH,
                                                   "seq": str(seq), "approver": HOSTILE, "note": HOSTILE,
                                                   "decision": "approve"})
        html = (await page.get(f"/executions/{quote(execution_id, safe='')}")).text
        assert "<script>alert" not in html
        assert html.count("<script") <= 1  # at most the live timeline's own file
        confirm = await page.post("/approvals/bulk", data={"csrf": csrf, "pick": f'["{HOSTILE}", "{HOSTILE}", 1]'})
        assert "<script>alert" not in confirm.text


async def test_executions_list_filters_and_pages_without_gaps(db_store: Store) -> None:
    # 120 executions made straight in the store, in three runners and two versions, some at one instant.
    for n in range(120):
        runner = ["chain:a", "chain:b", "supervisor:planner"][n % 3]
        await db_store.enqueue_execution(NewExecution(
            execution_id=f"e-{n:03d}", runner=runner, root_path=runner, version="v2" if n % 2 else "v1",
            input={"n": n}, thread="t-1" if n < 10 else None))
    async with console(db_store) as app, client(app, ADMIN) as api:
        seen: list[str] = []
        before = None
        while True:
            params = {"limit": "25", **({"before": before} if before else {})}
            answer = (await api.get("/api/executions", params=params)).json()
            seen += [row["execution_id"] for row in answer["executions"]]
            before = answer["before"]
            if before is None:
                break
        assert len(seen) == 120 and len(set(seen)) == 120
        assert seen == sorted(seen, reverse=True)  # newest first; one instant's rows by id, newest id first

        async def ids(**params: str) -> list[str]:
            found = (await api.get("/api/executions", params={"limit": "1000", **params})).json()
            return sorted(row["execution_id"] for row in found["executions"])

        assert await ids(runner="chain:b") == [f"e-{n:03d}" for n in range(120) if n % 3 == 1]
        assert await ids(runner="chain:b", version="v2") == [f"e-{n:03d}" for n in range(120) if n % 6 == 1]
        assert await ids(path="supervisor:planner/worker:auditor") == [f"e-{n:03d}" for n in range(120) if n % 3 == 2]
        assert await ids(thread="t-1") == [f"e-{n:03d}" for n in range(10)]
        assert await ids(id="e-11") == [f"e-{n:03d}" for n in range(110, 120)]
        assert await ids(status="completed") == []
        assert await ids(until=(datetime.now(UTC) - timedelta(days=1)).isoformat()) == []
        assert len(await ids(since=(datetime.now(UTC) - timedelta(hours=1)).isoformat())) == 120
        bad = await api.get("/api/executions", params={"status": "nonsense"})
        assert bad.status_code == 400 and "status" in bad.json()["detail"]
        assert (await api.get("/api/executions", params={"before": "garbage"})).status_code == 400
    async with console(db_store) as app, browser(app, ADMIN) as page:
        first = await page.get("/executions", params={"runner": "chain:a"})
        assert first.status_code == 200
        assert first.text.count("data-testid=execution-row") == 40
        html = (await page.get("/executions")).text
        assert html.count("data-testid=execution-row") == 50
        older = re.search(r"rel=next href='([^']+)'", html)
        assert older is not None
        nxt = await page.get(older.group(1).replace("&amp;", "&"))
        assert nxt.text.count("data-testid=execution-row") == 50
        assert "&larr; newest" in nxt.text


async def test_bulk_approval_confirms_first_then_decides_each(db_store: Store) -> None:
    for n in range(3):
        await paused(db_store, f"bulk-{n}")
    rows = await db_store.list_pending()
    async with console(db_store) as app, browser(app, ADMIN) as page:
        html = (await page.get("/approvals")).text
        assert html.count("name=pick") == 3
        csrf = _csrf(html)
        picks = [f'["{r.execution_id}", "{r.agent_path}", {r.seq}]' for r in rows[:2]]
        confirm = await page.post("/approvals/bulk", data={"csrf": csrf, "pick": picks})
        assert confirm.status_code == 200
        assert "Approve 2 pending calls?" in confirm.text
        assert confirm.text.count("data-testid=chosen") == 2
        assert len(await db_store.list_pending()) == 3  # nothing decided before the confirmation
        done = await page.post("/approvals/bulk", data={"csrf": csrf, "pick": picks, "confirm": "yes",
                                                         "approver": "alice"})
        assert done.status_code == 303
        assert "Approved 2 of 2." in (await page.get("/approvals")).text
        again = await page.post("/approvals/bulk", data={"csrf": csrf, "pick": picks, "confirm": "yes",
                                                          "approver": "bob"})
        assert again.status_code == 303
        assert "Approved 0 of 2." in (await page.get("/approvals")).text  # decided already: refused, not twice
    assert [r.execution_id for r in await db_store.list_pending()] == [rows[2].execution_id]


async def test_a_long_queue_shows_its_oldest_and_says_more_wait(db_store: Store) -> None:
    from tether.stores import NewEntry, NewInterrupt

    for n in range(203):
        started = await db_store.start_execution(
            NewExecution(execution_id=f"q-{n:03d}", runner="Chain", root_path="chain:refund"),
            owner="test", lease_seconds=60)
        assert started.lease is not None
        await db_store.suspend(started.lease, [NewEntry(path=PATH, label="node:approve", kind="suspended")],
                               NewInterrupt(path=PATH, reason="manager_approval", context={"n": n}))
        await db_store.release_lease(started.lease, status="paused")
    async with console(db_store) as app, browser(app, ADMIN) as page:
        html = (await page.get("/approvals")).text
        assert html.count("data-testid=pending") == 200
        assert "data-testid=more" in html
        assert "q-000" in html and "q-202" not in html  # the oldest first
        narrowed = (await page.get("/approvals", params={"path_prefix": "chain:other"})).text
        assert "data-testid=more" not in narrowed and "id=empty" in narrowed


async def test_what_a_review_found_stays_closed(db_store: Store) -> None:
    from tether.runtime.ops._access import digest
    from tether.stores import TokenRow

    await paused(db_store, "r-7")
    await db_store.enqueue_execution(NewExecution(execution_id="idle", runner="Chain", root_path="chain:refund"))
    operator_ = await create_token(db_store, "ops", ["operate"])
    limited = await create_token(db_store, "limited", ["approve"], ["chain:refund/"])
    # A stored token named like the server's own, made straight in the store: still only what it says.
    fake = "tether_fake-admin-secret"
    await db_store.create_token(TokenRow(name="admin", digest=digest(fake), scopes=["read"],
                                         created_at=datetime.now(UTC)))
    async with console(db_store) as app:
        async with client(app, operator_) as api:
            rewrite = await api.post("/api/executions/r-7/fork", json={"at": 1, "as": "r-7b", "update": {"x": 1}})
            assert rewrite.status_code == 403 and rewrite.json()["missing_scope"] == "admin"
            foreign = await api.post("/api/executions/r-7/cancel", headers={"origin": "http://evil.test"})
            assert foreign.status_code == 403
        async with client(app, limited) as api:
            nothing = await api.post("/api/executions/idle/resume", json={"approved": True})
            assert nothing.status_code == 409 and "?path=" in nothing.json()["detail"]
        async with client(app, ADMIN) as api:
            for params in ({"limit": "²"}, {"since": "0001-01-01T00:00+01:00"}, {"before": "2026-01-01T00:00:00+00:00 a\x00"}):
                assert (await api.get("/api/executions", params=params)).status_code == 400, params
        async with browser(app, fake) as page:
            html = (await page.get("/executions")).text
            assert "signed in as <strong data-testid=who>admin</strong> (read)" in html
            assert (await page.get("/executions/r-7", params={"at": "²"})).status_code == 200
            denied = await page.post("/executions/r-7/cancel", data={"csrf": _csrf(html)})
            assert denied.status_code == 403 and denied.json()["missing_scope"] == "operate"
        async with browser(app, ADMIN) as page:
            shown = await page.get("/approvals")
            assert shown.headers["x-frame-options"] == "DENY"
            assert "frame-ancestors 'none'" in shown.headers["content-security-policy"]
            seq = (await db_store.list_pending())[0].seq
            blank = await page.post("/approvals/decide", data={"csrf": _csrf(shown.text), "execution_id": "r-7",
                                                              "path": PATH, "seq": str(seq), "approver": "a"})
            assert blank.status_code == 303
            assert "Press Approve or Reject" in (await page.get("/approvals")).text
    assert await pending_paths(db_store) == [("r-7", PATH)]  # nothing above claimed or cancelled it
    assert (await db_store.get_execution("r-7")).status == "paused"  # type: ignore[union-attr]
    assert await db_store.get_execution("r-7b") is None


async def test_an_open_stream_ends_once_its_token_is_revoked(db_store: Store) -> None:
    from tether.runtime.ops import _sse

    await paused(db_store, "r-8")  # paused: its stream stays open until the run ends
    live = {"yes": True}

    async def allowed() -> bool:
        return live["yes"]

    response = await _sse.event_response(db_store, "r-8", after=0, until="finished", keepalive=0.05,
                                         allowed=allowed)
    chunks = []
    with anyio.fail_after(30):
        async for chunk in response.body_iterator:
            chunks.append(chunk)
            if chunk == ": keepalive\n\n":
                live["yes"] = False  # revoked: the next check ends the stream
    assert any(str(c).startswith("id: ") for c in chunks)  # the journal's events came first
    assert chunks.count(": keepalive\n\n") == 1


async def test_a_fork_that_rewrites_a_decision_names_who_forked(db_store: Store) -> None:
    await paused(db_store, "r-9")
    alice = await create_token(db_store, "alice", ["approve"])
    async with console(db_store, runners=()) as app, client(app, alice) as by_alice, client(app, ADMIN) as api:
        decided = await by_alice.post("/api/executions/r-9/resume", json={"approved": True})
        assert decided.status_code == 202
        resumed = next(e for e in await db_store.read_journal("r-9") if e.kind == "resumed")
        assert resumed.payload["by"] == "api:alice"  # type: ignore[index, call-overload]
        forked = await api.post("/api/executions/r-9/fork",
                                json={"at": resumed.seq, "as": "r-9-no", "update": {"approved": False}})
        assert forked.status_code == 201, forked.text
    journal = await db_store.read_journal("r-9-no")
    [decision] = [e.payload for e in journal if e.kind == "resumed"]
    assert decision["value"]["approved"] is False  # type: ignore[index, call-overload]
    assert decision["by"] == "api:admin"  # type: ignore[index, call-overload]
    assert journal[-1].label == "fork" and journal[-1].payload["by"] == "api:admin"  # type: ignore[index, call-overload]
