"""Two versions of a refund chain, and the processes of a deploy between them (test_deploy.py).

Version 2 renamed the ``approve`` node ``sign_off`` (a change a v1 journal cannot be
replayed against) and charges differently. ``--app`` lists: ``v1``, ``both``, ``v2``.

Usage: python _versions_app.py STORE BACKEND MODE APP [ARG...]

- ``start N``: N runs on v1; even ones pause at approve, odd ones also pass it and pause at audit;
- ``refuse``: try to approve every run paused on v1; print the refusals;
- ``serve ID...``: approve those runs to their end while 5 new runs start; print both;
- ``finish``: approve every paused run to its end; print the outputs.
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any

import anyio
from tether.actors import Chain
from tether.runtime import Migration, Resume, interrupt
from tether.runtime._executions.runner import newest
from tether.runtime.ops._operator import Operator
from tether.stores import ConfigurationError, open_store


def validate(state: dict[str, Any]) -> dict[str, Any]:
    return {"valid": True}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"amount": state["amount"]}).approved}


def sign_off(state: dict[str, Any]) -> dict[str, Any]:
    return {"approved": interrupt("manager_approval", {"amount": state["amount"]}).approved, "signed": True}


def audit(state: dict[str, Any]) -> dict[str, Any]:
    if state["amount"] > 1000:
        return {"audited": interrupt("audit", {"amount": state["amount"]}).approved}
    return {"audited": None}


def charge_v1(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": "v1"}


def charge_v2(state: dict[str, Any]) -> dict[str, Any]:
    return {"charged": "v2"}


def _chain(version: str) -> Chain:
    chain = Chain("refund", version=version)
    chain.add_node(validate)
    chain.add_node(approve if version == "1" else sign_off)
    chain.add_node(audit)
    chain.add_node(charge_v1 if version == "1" else charge_v2, "charge")
    names = ["validate", "approve" if version == "1" else "sign_off", "audit", "charge"]
    for a, b in itertools.pairwise(names):
        chain.add_edge(a, b)
    return chain


refund_v1, refund_v2 = _chain("1"), _chain("2")


@refund_v2.migrate(from_version="1")
def approve_became_sign_off(run: Migration) -> None:
    run.rename("node:approve", "node:sign_off")


v1 = [refund_v1]
both = [refund_v1, refund_v2]
v2 = [refund_v2]


async def _to_the_end(op: Operator, execution_id: str) -> Any:
    result = await op.resume(execution_id, Resume(approved=True), by="deploy-test")
    while result.status == "paused":
        result = await op.resume(execution_id, Resume(approved=True), by="deploy-test")
    return result.output


async def main(url: str, mode: str, app: str, args: list[str]) -> Any:
    runners = {"v1": v1, "both": both, "v2": v2}[app]
    async with open_store(url) as store:
        for runner in runners:
            runner.store = store
        op = Operator(store, runners)
        if mode == "start":
            paused = {}
            for i in range(int(args[0])):
                execution_id = f"d-{i:02}"
                result = await refund_v1.run({"amount": 5000 if i % 2 else 500}, execution_id=execution_id)
                if i % 2:
                    result = await refund_v1.resume(execution_id, Resume(approved=True))
                assert result.pending_interrupt is not None
                paused[execution_id] = result.pending_interrupt.agent_path
            return paused
        waiting = sorted({row.execution_id for row in await store.list_pending(limit=1000)})
        if mode == "refuse":
            refused = {}
            for execution_id in waiting:
                execution = await store.get_execution(execution_id)
                if execution is None or execution.version != "1":
                    continue  # only the old runs are tried
                try:
                    await op.resume(execution_id, Resume(approved=True))
                except ConfigurationError as exc:
                    refused[execution_id] = str(exc)
            return refused
        if mode == "finish":
            return {execution_id: await _to_the_end(op, execution_id) for execution_id in waiting}
        assert mode == "serve"
        outputs: dict[str, Any] = {}
        started: dict[str, Any] = {}

        async def finish(execution_id: str) -> None:
            outputs[execution_id] = await _to_the_end(op, execution_id)

        async def start(n: int) -> None:
            result = await newest(runners).run({"amount": 50}, execution_id=f"new-{n}")
            execution = await store.get_execution(f"new-{n}")
            assert result.pending_interrupt is not None and execution is not None
            started[f"new-{n}"] = [result.pending_interrupt.agent_path, execution.version]

        async with anyio.create_task_group() as tg:
            for execution_id in args:
                tg.start_soon(finish, execution_id)
            for n in range(5):
                tg.start_soon(start, n)
        return {"outputs": outputs, "started": started}


if __name__ == "__main__":
    url, backend, mode, app, *rest = sys.argv[1:]
    print(json.dumps(anyio.run(main, url, mode, app, rest, backend=backend)), flush=True)
