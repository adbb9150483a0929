"""The operator console with scoped tokens: a support agent who may approve only the planner's refunds.

    python examples/operator_console.py            # pause two runs, make a token, serve the console
    python examples/operator_console.py --check    # the same, then act as the token over HTTP and exit

It pauses a planner (its auditor's refund waits at
``supervisor:planner/worker:auditor/tool:approve_refund``) and a refund chain
(``chain:refund/node:approve``), makes the token ``support`` limited to
approving under ``supervisor:planner/``, and serves the console on
http://127.0.0.1:8765/executions with an admin token. Log in with either: the
admin sees every form, ``support`` only the planner's. ``--check`` instead makes
the requests a support agent's tool would: its approval of the chain is refused
with 403 (nothing consumed), its approval of the planner's refund is accepted,
and the journal names the token. The store is ``$TETHER_STORE``, else
``sqlite:///tether.db``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from typing import Any

import anyio
import httpx
from tether.actors import Agent, Chain, ScriptedLLM, Supervisor, ToolCall, Worker
from tether.runtime import interrupt
from tether.runtime.ops import create_app, create_token
from tether.stores import Store, open_store

DEFAULT_STORE = "sqlite:///tether.db"


def approve_refund(order: str, amount: int) -> str:
    """Refund an order once a manager agrees."""
    return "refunded" if interrupt("manager_approval", {"order": order, "amount": amount}).approved else "refused"


def audit(messages: list[Any]) -> Any:
    if messages[-1].role == "user":
        return ToolCall("approve_refund", {"order": "R-7", "amount": 42_000})
    return f"R-7: {messages[-1].content}"


def plan(messages: list[Any]) -> Any:
    if messages[-1].role == "user":
        return ToolCall("delegate_to_auditor", {"task": "Refund order R-7."})
    return f"Done: {messages[-1].content}"


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "approved": interrupt("manager_approval", {"amount": state["amount"]}).approved}


auditor = Agent("auditor", system_prompt="Process refunds.", tools=[approve_refund], llm=ScriptedLLM(audit))
planner = Supervisor("planner", system_prompt="Delegate refunds.", llm=ScriptedLLM(plan),
                     workers=[Worker(auditor, "auditor", "Processes refunds.")])
refund = Chain("refund", [approve])
runners = [planner, refund]


async def prepare(store: Store) -> str:
    """Two paused runs (new ids each time) and a token for them; the token's secret."""
    suffix = secrets.token_hex(3)
    for runner, given in ((planner, "Refund order R-7."), (refund, {"amount": 50_000})):
        runner.store = store
        result = await runner.run(given, execution_id=f"{runner.name}-{suffix}")
        print(f"{result.execution_id}: {result.status}, waiting at {', '.join(p.agent_path for p in result.pending)}")
    name = f"support-{suffix}"
    secret = await create_token(store, name, ["approve"], ["supervisor:planner/"])
    print(f"token {name} (approve under supervisor:planner/): {secret}")
    return secret


async def check(store: Store, secret: str, admin: str) -> int:
    """Act as the support token over HTTP, in process: refused outside its prefix, accepted inside."""
    app = create_app(store, runners, token=admin)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://console",
            headers={"authorization": f"Bearer {secret}"}) as http:
        for row in await store.list_pending():
            answer = await http.post(f"/api/executions/{row.execution_id}/resume", json={"approved": True},
                                     params={"path": row.agent_path, "seq": row.seq})
            print(f"{row.agent_path}: {answer.status_code} {answer.json()['detail']}")
            if answer.status_code == 202:
                with anyio.fail_after(30):
                    await app.state.settled[row.execution_id].wait()
                journal = await store.read_journal(row.execution_id)
                print("  decided by", next(e.payload["by"] for e in journal if e.kind == "resumed"))  # type: ignore[index, call-overload]
    return 0


async def main(args: argparse.Namespace) -> int:
    admin = os.environ.get("TETHER_TOKEN") or secrets.token_urlsafe(24)
    async with open_store(args.store) as store:
        secret = await prepare(store)
        if args.check:
            return await check(store, secret, admin)
    print(f"admin token: {admin}\nserving http://127.0.0.1:8765/executions (Ctrl-C stops)", flush=True)
    os.execvp(sys.executable, [sys.executable, "-m", "tether.runtime.ops", "--store", args.store, "--backend",
                               args.backend, "serve", "--app", "examples.operator_console:runners",
                               "--token", admin])
    return 0  # not reached: the server replaced this process


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE", DEFAULT_STORE))
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--check", action="store_true", help="Act as the token over HTTP, then exit.")
    options = parser.parse_args()
    sys.exit(anyio.run(main, options, backend=options.backend))
