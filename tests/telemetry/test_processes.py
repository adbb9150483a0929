"""One trace per execution across processes, exported over OTLP/HTTP configured only by OTEL_* variables.

Process A (``python -m``) runs the supervisor to its pause, or dies by SIGKILL
in its middle; process B, the installed ``tether`` command, resumes or
recovers it. Both export to a receiver this test runs on 127.0.0.1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from tether.stores import open_store

from ._otlp import OTLPReceiver

ROOT = Path(__file__).resolve().parents[2]
TETHER = str(Path(sys.executable).parent / "tether")
APP = "tests.telemetry._programs:support"
CASES = [pytest.param("sqlite", "asyncio", "trio", id="sqlite-asyncio-then-trio"),
         pytest.param("postgres", "trio", "asyncio", id="postgres-trio-then-asyncio")]


def store_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'traced.db'}"
    return f"{request.getfixturevalue('postgres_dsn')}?schema={request.getfixturevalue('pg_schema')}"


def environment(otlp: OTLPReceiver, service: str, **more: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("OTEL_", "TETHER_TELEMETRY", "TETHER_FAULTS"))}
    return {**env, "PYTHONPATH": str(ROOT), "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint,
            "OTEL_SERVICE_NAME": service, **more}


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def trace_of(url: str, execution_id: str) -> str:
    async def read() -> str:
        async with open_store(url) as store:
            execution = await store.get_execution(execution_id)
            assert execution is not None and execution.trace is not None
            return execution.trace

    return anyio.run(read)


@pytest.mark.parametrize(("kind", "first", "second"), CASES)
def test_the_process_that_resumes_continues_the_trace(kind: str, first: str, second: str,
                                                      request: pytest.FixtureRequest, tmp_path: Path) -> None:
    url = store_url(kind, request, tmp_path)
    with OTLPReceiver() as otlp:
        paused = run([sys.executable, "-m", "tests.telemetry._programs", url, "r1", first],
                     environment(otlp, "process-a"))
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout.strip() == "paused"
        resumed = run([TETHER, "resume", "r1", "--set", "approved=true", "--app", APP, "--store", url,
                       "--backend", second], environment(otlp, "process-b"))
        assert resumed.returncode == 0, resumed.stderr
        got = otlp.got
    [ran] = got.named("run Supervisor[planner]")
    [continued] = got.named("resume Supervisor[planner]")
    assert (ran.service, continued.service) == ("process-a", "process-b")
    assert continued.trace_id == ran.trace_id and continued.parent_id == ran.span_id
    assert {span.trace_id for span in got.spans} == {ran.trace_id}
    assert {span.service for span in got.spans} == {"process-a", "process-b"}
    assert ran.attributes["tether.status"] == "paused" and continued.attributes["tether.status"] == "completed"
    assert trace_of(url, "r1") == f"00-{ran.trace_id}-{ran.span_id}-03"
    # Metrics went the same way: B counted its boundaries and the run it completed.
    assert got.metrics["tether.boundaries"]
    completed = [p for p in got.metrics["tether.executions"]
                 if {a.key: a.value.string_value for a in p.attributes}.get("tether.status") == "completed"]
    assert [p.as_int for p in completed] == [1]


@pytest.mark.parametrize(("kind", "first", "second"), CASES)
def test_the_process_that_recovers_a_killed_run_continues_its_trace(kind: str, first: str, second: str,
                                                                    request: pytest.FixtureRequest,
                                                                    tmp_path: Path) -> None:
    url = store_url(kind, request, tmp_path)
    with OTLPReceiver() as otlp:
        killed = run([sys.executable, "-m", "tests.telemetry._programs", url, "r2", first],
                     environment(otlp, "process-a", TETHER_FAULTS="at:delegate:1"))
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        journaled = trace_of(url, "r2")  # written with the execution row, before anything ran
        recovered = run([TETHER, "recover", "r2", "--app", APP, "--store", url, "--backend", second],
                        environment(otlp, "process-b"))
        assert recovered.returncode == 0, recovered.stderr
        got = otlp.got
    _, trace_id, span_id, _ = journaled.split("-")
    [recovery] = got.named("recover Supervisor[planner]")
    assert (recovery.trace_id, recovery.parent_id) == (trace_id, span_id)
    assert recovery.attributes["tether.status"] == "paused"
    assert {span.trace_id for span in got.spans} == {trace_id}
    # A killed process exports nothing: its own spans are lost, and the trace goes on without them.
    assert {span.service for span in got.spans} == {"process-b"}
    takeovers = [{a.key: a.value.string_value for a in p.attributes} for p in got.metrics["tether.lease.takeovers"]]
    assert takeovers == [{"tether.takeover.reason": "dead"}]
