"""``tether demo``: a supervisor's refund approval, end to end, in real processes, in a few seconds.

A supervisor delegates a $50k refund to a researcher and an auditor at once; the
auditor's tool pauses for a manager. That process exits. The pending approval
is listed with its full path; a second process approves it and the run
completes; a second approval is refused. Then a third process is killed with
SIGKILL in the middle of a delegation, and a fourth recovers the run without
asking the supervisor's LLM again. Everything stays in the store for
``tether show``.

The processes run ``python -m tether.actors._demo STEP ...``; the runners are
`planner` below (``--app tether.actors._demo:planner`` works too).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
from tether.runtime import AlreadyResumed, Resume, idempotency_key, idempotent, interrupt
from tether.stores import open_store

from ._agent import Agent
from ._llm import ScriptedLLM
from ._messages import ToolCall
from ._team import Supervisor, Worker

BLOCK = os.environ.get("TETHER_DEMO_BLOCK", "")


def lookup_order(order: str) -> dict[str, Any]:
    """The order's amount and customer."""
    if BLOCK == "lookup_order":
        # One write: a print() from another tool's thread can land between print's text and its newline.
        sys.stdout.write("inside lookup_order\n")
        sys.stdout.flush()
        anyio.from_thread.run(anyio.sleep_forever)  # the demo kills the process here
    return {"order": order, "amount": 50_000 if order == "R-7" else 900, "customer": "ACME"}


@idempotent
def issue_refund(order: str, amount: int) -> str:
    # The provider drops a repeat of the same idempotency key: a process killed between the
    # refund and tether's record of it is repeated by the next, and the customer is paid once.
    _payments().send(idempotency_key(), order, amount)
    return f"refunded ${amount:,}"


class _Provider:
    """A payment provider, as a file of JSON lines shared by the demo's processes.

    It deduplicates by idempotency key, as a real one does (an Idempotency-Key header).
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def send(self, key: str, order: str, amount: int) -> None:
        with self.path.open("a+") as ledger:
            fcntl.flock(ledger, fcntl.LOCK_EX)  # one process at a time reads, then writes
            ledger.seek(0)
            repeat = any(json.loads(line)["key"] == key for line in ledger if line.strip())
            entry = {"key": key, "order": order, "amount": amount, "by": os.environ.get("TETHER_DEMO_PROCESS", "?"),
                     "repeat": repeat}
            ledger.write(json.dumps(entry) + "\n")
            ledger.flush()
            os.fsync(ledger.fileno())

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


def _payments() -> _Provider:
    return _Provider(os.environ.get("TETHER_DEMO_PAYMENTS", "tether-demo-payments.jsonl"))


def approve_refund(order: str, amount: int) -> str:
    """Refund an order; above $10,000 a manager decides first."""
    if amount > 10_000:
        decision = interrupt("manager_approval", {"order": order, "amount": amount})
        if not decision.approved:
            return "refused by the manager"
    return str(issue_refund(order, amount))


def _planner() -> Supervisor:
    def plan(messages: list[Any]) -> Any:
        task = next(m.content for m in messages if m.role == "user")
        order, amount = ("R-7", 50_000) if "R-7" in task else ("R-8", 900)
        if messages[-1].role == "user":
            return [ToolCall("delegate_to_researcher", {"task": f"Look up order {order}."}),
                    ToolCall("delegate_to_auditor", {"task": f"Refund order {order}: ${amount:,}."})]
        answers = [m.content for m in messages if m.role == "tool"]
        return f"Order {order}: " + "; ".join(answers)

    def research(messages: list[Any]) -> Any:
        if messages[-1].role == "user":
            order = messages[-1].content.split()[-1].rstrip(".")
            return ToolCall("lookup_order", {"order": order})
        found = json.loads(messages[-1].content)
        return f"{found['order']} is ${found['amount']:,} for {found['customer']}"

    def audit(messages: list[Any]) -> Any:
        if messages[-1].role == "user":
            order = "R-7" if "R-7" in messages[-1].content else "R-8"
            return ToolCall("approve_refund", {"order": order, "amount": 50_000 if order == "R-7" else 900})
        return messages[-1].content

    researcher = Agent("researcher", llm=ScriptedLLM(research), tools=[lookup_order])
    auditor = Agent("auditor", llm=ScriptedLLM(audit), tools=[approve_refund])
    return Supervisor("planner", llm=ScriptedLLM(plan),
                      workers=[Worker(researcher, "researcher", "Looks orders up."),
                               Worker(auditor, "auditor", "Processes refunds.")])


planner = _planner()
"""The demo's runner; the store is given when a step runs."""


async def _step(step: str, url: str, execution_id: str) -> None:
    async with open_store(url) as store:
        planner.store = store
        if step == "run":
            order = "R-7" if execution_id.endswith("r7") else "R-8"
            result = await planner.run(f"Handle the refund request for order {order}.", execution_id=execution_id)
        elif step == "approve":
            result = await planner.resume(execution_id, Resume(approved=True, metadata={"approver": "alice"}),
                                          by="demo:alice")
        else:  # at once: the killed process is seen dead on this machine, and its lease taken over
            result = await planner.resume(execution_id)
    calls = planner.agent.llm.calls  # type: ignore[attr-defined]
    print(json.dumps({**result.model_dump(mode="json"), "planner_llm_calls": calls}), flush=True)


