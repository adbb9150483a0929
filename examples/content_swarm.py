"""A content team as a swarm: researcher -> analyst -> reporter, publishing waits for an editor.

    python examples/content_swarm.py              # researcher hands to analyst, who pauses for approval
    tether pending                                # swarm:content_team/agent:analyst/tool:approve_publish
    tether resume trip-456 --set approved=true --set metadata.editor=erin --app examples.content_swarm:runners
    tether serve --app examples.content_swarm:runners   # ... or decide it on the page
    python examples/content_swarm.py --approve    # ... or a new process of this script resumes it
    python examples/content_swarm.py --reject

Run the `tether` commands from the repository's root. The LLMs are scripted (no
network). With --model, each agent asks an OpenAI-compatible endpoint instead
(OPENAI_API_KEY; --base-url for another provider). The store is ``$TETHER_STORE``,
else ``sqlite:///tether.db``; ``--store`` picks another, ``--backend trio`` runs it on trio.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any

import anyio
from tether.actors import LLM, Agent, OpenAIChatLLM, ScriptedLLM, Swarm, ToolCall
from tether.runtime import AlreadyResumed, Resume, interrupt
from tether.stores import Store, open_store

DEFAULT_STORE = "sqlite:///tether.db"


def search(query: str) -> list[str]:
    """Search the archive; returns titles."""
    return [f"{query}: report {n}" for n in (1, 2, 3)]


def approve_publish(title: str) -> str:
    """Ask an editor before anything is published."""
    decision = interrupt("publish_approval", {"title": title})
    return "approved" if decision.approved else f"rejected by {decision.metadata.get('editor', 'the editor')}"


def llm_for(args: argparse.Namespace | None, script: list[Any]) -> LLM:
    return OpenAIChatLLM(args.model, base_url=args.base_url) if args and args.model else ScriptedLLM(script)


def team(args: argparse.Namespace | None = None, store: Store | None = None) -> Swarm:
    researcher = Agent("researcher", system_prompt="Find sources, then hand off to the analyst.",
                       llm=llm_for(args, [
                           ToolCall("search", {"query": "tide energy"}),
                           ToolCall("handoff_to_analyst", {"message": "three reports on tide energy"}),
                       ]), tools=[search])
    analyst = Agent("analyst", system_prompt="Get publishing approved, then hand off to the reporter.",
                    llm=llm_for(args, [
                        ToolCall("approve_publish", {"title": "Tide energy, in three reports"}),
                        ToolCall("handoff_to_reporter", {"message": "approval: see the tool result"}),
                    ]), tools=[approve_publish])
    reporter = Agent("reporter", system_prompt="Write the final report.",
                     llm=llm_for(args, ["Report: tide energy, three sources, cleared by the editor."]))
    return Swarm("content_team", agents=[researcher, analyst, reporter], entrypoint="researcher",
                 handoffs={"researcher": ["analyst"], "analyst": ["reporter"], "reporter": []}, store=store)


runners = [team()]
"""What ``--app examples.content_swarm:runners`` loads."""


async def main(args: argparse.Namespace) -> int:
    async with open_store(args.store) as store:
        swarm = team(args, store)
        if args.approve or args.reject:
            try:
                result = await swarm.resume(args.execution_id,
                                            Resume(approved=args.approve, metadata={"editor": args.editor}),
                                            by=f"script:{args.editor}")
            except AlreadyResumed as exc:
                print(f"Already decided: {exc}")
                return 2
        else:
            result = await swarm.run("Investigate tide energy.", execution_id=args.execution_id)
        handoffs = [e.payload["result"] for e in await store.read_journal(args.execution_id)
                    if e.label.startswith("handoff:")]
    for handoff in handoffs:
        print(f"   handoff: {handoff['by']} -> {handoff['to']}: {handoff['message']}")
    if result.status == "paused":
        pending = result.pending_interrupt
        assert pending is not None
        print(f"paused at {pending.agent_path}: {pending.reason} {json.dumps(pending.context)}")
        tether = "tether" if args.store == DEFAULT_STORE else f"tether --store {shlex.quote(args.store)}"
        print("decide it from any process:")
        print(f"   {tether} resume {shlex.quote(args.execution_id)} --set approved=true "
              f"--app examples.content_swarm:runners")
        print(f"   python {sys.argv[0]} --approve" + ("" if args.store == DEFAULT_STORE else f" --store {args.store}"))
    else:
        print(f"{result.status}: {result.output if result.status == 'completed' else result.error}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE", DEFAULT_STORE))
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--execution-id", default="trip-456")
    decision = parser.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true")
    decision.add_argument("--reject", action="store_true")
    parser.add_argument("--editor", default="erin")
    parser.add_argument("--model", help="an OpenAI-compatible model instead of the scripts")
    parser.add_argument("--base-url", default="https://api.openai.com/v1")
    arguments = parser.parse_args()
    sys.exit(anyio.run(main, arguments, backend=arguments.backend))
