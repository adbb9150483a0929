"""`ScriptedLLM.requests`: what the model was asked, turn by turn, across a pause and a crash."""

from __future__ import annotations

import json

from tether.actors import Agent, ScriptedLLM, ToolCall
from tether.runtime import Resume, interrupt
from tether.runtime.testing import crash_at
from tether.stores import Store


def approve_refund(amount: int) -> dict[str, bool]:
    """Approve a refund; a manager decides."""
    return {"approved": interrupt("manager_approval", {"amount": amount}).approved}


async def test_requests_show_the_conversation_and_the_tools_of_each_turn(tether_store: Store) -> None:
    llm = ScriptedLLM([ToolCall("approve_refund", {"amount": 70}), "Refunded."])
    agent = Agent("bot", system_prompt="You refund.", llm=llm, tools=[approve_refund], store=tether_store)

    async with crash_at("tool:approve_refund"):  # dies once the resumed tool's result is journaled
        assert (await agent.run("Refund $70", execution_id="q-1")).status == "paused"
        await agent.resume("q-1", Resume(approved=True))
    result = await agent.resume("q-1")

    assert result.output == "Refunded."
    first, second = llm.requests  # two turns, each asked once: neither the pause nor the crash re-asks
    assert [m.role for m in first.messages] == ["system", "user"]
    assert first.messages[-1].content == "Refund $70"
    assert first.tool_names == ["approve_refund"]
    assert first.tools[0].parameters["required"] == ["amount"]
    tool_result = second.messages[-1]
    assert tool_result.role == "tool" and json.loads(tool_result.content or "") == {"approved": True}
    assert llm.calls == len(llm.requests) == 2
