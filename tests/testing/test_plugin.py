"""The pytest plugin as a user's project meets it: off by default, on when asked, clear about Postgres."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

USER_TEST = """
import pytest
from tether.actors import Chain

@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request):
    return request.param

def double(state):
    return {"n": state["n"] * 2}

@pytest.mark.anyio
async def test_double(tether_store):
    result = await Chain("double", [double], store=tether_store).run({"n": 2}, execution_id="d")
    assert result.output == {"n": 4}
"""


def test_it_is_off_until_the_project_turns_it_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(USER_TEST)
    result = pytester.runpytest()
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*fixture 'tether_store' not found*"])


def test_tether_on_the_command_line_runs_one_body_on_both_backends_and_every_store(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, postgres_dsn: str
) -> None:
    monkeypatch.setenv("TETHER_TEST_POSTGRES_DSN", postgres_dsn)
    pytester.makepyfile(USER_TEST)
    result = pytester.runpytest("--tether", "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["tether: tether_store?postgres? uses postgresql://*",
                                 "*test_double*asyncio-memory*PASSED*", "*test_double*trio-postgres*PASSED*"])


def test_without_a_server_the_postgres_cases_skip_and_say_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_TEST_POSTGRES_DSN", "")  # none, as on a laptop without a server
    pytester.makeini("[pytest]\ntether_testing = true\n")
    pytester.makepyfile(USER_TEST)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=4, skipped=2)
    result.stdout.fnmatch_lines(["tether: no Postgres server for tether_store?postgres?: set TETHER_TEST_POSTGRES_DSN=*",
                                 "SKIPPED*no Postgres server for tether_store*"])


def test_a_project_can_require_postgres(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_TEST_POSTGRES_DSN", "")
    pytester.makeini("[pytest]\ntether_testing = true\ntether_postgres = required\n")
    pytester.makepyfile(USER_TEST)
    result = pytester.runpytest()
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(["*no Postgres server for tether_store*tether_postgres = 'required'*"])
