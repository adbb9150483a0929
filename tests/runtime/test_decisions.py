"""A decision never approves by accident, and is checked against the model its interrupt expects.

An approval gate fails closed: a decision that does not say ``approved`` is
refused before it consumes the pending interrupt, through the API, the HTTP
server and the CLI alike. A custom decision model is found by the process that
checks the decision even when it loaded the code under another module name.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic import ValidationError
from tether.runtime import Resume
from tether.runtime.ops import create_app
from tether.stores import Store, open_store

from tests.operator._flows import refund

PATH = "chain:refund/node:approve"
TETHER = str(Path(sys.executable).with_name("tether"))


async def paused(store: Store, execution_id: str) -> None:
    refund.store = store
    assert (await refund.run({"amount": 50_000}, execution_id=execution_id)).status == "paused"


async def still_pending(store: Store, execution_id: str) -> bool:
    execution = await store.get_execution(execution_id)
    assert execution is not None and execution.status == "paused"
    return [p.agent_path for p in await store.list_pending(execution_id=execution_id)] == [PATH]


def test_a_resume_that_does_not_say_approved_cannot_be_built() -> None:
    with pytest.raises(ValidationError, match="approved"):
        Resume()  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="approved"):
        Resume(metadata={"note": "looks fine"})  # type: ignore[call-arg]


@pytest.mark.parametrize("decision", [{}, {"metadata": {"note": "fine"}}, {"approve": True}])
async def test_an_empty_decision_is_refused_and_the_interrupt_stays(db_store: Store, decision: dict[str, Any]) -> None:
    await paused(db_store, "e-1")
    with pytest.raises(ValidationError, match="approved"):
        await refund.resume("e-1", decision)
    assert await still_pending(db_store, "e-1")
    done = await refund.resume("e-1", {"approved": False})
    assert done.status == "completed" and done.output["charged"] == 0  # type: ignore[index]


async def test_the_api_answers_422_to_an_empty_decision(db_store: Store) -> None:
    await paused(db_store, "e-2")
    app = create_app(db_store, [refund])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            for body in ({}, {"metadata": {"note": "ok"}}):
                answer = await client.post("/api/executions/e-2/resume", json=body)
                assert answer.status_code == 422, answer.text
                assert "approved" in answer.json()["detail"]
    assert await still_pending(db_store, "e-2")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_cli_refuses_a_decision_without_approved(tmp_path: Path, backend: str) -> None:
    url = f"sqlite:///{tmp_path / 'd.db'}"

    async def setup() -> None:
        async with open_store(url) as store:
            await paused(store, "e-3")

    anyio.run(setup)
    done = subprocess.run([TETHER, "--store", url, "--backend", backend, "resume", "e-3",
                           "--set", "metadata.note=looks fine"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Not a valid decision" in done.stderr and "approved" in done.stderr

    async def check() -> bool:
        async with open_store(url) as store:
            return await still_pending(store, "e-3")

    assert anyio.run(check)


# -- a decision model of the application's own -------------------------------------------------

FLOW = textwrap.dedent('''
    """A chain whose approval expects a decision model of its own, with its own default."""
    import sys
    import anyio
    from pydantic import BaseModel
    from tether.actors import Chain
    from tether.runtime import interrupt
    from tether.stores import open_store


    class Limit(BaseModel):
        approved: bool = False  # this gate's own default: refuse
        limit: int


    def approve(state):
        decision = interrupt("set_limit", {"asked": state["amount"]}, expect=Limit)
        return {"approved": decision.approved, "limit": decision.limit}


    chain = Chain("limits", [approve])
    runners = [chain]


    async def main(url):
        async with open_store(url) as store:
            chain.store = store
            print((await chain.run({"amount": 70}, execution_id="l-1")).status)


    if __name__ == "__main__":
        anyio.run(main, sys.argv[1])
''')


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_custom_decision_model_is_found_under_another_module_name(tmp_path: Path, backend: str) -> None:
    (tmp_path / "limits_flow.py").write_text(FLOW)
    url = f"sqlite:///{tmp_path / 'l.db'}"
    run = subprocess.run([sys.executable, "limits_flow.py", url], capture_output=True, text=True, timeout=60,
                         check=False, cwd=tmp_path)  # the model is __main__.Limit here
    assert run.stdout.strip() == "paused", run.stderr

    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TETHER, "--store", url, "--backend", backend, *args], capture_output=True,
                              text=True, timeout=60, check=False, cwd=tmp_path)

    # Without the application's code the decision cannot be checked: refused, nothing claimed.
    blind = tether("resume", "l-1", "--set", "limit=50")
    assert blind.returncode == 1
    said = " ".join(blind.stderr.split())  # as wrapped to the terminal
    assert "does not define" in said and "Limit" in said
    # With it (module limits_flow): checked against Limit, whose own default is to refuse.
    wrong = tether("resume", "l-1", "--set", "limit=fifty", "--app", "limits_flow:runners")
    assert wrong.returncode == 2 and "limit" in wrong.stderr
    # Recorded only (--detach), but checked against Limit all the same: the app is loaded for it.
    recorded = tether("resume", "l-1", "--set", "limit=50", "--app", "limits_flow:runners", "--detach", "--json")
    assert recorded.returncode == 0, recorded.stderr
    assert json.loads(recorded.stdout)["status"] == "decided"
    done = tether("recover", "l-1", "--app", "limits_flow:runners", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == {"amount": 70, "approved": False, "limit": 50}