def run_demo(url: str, *, backend: str = "asyncio") -> int:
    """Tell the story against the store at ``url``; returns the exit code."""
    with tempfile.TemporaryDirectory(prefix="tether-demo-") as scratch:
        os.environ["TETHER_DEMO_PAYMENTS"] = str(Path(scratch) / "payments.jsonl")  # the children inherit it
        try:
            return _tell(url, backend)
        finally:
            del os.environ["TETHER_DEMO_PAYMENTS"]


def _tell(url: str, backend: str) -> int:
    stamp = time.strftime("%H%M%S")
    first, second = f"demo-{stamp}-r7", f"demo-{stamp}-r8"
    say = _Narrator()
    say.title(f"tether demo: a supervisor, two workers, a $50k refund ({url}, {backend})")

    say.step(f"1. process A runs {first}: the planner delegates to the researcher and the auditor at once")
    paused = _child("run", url, first, backend, "A")
    pending = paused["pending_interrupt"]
    say.line(f"paused at {pending['agent_path']}: {pending['reason']} {json.dumps(pending['context'])}")
    say.line(f"process A exited; its run waits in the store ({paused['planner_llm_calls']} planner LLM call)")

    say.step("2. what an operator sees (tether pending)")
    rows = anyio.run(_pending, url, backend=backend)
    for row in rows:
        say.line(f"{row['execution_id']}  {row['agent_path']}  {row['reason']}")

    say.step("3. process B approves as alice and continues the run")
    done = _child("approve", url, first, backend, "B")
    say.line(f"{done['status']}: {done['output']}")
    say.line(f"the planner's LLM was asked {done['planner_llm_calls']} time in process B: its delegations "
             f"were journaled, only its final turn was new")
    try:
        anyio.run(_approve_again, url, first, backend=backend)
        say.line("a second approval was accepted (this is a bug)")
        return 1
    except AlreadyResumed:
        say.line("bob approves too, a moment later: refused with AlreadyResumed, nothing changed")

    say.step(f"4. process C runs {second} and is killed with SIGKILL in the middle of a delegation")
    _kill_inside(url, second, backend, "C")
    say.line("process C died inside the researcher's lookup_order tool")
    recovered = _child("recover", url, second, backend, "D")
    say.line(f"process D recovered it: {recovered['status']}: {recovered['output']}")
    say.line(f"the planner's LLM was asked {recovered['planner_llm_calls']} time in process D: the "
             f"delegations made before the kill were not decided again")

    say.step("look closer")
    store = url if url != "sqlite:///tether.db" else ""
    flag = f" --store {store}" if store else ""
    say.line(f"tether{flag} show {first}")
    say.line(f"tether{flag} executions")
    return 0


async def _pending(url: str) -> list[dict[str, Any]]:
    async with open_store(url) as store:
        return [p.model_dump(mode="json") for p in await store.list_pending()]


async def _approve_again(url: str, execution_id: str) -> None:
    async with open_store(url) as store:
        planner.store = store
        await planner.resume(execution_id, Resume(approved=True, metadata={"approver": "bob"}))


def _child(step: str, url: str, execution_id: str, backend: str, name: str) -> dict[str, Any]:
    told = len(_payments().entries())
    done = subprocess.run([sys.executable, "-m", "tether.actors._demo", step, url, execution_id, backend],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "TETHER_DEMO_PROCESS": name})
    if done.returncode != 0:
        raise RuntimeError(f"demo step {step!r} failed:\n{done.stderr}")
    _payments_since(told)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _kill_inside(url: str, execution_id: str, backend: str, name: str) -> None:
    told = len(_payments().entries())
    env = {**os.environ, "TETHER_DEMO_BLOCK": "lookup_order", "TETHER_DEMO_PROCESS": name}
    with subprocess.Popen([sys.executable, "-m", "tether.actors._demo", "run", url, execution_id, backend],
                          stdout=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:  # wait until it is inside the tool
            if "inside lookup_order" in line:
                break
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    # The auditor, in parallel, may have refunded before the kill: the provider says who sent what.
    _payments_since(told)


def _payments_since(told: int) -> None:
    """Tell what the payment provider received since ``told`` entries, and from which process."""
    for entry in _payments().entries()[told:]:
        what = f"refund of ${entry['amount']:,} for {entry['order']}"
        if entry["repeat"]:
            print(f"      process {entry['by']}: $ {what} asked again after the crash; the provider dropped "
                  f"the repeat (same idempotency key)", flush=True)
        else:
            print(f"      process {entry['by']}: $ {what} sent (once, whatever happens)", flush=True)


class _Narrator:
    def title(self, text: str) -> None:
        print(f"\n{text}\n{'=' * len(text)}", flush=True)

    def step(self, text: str) -> None:
        print(f"\n{text}", flush=True)

    def line(self, text: str) -> None:
        print(f"   {text}", flush=True)


if __name__ == "__main__":
    step_name, store_url, run_id, backend_name = sys.argv[1:5]
    anyio.run(_step, step_name, store_url, run_id, backend=backend_name)
