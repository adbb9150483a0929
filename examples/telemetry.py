"""One trace per execution: a supervisor's run, its pause for a manager's approval, and its resume.

    python examples/telemetry.py                    # prints the trace as a tree of spans
    python examples/telemetry.py --html trace.html  # ... and draws it as a waterfall page

The OpenTelemetry SDK is set up as any application sets it up; tether finds
the tracer and meter providers and emits into them. Here the spans are kept in
memory to be printed; to send them to a collector, Jaeger or any OTLP backend,
add ``OTLPSpanExporter()`` as the processor's exporter, or set nothing up and
run with ``OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318`` only. The run
and its resume happen in one process here; in two processes (or on two days)
the trace is the same: the execution keeps its trace context in the store.
"""

from __future__ import annotations

import argparse
import html
import tempfile
from pathlib import Path
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tether.actors import Agent, ScriptedLLM, Supervisor, ToolCall, Worker
from tether.runtime import Resume, interrupt
from tether.stores import SQLiteStore

spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(provider)  # the standard setup: tether needs nothing more


def search(query: str) -> str:
    """Search the refund policy."""
    return f"3 results for {query}"


def approve_refund(amount: int) -> str:
    """Ask a manager to approve a refund."""
    return "approved" if interrupt("manager_approval", {"amount": amount}).approved else "refused"


def planner(store: SQLiteStore) -> Supervisor:
    researcher = Agent("researcher", llm=ScriptedLLM([ToolCall("search", {"query": "refunds"}), "3 sources"]),
                       tools=[search])
    auditor = Agent("auditor", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}), "Audit passed."]),
                    tools=[approve_refund])
    llm = ScriptedLLM([[ToolCall("delegate_to_researcher", {"task": "Find the policy."}),
                        ToolCall("delegate_to_auditor", {"task": "Audit refund R1."})], "R1 is fine."])
    return Supervisor("planner", llm=llm, workers=[Worker(researcher, "researcher"), Worker(auditor, "auditor")],
                      store=store)


async def main(backend: str, page: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with SQLiteStore(Path(tmp) / "tether.db") as store:
            support = planner(store)
            paused = await support.run("Check refund R1.", execution_id="job-42")
            print(f"run: {paused.status}, waiting at {paused.pending_interrupt.agent_path}")  # type: ignore[union-attr]
            done = await support.resume("job-42", Resume(approved=True))
            print(f"resume: {done.status}, {done.output!r}\n")
    finished = sorted(spans.get_finished_spans(), key=lambda s: s.start_time or 0)
    print(f"one trace, {len(finished)} spans, {len({s.context.trace_id for s in finished})} trace id:")
    for depth, span in walk(finished):
        print(f"{'  ' * depth}{span.name}{note(span)}")
    if page is not None:
        await anyio.Path(page).write_text(waterfall(finished, backend))
        print(f"\nwrote {page}")


def walk(finished: list[ReadableSpan]) -> list[tuple[int, ReadableSpan]]:
    """The spans depth first, each after its parent, siblings by start time."""
    ids = {s.context.span_id for s in finished}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in finished:
        parent = span.parent.span_id if span.parent is not None and span.parent.span_id in ids else None
        children.setdefault(parent, []).append(span)
    order: list[tuple[int, ReadableSpan]] = []

    def visit(parent: int | None, depth: int) -> None:
        for span in children.get(parent, []):
            order.append((depth, span))
            visit(span.context.span_id, depth + 1)

    visit(None, 0)
    return order


def note(span: ReadableSpan) -> str:
    attributes: Any = span.attributes or {}
    shown = [f"{key}={attributes[key]}" for key in ("tether.status", "tether.interrupt.path",
                                                    "gen_ai.request.model") if key in attributes]
    if attributes.get("tether.paused"):
        shown.append("paused")
    return f"  [{', '.join(shown)}]" if shown else ""


def waterfall(finished: list[ReadableSpan], backend: str) -> str:
    """A page that draws the trace as bars on one time axis, as trace viewers do."""
    start = min(s.start_time or 0 for s in finished)
    end = max(s.end_time or 0 for s in finished)
    total = max(end - start, 1)
    rows = []
    for depth, span in walk(finished):
        left = ((span.start_time or 0) - start) / total * 100
        width = max(((span.end_time or 0) - (span.start_time or 0)) / total * 100, 0.3)
        milliseconds = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        kind = "paused" if (span.attributes or {}).get("tether.paused") else span.name.split(" ")[0]
        rows.append(
            f'<tr><td class="name" style="padding-left:{depth * 14 + 6}px">{html.escape(span.name)}'
            f'<small>{html.escape(note(span))}</small></td><td class="lane"><div class="bar {html.escape(kind)}" '
            f'style="left:{left:.2f}%;width:{width:.2f}%"></div></td><td class="ms">{milliseconds:.1f} ms</td></tr>')
    trace_id = f"{finished[0].context.trace_id:032x}"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>trace {trace_id}</title><style>
body {{ font: 13px system-ui, sans-serif; margin: 20px; color: #1d2330; }}
h1 {{ font-size: 16px; }} table {{ border-collapse: collapse; width: 100%; }}
td {{ border-bottom: 1px solid #eceff4; padding: 3px 6px; white-space: nowrap; }}
td.name {{ width: 36%; }} td.name small {{ color: #6b7280; margin-left: 6px; }}
td.lane {{ position: relative; width: 56%; }} td.ms {{ text-align: right; color: #4b5563; }}
.bar {{ position: absolute; top: 5px; height: 12px; border-radius: 2px; background: #5b7cfa; }}
.bar.run, .bar.resume {{ background: #1f3fae; }} .bar.chat {{ background: #2f9e6e; }}
.bar.execute_tool {{ background: #c17d11; }} .bar.paused, .bar.interrupt {{ background: #c2413b; }}
</style></head><body><h1>trace {trace_id}: {len(finished)} spans, one execution (job-42), run and resume
(anyio on {html.escape(backend)})</h1><table>{''.join(rows)}</table></body></html>"""


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", type=Path, help="Also write the trace as a waterfall page here.")
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    arguments = parser.parse_args()
    anyio.run(main, arguments.backend, arguments.html, backend=arguments.backend)
