"""RetryPolicy on nodes, tools and LLM calls: journaled attempts, durable backoff, crash recovery.

Backoffs are a few hundredths of a second: waiting them out is the behaviour
under test. The crash test kills a real process during a backoff (0.8 s) and
recovers the run in another.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest
from tether.actors import (
    LLM_RETRY,
    Agent,
    AssistantMessage,
    Chain,
    FunctionTool,
    LLMError,
    MaxTurnsExceeded,
    OpenAIChatLLM,
    ScriptedLLM,
    Supervisor,
    ToolCall,
    ToolMessage,
    Worker,
    retriable_llm_error,
)
from tether.runtime import (
    ConfigurationError,
    Resume,
    RetryPolicy,
    StaleLease,
    StepTimeout,
    StoreUnavailable,
    TetherError,
    UsageError,
    events,
    idempotent,
    interrupt,
    patched,
)

from ._chat_server import Answer, ChatServer, text
from ._crash import Scenario, make_scenario

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tether.actors import Message, ToolSpec
    from tether.stores import JournalEntry, Store

RUNS: Counter[str] = Counter()
RAN_AT: list[datetime] = []
SENT: list[str] = []
FAST = RetryPolicy(max_attempts=3, initial=0.02, jitter=0)


@pytest.fixture(autouse=True)
def _clean() -> None:
    RUNS.clear()
    RAN_AT.clear()
    SENT.clear()


def failures(entries: Sequence[JournalEntry]) -> list[dict[str, Any]]:
    """The journaled failures of retried steps, in order (the last one of a step may have given up)."""
    found = []
    for entry in entries:
        if entry.label == "retry":
            assert isinstance(entry.payload, dict)
            found.append(entry.payload["result"])
    return found


def failing(name: str, times: int, error: type[Exception] = ConnectionError) -> Any:
    """An async node that fails its first ``times`` runs, then returns ``{name: <its run>}``."""

    async def fn(state: Any) -> dict[str, Any]:
        RUNS[name] += 1
        RAN_AT.append(datetime.now().astimezone())
        if RUNS[name] <= times:
            raise error(f"{name} failed (run {RUNS[name]})")
        return {name: RUNS[name]}

    fn.__name__ = name
    return fn


# -- nodes -----------------------------------------------------------------------------------


async def test_a_node_that_fails_twice_then_succeeds_is_journaled_attempt_by_attempt(store: Store) -> None:
    # Waits of 0.04 s, then 0.12 s capped at 0.06 s; each within ±25%.
    policy = RetryPolicy(max_attempts=3, initial=0.04, multiplier=3, maximum=0.06, jitter=0.25)
    chain = Chain("c", store=store)
    chain.add_node(failing("fetch", 2), retry=policy)
    with anyio.fail_after(10):
        done = await chain.run({}, execution_id="twice")
    assert done.status == "completed"
    assert done.output == {"fetch": 3}
    assert RUNS["fetch"] == 3
    journal = await store.read_journal("twice")
    first, second = failures(journal)
    assert [first["attempt"], second["attempt"]] == [1, 2]
    assert not first["gave_up"] and not second["gave_up"]
    assert {f["path"] for f in (first, second)} == {"chain:c/node:fetch"}
    assert [f["error"] for f in (first, second)] == ["ConnectionError"] * 2
    assert [f["message"] for f in (first, second)] == ["fetch failed (run 1)", "fetch failed (run 2)"]
    for failure, wait in ((first, 0.04), (second, 0.06)):
        assert wait * 0.75 <= failure["delay"] <= wait * 1.25
        due, failed_at = datetime.fromisoformat(failure["due"]), datetime.fromisoformat(failure["failed_at"])
        assert due - failed_at == timedelta(seconds=failure["delay"])
    # Each next attempt ran no earlier than the due time journaled before it.
    assert RAN_AT[1] >= datetime.fromisoformat(first["due"])
    assert RAN_AT[2] >= datetime.fromisoformat(second["due"])
    # The waits are durable timers, due when the failures say.
    sleeps = [e.payload["result"] for e in journal if e.label == "sleep" and isinstance(e.payload, dict)]
    assert sleeps == [first["due"], second["due"]]
    assert [e.label for e in journal].count("node:fetch") == 1


async def test_exhausted_attempts_fail_the_execution_with_the_last_error(store: Store) -> None:
    def always(state: Any) -> None:  # sync: it runs in a worker thread, and is retried all the same
        RUNS["always"] += 1
        raise ValueError(f"boom {RUNS['always']}")

    chain = Chain("c", store=store)
    chain.add_node(always, retry=FAST)
    with anyio.fail_after(10):
        done = await chain.run({}, execution_id="exhausted")
    assert done.status == "failed"
    assert done.error == "ValueError: boom 3"
    assert RUNS["always"] == 3
    journaled = failures(await store.read_journal("exhausted"))
    assert [(f["attempt"], f["gave_up"], f["message"]) for f in journaled] == [
        (1, False, "boom 1"), (2, False, "boom 2"), (3, True, "boom 3")]
    assert journaled[-1]["due"] is None


async def test_a_failed_run_continued_later_gives_the_step_a_fresh_set_of_attempts(store: Store) -> None:
    chain = Chain("c", store=store)
    chain.add_node(failing("fetch", 4), retry=FAST)
    with anyio.fail_after(10):
        failed = await chain.run({}, execution_id="continued")
    assert failed.status == "failed" and failed.error == "ConnectionError: fetch failed (run 3)"
    with anyio.fail_after(10):
        done = await chain.retry("continued")  # the outage is over: continue the failed run
    assert done.status == "completed"
    assert done.output == {"fetch": 5}
    assert RUNS["fetch"] == 5  # attempts 4 and 5: a new set of three, of which two were needed
    journaled = failures(await store.read_journal("continued"))
    assert [(f["attempt"], f["gave_up"]) for f in journaled] == [(1, False), (2, False), (3, True), (4, False)]


async def test_an_error_the_policy_does_not_retry_fails_at_once(store: Store) -> None:
    chain = Chain("c", store=store)
    chain.add_node(failing("fetch", 5, KeyError), retry=RetryPolicy(retry_on=(ConnectionError, TimeoutError)))
    done = await chain.run({}, execution_id="filtered")
    assert done.status == "failed"
    assert done.error is not None and done.error.startswith("KeyError:")
    assert RUNS["fetch"] == 1
    assert failures(await store.read_journal("filtered")) == []


async def test_a_predicate_decides_what_is_retried(store: Store) -> None:
    policy = dataclasses.replace(FAST, retry_on=lambda error: "transient" in str(error))

    async def picky(state: Any) -> dict[str, Any]:
        RUNS["picky"] += 1
        if RUNS["picky"] == 1:
            raise RuntimeError("transient glitch")
        raise RuntimeError("permanent")

    chain = Chain("c", store=store)
    chain.add_node(picky, retry=policy)
    done = await chain.run({}, execution_id="predicate")
    assert done.error == "RuntimeError: permanent"
    assert RUNS["picky"] == 2
    journaled = failures(await store.read_journal("predicate"))
    assert [(f["attempt"], f["gave_up"]) for f in journaled] == [(1, False), (2, True)]


async def test_a_node_timeout_is_retried_and_each_attempt_gets_the_whole_timeout(store: Store) -> None:
    async def slow_once(state: Any) -> dict[str, Any]:
        RUNS["slow_once"] += 1
        if RUNS["slow_once"] == 1:
            await anyio.Event().wait()  # nobody sets it: only the timeout ends this attempt
        return {"done": True}

    chain = Chain("c", store=store)
    chain.add_node(slow_once, timeout=0.05, retry=FAST)
    with anyio.fail_after(10):
        done = await chain.run({}, execution_id="timed-out-once")
    assert done.status == "completed"
    [failure] = failures(await store.read_journal("timed-out-once"))
    assert failure["error"] == "StepTimeout"
    assert "timeout=0.05s" in failure["message"]


async def test_a_sibling_that_succeeded_is_not_run_again(store: Store) -> None:
    chain = Chain("c", store=store)
    for name in ("a", "c"):
        chain.add_node(failing(name, 0))
    chain.add_node(failing("b", 1), retry=FAST)
    chain.add_edge("a", "b")
    chain.add_edge("a", "c")
    with anyio.fail_after(10):
        done = await chain.run({}, execution_id="fan-out")
    assert done.status == "completed"
    assert done.output == {"a": 1, "b": 2, "c": 1}
    assert RUNS == {"a": 1, "b": 2, "c": 1}


async def test_interrupt_in_a_retried_node_pauses_and_is_never_retried(store: Store) -> None:
    def approve(state: Any) -> dict[str, Any]:
        RUNS["approve"] += 1
        if RUNS["approve"] == 1:
            raise ConnectionError("flaky before asking")
        return {"approved": interrupt("manager_approval", {"amount": 50_000}).approved}

    chain = Chain("c", store=store)
    chain.add_node(approve, retry=FAST)
    with anyio.fail_after(10):
        paused = await chain.run({}, execution_id="asks")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt.agent_path == "chain:c/node:approve"
    assert RUNS["approve"] == 2  # attempt 1 failed, attempt 2 asked: the pause was not retried
    done = await chain.resume("asks", Resume(approved=True))
    assert done.status == "completed"
    assert done.output == {"approved": True}
    # The resume ran attempt 2 again (a paused call is made again from its start), not attempt 3.
    assert RUNS["approve"] == 3
    assert [f["attempt"] for f in failures(await store.read_journal("asks"))] == [1]


async def test_a_cancelled_execution_is_not_retried(store: Store) -> None:
    started = anyio.Event()

    async def stuck(state: Any) -> None:
        RUNS["stuck"] += 1
        started.set()
        await anyio.Event().wait()

    chain = Chain("c", store=store)
    chain.add_node(stuck, retry=dataclasses.replace(FAST, retry_on=BaseException))
    results: list[Any] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                results.append(await chain.run({}, execution_id="cancelled"))

            tg.start_soon(run)
            await started.wait()
            await chain.cancel("cancelled", reason="enough")
    assert results[0].status == "cancelled"
    assert RUNS["stuck"] == 1
    assert failures(await store.read_journal("cancelled")) == []


async def test_a_cancel_during_the_backoff_ends_the_run_before_the_next_attempt(store: Store) -> None:
    failed = anyio.Event()

    async def down(state: Any) -> None:
        RUNS["down"] += 1
        failed.set()
        raise ConnectionError("down")

    chain = Chain("c", store=store)
    chain.add_node(down, retry=RetryPolicy(initial=0.5, jitter=0))
    results: list[Any] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                results.append(await chain.run({}, execution_id="cancelled-waiting"))

            tg.start_soon(run)
            await failed.wait()
            async with events(store, "cancelled-waiting", until="paused") as stream:
                async for _ in stream:
                    pass  # up to the pause: the failure is journaled, and the run waits with no lease held
            cancelled = await chain.cancel("cancelled-waiting", reason="enough")
    assert cancelled.status == results[0].status == "cancelled"
    assert RUNS["down"] == 1
    assert [f["attempt"] for f in failures(await store.read_journal("cancelled-waiting"))] == [1]


@idempotent
def charge(order: str) -> str:
    SENT.append(order)
    return f"charged {order}"


async def test_a_retried_attempt_gets_the_record_of_an_idempotent_call_made_before_a_failure(
    store: Store,
) -> None:
    def pay(state: Any) -> dict[str, Any]:
        RUNS["pay"] += 1
        receipt = charge("o-1")
        if RUNS["pay"] == 1:
            raise ConnectionError("the receipt printer is down")
        return {"receipt": receipt}

    chain = Chain("c", store=store)
    chain.add_node(pay, retry=FAST)
    with anyio.fail_after(10):
        done = await chain.run({}, execution_id="paid-once")
    assert done.status == "completed"
    assert done.output == {"receipt": "charged o-1"}
    assert RUNS["pay"] == 2
    assert SENT == ["o-1"]  # the card was charged once


async def test_an_attempt_after_a_deploy_takes_the_new_path_of_patched(store: Store) -> None:
    answers: list[bool] = []

    def deployed(state: Any) -> dict[str, Any]:
        RUNS["deployed"] += 1
        if RUNS["deployed"] <= 2:  # the code before the deploy: no check, and it fails
            raise ConnectionError("old code failed")
        answers.append(patched("new-endpoint"))  # the code after it
        return {}

    chain = Chain("c", store=store)
    chain.add_node(deployed, retry=FAST)
    with anyio.fail_after(10):
        done = await chain.run({}, execution_id="deployed")
    assert done.status == "completed"
    # A new attempt starts from scratch: the journaled failures before it are no progress past the check.
    assert answers == [True]


# -- tools -----------------------------------------------------------------------------------


def lookup(order: int) -> dict[str, Any]:
    """Look an order up."""
    RUNS["lookup"] += 1
    if RUNS["lookup"] == 1:
        raise ConnectionError("orders database unreachable")
    return {"order": order, "total": 120}


async def test_a_tool_is_retried_without_asking_the_llm_again(store: Store) -> None:
    llm = ScriptedLLM([ToolCall("lookup", {"order": 7}), "Order 7 is $120."])
    agent = Agent("bot", llm=llm, tools=[FunctionTool(lookup, retry=FAST)], store=store)
    with anyio.fail_after(10):
        done = await agent.run("What does order 7 cost?", execution_id="tool-retry")
    assert done.status == "completed"
    assert RUNS["lookup"] == 2
    assert llm.calls == 2  # turn 1's reply came from the journal after the wait
    told = llm.requests[1].messages[-1]
    assert isinstance(told, ToolMessage)
    assert not told.is_error and json.loads(told.content) == {"order": 7, "total": 120}
    [failure] = failures(await store.read_journal("tool-retry"))
    assert failure["path"] == "agent:bot/tool:lookup"
    assert failure["error"] == "ConnectionError"


async def test_a_tool_that_keeps_failing_tells_the_llm_its_last_error(store: Store) -> None:
    async def down(order: int) -> str:
        """Always down."""
        RUNS["down"] += 1
        raise ConnectionError(f"still down ({RUNS['down']})")

    llm = ScriptedLLM([ToolCall("down", {"order": 7}), "Sorry, the lookup is down."])
    tool = FunctionTool(down, retry=dataclasses.replace(FAST, max_attempts=2))
    agent = Agent("bot", llm=llm, tools=[tool], store=store)
    with anyio.fail_after(10):
        done = await agent.run("Order 7?", execution_id="tool-down")
    assert done.status == "completed"
    assert RUNS["down"] == 2
    told = llm.requests[1].messages[-1]
    assert isinstance(told, ToolMessage)
    assert told.is_error and told.content == "ConnectionError: still down (2)"


async def test_a_workers_tool_is_retried_inside_a_supervisor(store: Store) -> None:
    worker = Worker(Agent("clerk", llm=ScriptedLLM([ToolCall("lookup", {"order": 7}), "Order 7: $120."]),
                          tools=[FunctionTool(lookup, retry=FAST)]), "clerk")
    boss_llm = ScriptedLLM([ToolCall("delegate_to_clerk", {"task": "price of order 7"}), "It costs $120."])
    boss = Supervisor("boss", llm=boss_llm, workers=[worker], store=store)
    with anyio.fail_after(10):
        done = await boss.run("What does order 7 cost?", execution_id="team-retry")
    assert done.status == "completed" and done.output == "It costs $120."
    assert RUNS["lookup"] == 2
    assert boss_llm.calls == 2
    [failure] = failures(await store.read_journal("team-retry"))
    assert failure["path"] == "supervisor:boss/worker:clerk/tool:lookup"


# -- LLM calls -------------------------------------------------------------------------------


class FlakyLLM:
    """Raises ``errors`` in turn, one per call, then answers."""

    def __init__(self, *errors: BaseException | None) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
        self.calls += 1
        error = self.errors.pop(0) if self.errors else None
        if error is not None:
            raise error
        return AssistantMessage(content=f"answered on call {self.calls}")


async def test_an_llm_call_is_retried_on_a_rate_limit(store: Store) -> None:
    llm = FlakyLLM(LLMError("slow down", status=429))
    agent = Agent("bot", llm=llm, store=store, llm_retry=dataclasses.replace(LLM_RETRY, initial=0.02))
    with anyio.fail_after(10):
        done = await agent.run("Hello.", execution_id="rate-limited")
    assert done.status == "completed"
    assert done.output == "answered on call 2"
    [failure] = failures(await store.read_journal("rate-limited"))
    assert failure["path"] == "agent:bot/turn:1"
    assert (failure["error"], failure["message"]) == ("LLMError", "slow down")


async def test_an_llm_error_the_default_does_not_retry_fails_the_run_at_once(store: Store) -> None:
    llm = FlakyLLM(LLMError("unknown model", status=400))
    agent = Agent("bot", llm=llm, store=store)  # the default, LLM_RETRY
    done = await agent.run("Hello.", execution_id="refused")
    assert done.status == "failed"
    assert done.error == "LLMError: unknown model"
    assert llm.calls == 1


async def test_an_llm_timeout_is_retried_each_attempt_timed_on_its_own(store: Store) -> None:
    class SlowOnce:
        calls = 0

        async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
            SlowOnce.calls += 1
            if SlowOnce.calls == 1:
                await anyio.Event().wait()  # only llm_timeout ends it
            return AssistantMessage(content="in time")

    agent = Agent("bot", llm=SlowOnce(), store=store, llm_timeout=0.05,
                  llm_retry=dataclasses.replace(LLM_RETRY, initial=0.02))
    with anyio.fail_after(10):
        done = await agent.run("Hello.", execution_id="llm-slow-once")
    assert done.status == "completed" and done.output == "in time"
    [failure] = failures(await store.read_journal("llm-slow-once"))
    assert failure["error"] == "StepTimeout"
    assert "llm_timeout=0.05s" in failure["message"]


async def test_openai_chat_llm_over_the_wire_429_then_200(store: Store) -> None:
    with ChatServer() as server:
        server.answers += [Answer(429, {"error": "slow down"}), text("Hello over the wire.")]
        # No retries of the adapter's own: the 429 reaches the step's policy.
        llm = OpenAIChatLLM("test-model", base_url=server.url, api_key="sk-test", max_retries=0)
        agent = Agent("bot", llm=llm, store=store, llm_retry=dataclasses.replace(LLM_RETRY, initial=0.02))
        with anyio.fail_after(10):
            done = await agent.run("Hello.", execution_id="wire-429")
        assert len(server.requests) == 2
    assert done.status == "completed"
    assert done.output == "Hello over the wire."
    [failure] = failures(await store.read_journal("wire-429"))
    assert failure["error"] == "LLMError"
    assert "answered 429" in failure["message"]


def test_the_llm_default_is_passed_on_and_can_be_turned_off() -> None:
    llm = ScriptedLLM(["hi"])
    assert Agent("a", llm=llm).llm_retry is LLM_RETRY
    assert Agent("a", llm=llm, llm_retry=None).llm_retry is None
    assert Supervisor("s", llm=llm, workers=[]).agent.llm_retry is LLM_RETRY
    mine = RetryPolicy(max_attempts=5)
    assert Supervisor("s", llm=llm, workers=[], llm_retry=mine).agent.llm_retry is mine


# -- what is retried -------------------------------------------------------------------------


class Mine(TetherError):
    """An error of tether's family that is not tether's to retry."""


def test_what_the_default_retries() -> None:
    policy = RetryPolicy()
    assert policy.retries(ConnectionError("down"))
    assert policy.retries(StepTimeout("chain:c/node:n", 1.0))
    assert policy.retries(ExceptionGroup("both", [ValueError(), KeyError()]))
    # tether's own errors only when named: they say stop, or say the same thing twice.
    assert not policy.retries(MaxTurnsExceeded("used every turn"))
    assert not policy.retries(Mine("mine"))
    assert RetryPolicy(retry_on=Mine).retries(Mine("mine"))
    assert not policy.retries(ExceptionGroup("mixed", [ValueError(), Mine()]))
    # Never, whatever retry_on says.
    for never in (StoreUnavailable("down"), StaleLease("e", 1), ConfigurationError("bad"), UsageError("misuse")):
        assert not policy.retries(never)
        assert not RetryPolicy(retry_on=lambda error: True).retries(never)
        assert not RetryPolicy(retry_on=(BaseException,)).retries(never)
    assert not RetryPolicy(retry_on=(BaseException,)).retries(KeyboardInterrupt())


def test_what_the_llm_default_retries() -> None:
    for status in (408, 409, 429, 500, 503, 529):
        assert retriable_llm_error(LLMError("x", status=status))
    for status in (200, 400, 401, 404, 422):
        assert not retriable_llm_error(LLMError("x", status=status))
    dropped = LLMError("gave up")
    dropped.__cause__ = httpx.ConnectError("refused")
    assert retriable_llm_error(dropped)
    assert not retriable_llm_error(LLMError("no choices"))
    assert retriable_llm_error(StepTimeout("agent:a/turn:1", 5.0, setting="llm_timeout"))
    assert retriable_llm_error(httpx.ReadTimeout("slow"))
    assert retriable_llm_error(TimeoutError())

    class SDKError(Exception):
        status_code = 503

    assert retriable_llm_error(SDKError())
    assert not retriable_llm_error(ValueError("bad json"))
    assert LLM_RETRY.retries(LLMError("x", status=429))  # tether's own, named by its predicate


def test_backoff_grows_by_the_multiplier_up_to_the_maximum() -> None:
    policy = RetryPolicy(initial=1, multiplier=3, maximum=timedelta(seconds=5))
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [1, 3, 5, 5]
    assert policy.delay(100_000) == 5  # no overflow on a long run of attempts
    assert RetryPolicy(initial=timedelta(milliseconds=1500), multiplier=1).delay(7) == 1.5
    with pytest.raises(UsageError):
        policy.delay(0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, r"max_attempts=0.*at least 1"),
        ({"max_attempts": 2.5}, r"whole number"),
        ({"initial": 0}, r"initial=0.*positive"),
        ({"initial": timedelta(seconds=-1)}, r"positive"),
        ({"initial": float("nan")}, r"positive"),
        ({"initial": 10, "maximum": 5}, r"Raise maximum, or lower initial"),
        ({"multiplier": 0.5}, r"1 or more"),
        ({"jitter": 1.0}, r"below 1"),
        ({"jitter": -0.1}, r"at least 0"),
        ({"retry_on": ("ValueError",)}, r"exception classes"),
        ({"retry_on": ()}, r"exception classes"),
        ({"retry_on": 3}, r"exception classes"),
    ],
)
def test_a_policy_out_of_range_is_refused_when_declared(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RetryPolicy(**options)


def test_a_retry_that_is_not_a_policy_is_refused() -> None:
    chain = Chain("c")
    with pytest.raises(ConfigurationError, match=r"retry=3 for node 'n'.*RetryPolicy"):
        chain.add_node(lambda state: None, "n", retry=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"retry='twice' for tool 'lookup'"):
        FunctionTool(lookup, retry="twice")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"llm_retry=5"):
        Agent("a", llm=ScriptedLLM(["hi"]), llm_retry=5)  # type: ignore[arg-type]


# -- outside an execution --------------------------------------------------------------------


async def test_outside_an_execution_attempts_are_retried_in_process() -> None:
    async def attempt() -> str:
        RUNS["attempt"] += 1
        raise ConnectionError(f"down {RUNS['attempt']}")

    with pytest.raises(ConnectionError, match="down 3") as caught:
        await FAST.call(attempt, path="job")
    assert RUNS["attempt"] == 3
    assert any("'job' gave up after 3 attempts" in note for note in caught.value.__notes__)


async def test_a_cancellation_is_never_retried() -> None:
    async def stuck() -> None:
        RUNS["stuck"] += 1
        await anyio.Event().wait()

    with anyio.move_on_after(0.05) as scope:
        await RetryPolicy(retry_on=BaseException).call(stuck)
    assert scope.cancelled_caught
    assert RUNS["stuck"] == 1


# -- crashes ---------------------------------------------------------------------------------

CHILD = Path(__file__).with_name("_retry_child.py")


@pytest.fixture(params=["sqlite", "postgres"])
def scenario(request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str) -> Scenario:
    return make_scenario(CHILD, request, tmp_path, anyio_backend)


def kill_once_recorded(scenario: Scenario, name: str, label: str) -> None:
    """Run ``name`` and SIGKILL the child as soon as it says it journaled an entry ``label``."""
    with subprocess.Popen(scenario.command(name, "run"), stdout=subprocess.PIPE, text=True,
                          env=scenario.env) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == f"recorded {label}":
                break
        else:
            raise AssertionError(f"the child ended before it journaled {label!r}")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


async def journal_of(scenario: Scenario, execution_id: str) -> list[JournalEntry]:
    async with scenario.store() as store:
        return await store.read_journal(execution_id)


def test_a_crash_during_the_backoff_neither_resets_nor_repeats_an_attempt(scenario: Scenario) -> None:
    kill_once_recorded(scenario, "retry", "retry")
    before = failures(anyio.run(journal_of, scenario, "retry", backend=scenario.backend))
    assert [f["attempt"] for f in before] == [1]  # killed during the first wait, before attempt 2
    assert scenario.runs.read_text().split() == ["flaky"]

    result = scenario.run("retry", "recover")
    assert result["status"] == "completed"
    assert result["output"] == {"succeeded_on": 3}
    # Attempt 1 in the killed process, attempts 2 and 3 in the recovering one: each once.
    assert scenario.runs.read_text().split() == ["flaky"] * 3
    journal = anyio.run(journal_of, scenario, "retry", backend=scenario.backend)
    after = failures(journal)
    assert [f["attempt"] for f in after] == [1, 2]
    assert after[0] == before[0]  # the recovery waited for the due time the first process journaled
    assert datetime.fromisoformat(after[1]["failed_at"]) >= datetime.fromisoformat(after[0]["due"])
    [finished] = [e for e in journal if e.label == "node:flaky"]
    assert finished.created_at >= datetime.fromisoformat(after[1]["due"])
