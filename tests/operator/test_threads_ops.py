"""`tether threads` and `tether show --thread`: conversations as an operator sees them, on SQLite and Postgres."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest
from tether.actors import Agent, Message, ScriptedLLM, ToolCall, UserMessage
from tether.runtime import interrupt
from tether.stores import open_store

from .conftest import Tether


def ask_manager(amount: int) -> str:
    return "approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def reply(messages: list[Message]) -> Any:
    last = messages[-1]
    if isinstance(last, UserMessage) and last.content.startswith("refund"):
        return ToolCall("ask_manager", {"amount": 900})
    return f"reply {sum(isinstance(m, UserMessage) for m in messages)}"


def make_threads(url: str) -> None:
    """Thread ``chat-7``: two completed runs, then a paused one; thread ``chat-8``: one run."""
    async def go() -> None:
        async with open_store(url) as store:
            agent = Agent("helpdesk", llm=ScriptedLLM(reply), tools=[ask_manager], store=store)
            assert (await agent.run("hello", execution_id="chat-7-1", thread="chat-7")).status == "completed"
            assert (await agent.run("thanks", execution_id="chat-7-2", thread="chat-7")).status == "completed"
            assert (await agent.run("refund me", execution_id="chat-7-3", thread="chat-7")).status == "paused"
            assert (await agent.run("hi", execution_id="chat-8-1", thread="chat-8")).status == "completed"
            assert (await agent.run("no thread", execution_id="alone")).status == "completed"

    anyio.run(go)


def test_threads_lists_each_conversation_with_its_latest_run(url: str, tether: Tether) -> None:
    make_threads(url)
    code, out, _ = tether("threads")
    assert code == 0
    assert "2 threads" in out
    lines = [line for line in out.splitlines() if "chat-" in line]
    assert "chat-7" in lines[0] and " 3 " in lines[0] and "chat-7-3" in lines[0] and "paused" in lines[0]
    assert "chat-8" in lines[1] and " 1 " in lines[1] and "chat-8-1" in lines[1] and "completed" in lines[1]
    assert "alone" not in out

    code, out, _ = tether("threads", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [(t["thread"], t["runs"], t["latest"]["execution_id"], t["latest"]["status"]) for t in listed] == [
        ("chat-7", 3, "chat-7-3", "paused"), ("chat-8", 1, "chat-8-1", "completed")]

    code, out, _ = tether("threads", "--after", "chat-7", "--json")
    assert [t["thread"] for t in json.loads(out)] == ["chat-8"]


def test_threads_in_an_empty_store(url: str, tether: Tether) -> None:
    anyio.run(_create, url)
    code, out, _ = tether("threads")
    assert (code, out.strip()) == (0, "No threads.")
    code, out, _ = tether("threads", "--json")
    assert (code, json.loads(out)) == (0, [])


async def _create(url: str) -> None:
    async with open_store(url) as store:
        await store.setup()


def test_show_thread_lists_its_runs_in_order(url: str, tether: Tether) -> None:
    make_threads(url)
    code, out, _ = tether("show", "--thread", "chat-7")
    assert code == 0
    assert "thread chat-7: 3 runs of agent:helpdesk" in out
    rows = [line for line in out.splitlines() if "chat-7-" in line]
    assert [re.findall(r"chat-7-\d", row)[0] for row in rows] == ["chat-7-1", "chat-7-2", "chat-7-3"]
    assert "completed" in rows[0] and '"reply 1"' in rows[0]
    # Each run names the run it continues, in its input.
    assert '"after": "chat-7-1"' in rows[1] and "paused" in rows[2]

    code, out, _ = tether("show", "--thread", "chat-7", "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["thread"] == "chat-7"
    assert [(r["execution_id"], r["status"], r["input"]) for r in shown["runs"]] == [
        ("chat-7-1", "completed", {"text": "hello", "after": None}),
        ("chat-7-2", "completed", {"text": "thanks", "after": "chat-7-1"}),
        ("chat-7-3", "paused", {"text": "refund me", "after": "chat-7-2"}),
    ]

    code, out, _ = tether("show", "chat-7-2")  # one run, as any execution
    assert code == 0 and "chat-7-2" in out and "turn:1" in out


def test_show_needs_an_id_or_a_thread_and_a_thread_that_exists(url: str, tether: Tether) -> None:
    make_threads(url)
    code, _, err = tether("show", "--thread", "chat-9")
    assert code == 1
    assert "No runs of thread 'chat-9'" in err and "tether" in err and "threads" in err
    code, _, err = tether("show")
    assert code == 2 and "give an execution id, or --thread NAME" in err
    code, _, err = tether("show", "chat-7-1", "--thread", "chat-7")
    assert code == 2 and "not both" in err


def test_a_narrow_terminal_gets_paragraphs(url: str, tether: Tether, monkeypatch: pytest.MonkeyPatch) -> None:
    make_threads(url)
    monkeypatch.setenv("COLUMNS", "60")
    code, out, _ = tether("show", "--thread", "chat-7")
    assert code == 0
    assert "  1  chat-7-1  completed" in out and 'output: "reply 1"' in out
    assert 'input: {"text": "refund me", "after": "chat-7-2"}' in out
    monkeypatch.setenv("COLUMNS", "45")
    code, out, _ = tether("threads")
    assert code == 0 and "chat-7  3 runs, latest chat-7-3  paused" in out
