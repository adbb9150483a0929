"""The tools of an MCP server as durable agent tools: `MCPTools`, with an approval before a refund.

    python examples/mcp_tools.py                  # no network: starts a tiny MCP server over stdio
    python examples/mcp_tools.py --backend trio

Needs the mcp package: ``pip install 'tether[mcp]'``.

This file is also the server: run as ``mcp_tools.py --serve LEDGER`` it is an
MCP server (written with the mcp package's `MCPServer`) with two tools,
``lookup_order`` and ``refund``, that write each call they get to the file
LEDGER. The agent starts it over stdio for each run. Its scripted LLM looks
an order up, then asks for a refund; ``approve`` pauses the run before the
refund reaches the server, and the resume sends it. Every call reaches the
server once, although the run was handled twice: the lookup's result was
journaled before the pause, so the resume read it back instead of asking again.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from tether.actors import Agent, MCPTools, ScriptedLLM, ToolCall
from tether.runtime import Resume, interrupt
from tether.stores import SQLiteStore


def serve(ledger: Path) -> None:
    """The MCP server: two tools, each call written to ``ledger``."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("orders", log_level="WARNING")

    @server.tool()
    def lookup_order(order: str) -> str:
        """Look an order up by its id."""
        with ledger.open("a") as calls:
            calls.write(f"lookup_order {order}\n")
        return f"order {order}: $120, delivered broken"

    @server.tool()
    def refund(order: str, amount: int) -> str:
        """Refund `amount` dollars of an order."""
        with ledger.open("a") as calls:
            calls.write(f"refund {order} {amount}\n")
        return f"refunded ${amount} for order {order}"

    server.run()  # over stdin and stdout, until the agent closes them


def approve(tool: str, arguments: dict[str, Any]) -> bool:
    """Refunds over $100 wait for a person; everything else goes through."""
    if tool == "refund" and arguments.get("amount", 0) > 100:
        return bool(interrupt("approve_refund", {"order": arguments["order"], "amount": arguments["amount"]}).approved)
    return True


async def main(backend: str) -> int:
    with tempfile.TemporaryDirectory() as folder:
        ledger = Path(folder) / "ledger.txt"
        orders = MCPTools.stdio(sys.executable, [__file__, "--serve", str(ledger)], approve=approve)
        llm = ScriptedLLM([
            ToolCall("lookup_order", {"order": "A1"}),
            ToolCall("refund", {"order": "A1", "amount": 120}),
            "Refunded $120 for order A1.",
        ])
        async with SQLiteStore(Path(folder) / "tether.db") as store:
            agent = Agent(name="orders", system_prompt="You handle refunds.", llm=llm, tools=[orders], store=store)
            result = await agent.run("Order A1 arrived broken.", execution_id="refund-A1")
            print("tools:", ", ".join(llm.requests[0].tool_names))
            assert result.pending_interrupt is not None
            print(f"{result.status} on {backend} at {result.pending_interrupt.agent_path}, "
                  f"waiting for {result.pending_interrupt.reason}")
            # Hours later, in this process or any other that builds the same agent:
            result = await agent.resume("refund-A1", Resume(approved=True))
            print(f"{result.status}: {result.output}")
            journal = await store.read_journal("refund-A1")
            print("journaled:", ", ".join(e.label for e in journal if e.label.startswith("turn:")))
        print("the server was called:", ", ".join(ledger.read_text().splitlines()))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--serve", metavar="LEDGER", type=Path, help="run as the MCP server instead")
    arguments = parser.parse_args()
    if arguments.serve is not None:
        serve(arguments.serve)
    else:
        sys.exit(anyio.run(main, arguments.backend, backend=arguments.backend))
