"""Hostile input, generated: the CLI's --set parser and the HTTP API's resume bodies never crash the
server, never consume a pending approval with something that is not a valid decision."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from tether.runtime.ops._http import create_app
from tether.runtime.ops._operator import parse_assignments
from tether.stores import ConfigurationError, MemoryStore

from ._flows import refund

PATH = "chain:refund/node:approve"
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(st.lists(st.text(max_size=30), max_size=6))
def test_the_set_parser_answers_or_refuses_clearly(assignments: list[str]) -> None:
    if all("=" in a and not a.startswith("=") for a in assignments):
        try:
            json.dumps(parse_assignments(assignments))  # whatever it accepts is JSON
        except ConfigurationError as exc:  # a key inside a plain value: said, with the option's name
            refused = str(exc)
            assert "--set" in refused
    else:
        with pytest.raises(ConfigurationError, match="--set"):
            parse_assignments(assignments)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(JSON.map(lambda v: json.dumps(v).encode()), st.binary(max_size=64)))
async def test_resume_bodies_never_consume_a_pending_approval_by_mistake(body: bytes) -> None:
    store = MemoryStore()
    refund.store = store
    assert (await refund.run({"amount": 50_000}, execution_id="f-1")).status == "paused"
    app = create_app(store, [])
    async with app.router.lifespan_context(app), httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        answer = await client.post("/api/executions/f-1/resume", content=body,
                                   headers={"content-type": "application/json"})
    assert answer.status_code in (202, 400, 422), answer.text
    pending = await store.list_pending()
    if answer.status_code == 202:  # a valid decision: it was claimed, exactly once
        value: Any = json.loads(body)
        assert isinstance(value, dict) and pending == []
    else:
        assert [p.agent_path for p in pending] == [PATH]


@pytest.fixture(autouse=True)
def _runner_without_a_store() -> None:
    refund.store = None
