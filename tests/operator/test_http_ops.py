"""``tether.runtime.ops``: the public home of `create_app`, mounted as its docstring teaches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from urllib.parse import quote, urlsplit

import anyio
import httpx
import pytest
import tether.runtime.ops
import tether.runtime.ops._http
from starlette.applications import Starlette
from starlette.routing import Mount
from tether.runtime.ops import create_app
from tether.stores import Store

from ._flows import refund
from .test_http import paused


def test_the_public_module_exports_create_app_and_create_token() -> None:
    assert tether.runtime.ops.__all__ == ("SCOPES", "create_app", "create_token")
    assert tether.runtime.ops.create_app is tether.runtime.ops._http.create_app
    assert tether.runtime.ops.SCOPES == ("read", "approve", "operate", "admin")
    assert "Mount(" in (tether.runtime.ops.__doc__ or "")


class _Fields(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__()
        self.links: list[str] = []
        self.action = ""
        self.hidden: dict[str, str] = {}
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        fields = {name: value or "" for name, value in attrs}
        if tag == "a":
            self.links.append(fields["href"])
        elif tag == "form":
            self.deciding = fields["action"].endswith("/decide")  # the decision's form, not a filter or bulk
            self.action = self.action or (fields["action"] if self.deciding else "")
        elif tag == "input" and fields.get("type") == "hidden" and getattr(self, "deciding", False):
            self.hidden[fields["name"]] = fields["value"]


async def test_mounted_under_a_path_the_pages_stay_under_it_and_runs_continue(db_store: Store) -> None:
    await paused(db_store, "m/1")
    tether_app = create_app(db_store, [refund])

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with tether_app.router.lifespan_context(tether_app):
            yield

    host = Starlette(lifespan=lifespan, routes=[Mount("/tether", app=tether_app)])
    async with host.router.lifespan_context(host), httpx.AsyncClient(
        transport=httpx.ASGITransport(app=host), base_url="http://testserver"
    ) as client:
        assert (await client.get("/tether/")).headers["location"] == "/tether/executions"
        page = _Fields((await client.get("/tether/approvals")).text)
        assert f"/tether/executions/{quote('m/1', safe='')}" in page.links
        assert page.action == "/tether/approvals/decide"
        timeline = _Fields((await client.get(f"/tether/executions/{quote('m/1', safe='')}")).text)
        assert "/tether/approvals" in timeline.links

        done = await client.post(page.action, data={**page.hidden, "approver": "alice", "decision": "approve"})
        assert done.status_code == 303
        location = urlsplit(done.headers["location"])
        assert location.path == "/tether/approvals"
        assert not location.query  # what it did is shown on the next page, never carried in the URL
        shown = (await client.get(done.headers["location"])).text
        assert "<p class=flash role=status>m/1: approved.</p>" in shown  # continuing: the lifespan ran
        with anyio.fail_after(30):
            await tether_app.state.settled["m/1"].wait()
        view = (await client.get(f"/tether/api/executions/{quote('m/1', safe='')}")).json()
        assert view["execution"]["status"] == "completed"


@pytest.fixture(autouse=True)
def _no_store_left_on_the_runner() -> None:
    refund.store = None
