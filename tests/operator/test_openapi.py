"""The API's OpenAPI document: it lists exactly the app's API routes, and the real server keeps to it.

The fuzz runs schemathesis against a real ``tether serve`` (SQLite under
asyncio, Postgres under trio): requests generated from the document, valid and
not, must never get a 500, and every answer must match the document (its
status, its content type, its body's schema). CI runs a few examples per
operation; ``-m torture`` runs many more.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from starlette.routing import Route
from tether.runtime.ops._http import create_app
from tether.runtime.ops._openapi import document
from tether.stores import MemoryStore

from .conftest import start_paused
from .test_browser import serving

TOKEN = "fuzz-admin-token"
FEW, MANY = 8, 200  # examples per operation: every CI run, and -m torture


def test_the_document_lists_exactly_the_api_routes() -> None:
    app = create_app(MemoryStore(), [])
    routed = {(re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path), method.lower())
              for route in app.routes if isinstance(route, Route) and route.path.startswith("/api/")
              for method in route.methods or () if method != "HEAD"}
    spec = document()
    listed = {(path, method) for path, operations in spec["paths"].items() for method in operations}
    assert listed == routed
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            named = set(re.findall(r"\{(\w+)\}", path))
            assert {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"} == named, (path, method)
            assert operation["responses"], (path, method)


@pytest.fixture(scope="module", params=[("sqlite", "asyncio"), ("postgres", "trio")], ids=["sqlite-asyncio",
                                                                                           "postgres-trio"])
def served_api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    kind, backend = request.param
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'api.db'}"
    else:
        url = f"{request.getfixturevalue('postgres_dsn')}?schema=fuzz_{backend}_{id(request) % 10_000}"
    for execution_id in ("fz-1", "fz-2", "a/b?c"):
        start_paused(url, execution_id)
    with serving(url, backend, "--app", "tests.operator._flows:runners", "--token", TOKEN) as running:
        yield running.base


def fuzz(base: str, examples: int) -> list[str]:
    """Every operation's generated requests, valid and not, sent to the server and checked; what was run."""
    loaded = schemathesis.openapi.from_url(f"{base}/api/openapi.json")
    ran = []
    for result in loaded.get_all_operations():
        operation = result.ok()
        if operation.path.endswith("/events"):
            continue  # a paused execution's stream stays open until it ends: not a request/response to fuzz
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck),
                      database=None)
            def check(case: Any) -> None:
                case.call_and_validate(base_url=base, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)

            try:
                check()
            except Unsatisfiable:
                if mode is GenerationMode.POSITIVE:
                    raise
                # Nothing it takes can be made invalid (no parameters, or strings that take anything).
        ran.append(f"{operation.method.upper()} {operation.path}")
    return ran


def test_the_server_keeps_to_its_document(served_api: str) -> None:
    ran = fuzz(served_api, FEW)
    listed = {f"{method.upper()} {path}" for path, operations in document()["paths"].items() for method in operations}
    # All but the event stream, and the document itself (schemathesis leaves out the one it was read from).
    assert set(ran) == listed - {"GET /api/executions/{execution_id}/events", "GET /api/openapi.json"}


@pytest.mark.torture
@pytest.mark.timeout(1800)
def test_the_server_keeps_to_its_document_at_length(served_api: str) -> None:
    fuzz(served_api, MANY)


def test_the_document_is_served_without_a_token(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'doc.db'}"
    with serving(url, "asyncio", "--token", TOKEN) as running:
        answer = httpx.get(f"{running.base}/api/openapi.json", timeout=30)
        assert answer.status_code == 200 and answer.json()["openapi"].startswith("3.1")
        assert httpx.get(f"{running.base}/api/pending", timeout=30).status_code == 401
