"""The HTTP API and pages in process (httpx over ASGI, lifespan running), on SQLite and Postgres, both backends."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from tether.runtime.ops._http import create_app
from tether.stores import Store

from ._flows import changed, refund

PATH = "chain:refund/node:approve"


@asynccontextmanager
async def serving(store: Store, runners: Sequence[Any] = (refund,), **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(store, list(runners), **options)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


async def paused(store: Store, execution_id: str, **state: Any) -> None:
    refund.store = store
    result = await refund.run({"amount": 50_000, **state}, execution_id=execution_id)
    assert result.status == "paused"


async def settled(client: httpx.AsyncClient, execution_id: str) -> None:
    with anyio.fail_after(30):
        await client.app.state.settled[execution_id].wait()  # type: ignore[attr-defined]


async def test_pending_and_an_execution(db_store: Store) -> None:
    await paused(db_store, "h-1")
    async with serving(db_store) as client:
        rows = (await client.get("/api/pending")).json()
        assert [(r["execution_id"], r["agent_path"]) for r in rows] == [("h-1", PATH)]
        assert (await client.get("/api/pending", params={"path_prefix": "agent:"})).json() == []
        view = (await client.get("/api/executions/h-1")).json()
        assert view["execution"]["status"] == "paused"
        assert [p["agent_path"] for p in view["pending"]] == [PATH]
        assert "node:validate" in [e["label"] for e in view["journal"]]
        missing = await client.get("/api/executions/nope")
        assert missing.status_code == 404
        assert "nope" in missing.json()["detail"]


async def test_resume_is_accepted_then_continued_and_a_second_is_refused(db_store: Store) -> None:
    await paused(db_store, "h-2")
    async with serving(db_store) as client:
        first = await client.post("/api/executions/h-2/resume", json={"approved": True,
                                                                      "metadata": {"approver": "alice"}})
        assert first.status_code == 202
        assert first.json() == {"execution_id": "h-2", "status": "accepted", "continuing": True,
                                "detail": "Decision recorded; this server continues the run."}
        again = await client.post("/api/executions/h-2/resume", json={"approved": False})
        assert again.status_code == 409
        assert "already resumed" in again.json()["detail"]
        await settled(client, "h-2")
    execution = await db_store.get_execution("h-2")
    assert execution is not None
    assert execution.status == "completed"
    assert execution.result["approver"] == "alice"  # type: ignore[index, call-overload]


async def test_two_concurrent_approvals_one_wins(db_store: Store) -> None:
    await paused(db_store, "h-3")
    codes: list[int] = []
    async with serving(db_store) as client:
        async def click(approver: str) -> None:
            answer = await client.post("/api/executions/h-3/resume",
                                       json={"approved": True, "metadata": {"approver": approver}})
            codes.append(answer.status_code)

        async with anyio.create_task_group() as tg:
            tg.start_soon(click, "alice")
            tg.start_soon(click, "bob")
        await settled(client, "h-3")
    assert sorted(codes) == [202, 409]


async def test_bad_requests_consume_nothing(db_store: Store) -> None:
    await paused(db_store, "h-4")
    async with serving(db_store) as client:
        resume = "/api/executions/h-4/resume"
        invalid = await client.post(resume, json={"approved": "maybe"})
        assert invalid.status_code == 422
        assert "nothing was claimed" in invalid.json()["detail"]
        malformed = await client.post(resume, content=b"{nope", headers={"content-type": "application/json"})
        assert malformed.status_code == 400
        not_object = await client.post(resume, json=[1, 2])
        assert not_object.status_code == 422
        # A cross-site form can send text/plain without a preflight: refused.
        plain = await client.post(resume, content=b'{"approved": true}', headers={"content-type": "text/plain"})
        assert plain.status_code == 415
        unknown = await client.post("/api/executions/nope/resume", json={"approved": True})
        assert unknown.status_code == 404
        wrong_path = await client.post(resume, params={"path": "chain:refund/node:other"}, json={"approved": True})
        assert wrong_path.status_code == 409
    assert [p.agent_path for p in await db_store.list_pending()] == [PATH]


async def test_a_changed_definition_is_refused_before_the_claim(db_store: Store) -> None:
    await paused(db_store, "h-5")
    async with serving(db_store, changed) as client:
        answer = await client.post("/api/executions/h-5/resume", json={"approved": True})
        assert answer.status_code == 409
        assert "changed" in answer.json()["detail"]
    assert [p.agent_path for p in await db_store.list_pending()] == [PATH]


async def test_without_the_runner_the_decision_waits_for_a_recovery(db_store: Store) -> None:
    await paused(db_store, "h-6")
    async with serving(db_store, runners=()) as client:
        answer = await client.post("/api/executions/h-6/resume", json={"approved": True})
        assert answer.status_code == 202
        assert answer.json()["continuing"] is False
    assert await db_store.list_pending() == []
    refund.store = db_store
    assert (await refund.resume("h-6")).status == "completed"  # the recorded decision is carried out


async def test_a_token_guards_the_api_and_the_pages(db_store: Store) -> None:
    await paused(db_store, "h-7")
    async with serving(db_store, token="s3cret") as client:
        assert (await client.get("/api/pending")).status_code == 401
        assert (await client.get("/api/pending", headers={"authorization": "Bearer wrong"})).status_code == 401
        assert (await client.post("/api/executions/h-7/resume", json={"approved": True})).status_code == 401
        ok = await client.get("/api/pending", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        page = await client.get("/approvals")
        assert page.status_code == 303
        assert page.headers["location"] == "/login"
        login_page = await client.get("/login")
        csrf = _csrf(login_page.text)
        bad = await client.post("/login", data={"csrf": csrf, "token": "guess"})
        assert bad.status_code == 401
        good = await client.post("/login", data={"csrf": csrf, "token": "s3cret"})
        assert good.status_code == 303
        assert (await client.get("/approvals")).status_code == 200
    assert [p.agent_path for p in await db_store.list_pending()] == [PATH]


async def test_the_approval_form_needs_its_csrf_token(db_store: Store) -> None:
    await paused(db_store, "h-8")
    async with serving(db_store) as client:
        page = await client.get("/approvals")
        csrf = _csrf(page.text)
        form = {"execution_id": "h-8", "path": PATH, "seq": _seq(page.text), "approver": "alice",
                "decision": "approve"}
        forged = await client.post("/approvals/decide", data=form)
        assert forged.status_code == 403
        wrong = await client.post("/approvals/decide", data={**form, "csrf": "0" * 32})
        assert wrong.status_code == 403
        assert [p.agent_path for p in await db_store.list_pending()] == [PATH]
        done = await client.post("/approvals/decide", data={**form, "csrf": csrf})
        assert done.status_code == 303
        assert done.headers["location"] == "/approvals"
        assert "h-8: approved." in (await client.get("/approvals")).text
        await settled(client, "h-8")
        timeline = await client.get("/executions/h-8")
        assert 'data-testid=status>completed<' in timeline.text


async def test_context_is_escaped_on_the_page(db_store: Store) -> None:
    await paused(db_store, "h-9", note="<script>alert('owned')</script><img src=x onerror=alert(1)>")
    async with serving(db_store) as client:
        page = (await client.get("/approvals")).text
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in page
        timeline = (await client.get("/executions/h-9")).text
        assert "<script>alert" not in timeline


def _csrf(html: str) -> str:
    match = re.search(r"name=csrf value='([0-9a-f]+)'", html)
    assert match is not None, html
    return match.group(1)


def _seq(html: str) -> str:
    match = re.search(r"name=seq value='(\d+)'", html)
    assert match is not None, html
    return match.group(1)


@pytest.fixture(autouse=True)
def _no_store_left_on_the_runner() -> None:
    refund.store = None


async def test_a_fork_over_the_api_runs_here_and_leaves_the_original(db_store: Store) -> None:
    await paused(db_store, "f-1")
    before = await db_store.read_journal("f-1")
    async with serving(db_store) as client:
        created = await client.post("/api/executions/f-1/fork", json={"at": "node:validate", "as": "f-1b"})
        assert created.status_code == 201, created.text
        assert created.json()["continuing"] is True and created.json()["forked_from"] == "f-1"
        await settled(client, "f-1b")
        view = (await client.get("/api/executions/f-1b")).json()
        assert view["execution"]["status"] == "paused"  # it asks the manager again
        assert [p["agent_path"] for p in view["pending"]] == [PATH]
        again = await client.post("/api/executions/f-1/fork", json={"at": "node:validate", "as": "f-1b"})
        assert again.status_code == 409 and "already exists" in again.json()["detail"]
        nowhere = await client.post("/api/executions/f-1/fork", json={"at": "node:nope", "as": "f-1c"})
        assert nowhere.status_code == 409 and "no boundary 'node:nope'" in nowhere.json()["detail"]
        missing = await client.post("/api/executions/nope/fork", json={"at": 1, "as": "f-1d"})
        assert missing.status_code == 404
        unsaid = await client.post("/api/executions/f-1/fork", json={"at": 1})
        assert unsaid.status_code == 422 and '"as"' in unsaid.json()["detail"]
        odd = await client.post("/api/executions/f-1/fork", json={"at": 1, "as": "f-1e", "effects": "some"})
        assert odd.status_code == 422 and '"reuse"' in odd.json()["detail"]
        not_json = await client.post("/api/executions/f-1/fork", content=b"at=1",
                                     headers={"content-type": "text/plain"})
        assert not_json.status_code == 415
    assert await db_store.read_journal("f-1") == before
    for never in ("f-1c", "f-1d", "f-1e"):
        assert await db_store.get_execution(never) is None


async def test_a_fork_without_the_runner_is_recorded_for_a_worker(db_store: Store) -> None:
    await paused(db_store, "f-2")
    async with serving(db_store, runners=()) as client:
        created = await client.post("/api/executions/f-2/fork", json={"at": 1, "as": "f-2b"})
        assert created.status_code == 201 and created.json()["continuing"] is False
        assert "tether worker" in created.json()["detail"]
    forked = await db_store.get_execution("f-2b")
    assert forked is not None and forked.status == "running" and forked.lease_owner is None
