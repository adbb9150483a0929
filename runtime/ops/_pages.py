"""The HTML of the operator pages: server-rendered, no build step, every value escaped.

A tool's interrupt context is untrusted input (it may hold whatever a user typed
into an agent), so nothing reaches the page without `html.escape`. An execution id
may hold any character (``/``, ``?``, ``#``, ``%`` too), so a link percent-encodes it
whole. Every link starts with ``base``, the path the app is mounted at.
"""

from __future__ import annotations

import json
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tether.runtime._core.events import EVENT_TYPES

from ._operator import age, summarize

if TYPE_CHECKING:
    from tether.stores import PendingInterrupt

    from ._operator import Timeline

_STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#1b1b1b}
h1{font-size:1.4rem}table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;
padding:.35rem .5rem;text-align:left;vertical-align:top}code,pre{font:13px ui-monospace,monospace}
pre{background:#f5f5f5;padding:.5rem;margin:.25rem 0;white-space:pre-wrap}.card{border:1px solid #ccc;
border-radius:6px;padding:.75rem 1rem;margin:1rem 0}.flash{background:#eef7ee;padding:.5rem 1rem}
.error{background:#fbeaea;padding:.5rem 1rem}button{margin-right:.5rem}input{margin-right:.75rem}
"""


def page(title: str, body: str) -> str:
    """A whole HTML document."""
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'><style>{_STYLE}</style></head>"
            f"<body>{body}</body></html>")


def execution_href(execution_id: str, base: str = "") -> str:
    """The path of an execution's timeline page (not yet HTML-escaped)."""
    return f"{base}/executions/{quote(execution_id, safe='')}"


def approvals(pending: list[PendingInterrupt], csrf: str, *, base: str = "", flash: str = "",
              error: str = "") -> str:
    """Pending interrupts, each with its full path, reason, context, and Approve / Reject."""
    parts = ["<h1>Approvals</h1>"]
    if flash:
        parts.append(f"<p class=flash role=status>{escape(flash)}</p>")
    if error:
        parts.append(f"<p class=error role=alert>{escape(error)}</p>")
    if not pending:
        parts.append("<p id=empty>Nothing is waiting for a decision.</p>")
    parts.extend(_card(row, csrf, base) for row in pending)
    return page("Approvals - tether", "".join(parts))


def _card(row: PendingInterrupt, csrf: str, base: str) -> str:
    """One pending interrupt and its decision form; ``seq`` pins the suspension the operator saw."""
    return (
        f"<section class=card data-testid=pending data-execution='{escape(row.execution_id)}'>"
        f"<div><a href='{escape(execution_href(row.execution_id, base))}'>{escape(row.execution_id)}</a> "
        f"&middot; waiting {escape(age(row.created_at))}</div>"
        f"<div><code data-testid=path>{escape(row.agent_path)}</code></div>"
        f"<div>reason: <strong data-testid=reason>{escape(row.reason)}</strong></div>"
        f"<pre data-testid=context>{escape(json.dumps(row.context, indent=2, ensure_ascii=False))}</pre>"
        f"<form method=post action='{escape(base)}/approvals/decide'>"
        f"<input type=hidden name=csrf value='{escape(csrf)}'>"
        f"<input type=hidden name=execution_id value='{escape(row.execution_id)}'>"
        f"<input type=hidden name=path value='{escape(row.agent_path)}'>"
        f"<input type=hidden name=seq value='{row.seq}'>"
        f"<label>approver <input name=approver required maxlength=200></label>"
        f"<label>note <input name=note maxlength=2000></label>"
        f"<button name=decision value=approve>Approve</button>"
        f"<button name=decision value=reject>Reject</button>"
        f"</form></section>"
    )


def timeline(view: Timeline, *, base: str = "") -> str:
    """One execution: status, output or error, pending interrupts, and the journal."""
    e = view.execution
    parts = [
        f"<p><a href='{escape(base)}/approvals'>&larr; approvals</a></p>",
        f"<h1 data-testid=execution>{escape(e.execution_id)}</h1>",
        (f"<p><code>{escape(e.root_path)}</code> &middot; <strong data-testid=status>{escape(e.status)}</strong>"
         f" &middot; updated {escape(age(e.updated_at))} ago</p>"),
    ]
    if e.status == "completed":
        parts.append(f"<p>output:</p><pre data-testid=output>{escape(_pretty(e.result))}</pre>")
    if e.error:
        parts.append(f"<p class=error>{escape(e.error)}</p>")
    decision = view.decision
    if decision is not None:
        parts.append(
            f"<p data-testid=decision>decided {escape(f'{decision.at:%Y-%m-%d %H:%M:%S}')} UTC by "
            f"<strong>{escape(decision.by or 'someone')}</strong> at <code>{escape(decision.path)}</code>: "
            f"<code>{escape(json.dumps(decision.value, ensure_ascii=False))}</code>. Recorded; it goes on when "
            f"a process with its runner takes it up (a worker, or the application serving decisions).</p>"
        )
    waiting = "".join(f"<p data-testid=pending data-path='{escape(row.agent_path)}'>pending at "
                      f"<code>{escape(row.agent_path)}</code>: {escape(row.reason)}</p>" for row in view.pending)
    parts.append(f"<div id=pending>{waiting}</div>")
    rows = "".join(
        f"<tr><td>{entry.seq}</td><td>{entry.created_at:%H:%M:%S}</td><td><code>{escape(entry.path)}</code></td>"
        f"<td>{escape(entry.label)}</td><td><code>{escape(summarize(entry, 160))}</code></td></tr>"
        for entry in view.entries
    )
    cursor = view.entries[-1].seq if view.entries else 0
    parts.append(f"<table id=journal data-cursor={cursor}><tr><th>#</th><th>at</th><th>path</th><th>label</th>"
                 f"<th>what happened</th></tr>{rows}</table>")
    if not e.finished:
        parts.append(_LIVE.replace("TYPES", json.dumps(EVENT_TYPES)))  # new rows, the status and what is pending, as they are journaled
    return page(f"{e.execution_id} - tether", "".join(parts))


# Follows the page's own event stream (the login cookie goes with it). Everything it shows
# is set as text, never as HTML: an event holds whatever a tool or a user put in it.
_LIVE = """<script>
(() => {
  const table = document.getElementById("journal");
  const status = document.querySelector("[data-testid=status]");
  const pending = document.getElementById("pending");
  const base = new Set(["execution_id", "path", "label", "cursor", "at", "type"]);
  const verdicts = {execution_paused: "paused", execution_completed: "completed", execution_failed: "failed",
                    execution_cancelled: "cancelled", execution_timed_out: "timed_out",
                    execution_resumed: "decided"};
  const source = new EventSource(location.pathname + "/events?after=" + table.dataset.cursor);
  const cell = (row, text, code) => {
    const td = row.insertCell();
    const inner = code ? td.appendChild(document.createElement("code")) : td;
    inner.textContent = text;
  };
  const show = (message) => {
    const event = JSON.parse(message.data);
    if (event.cursor === null) return;
    const rest = Object.fromEntries(Object.entries(event).filter(([key]) => !base.has(key)));
    const row = table.insertRow(-1);
    cell(row, event.cursor); cell(row, event.at.slice(11, 19)); cell(row, event.path, true);
    cell(row, event.label); cell(row, JSON.stringify(rest).slice(0, 160), true);
    table.dataset.cursor = event.cursor;
    if (verdicts[event.type]) status.textContent = verdicts[event.type];
    else if (["paused", "decided", "queued"].includes(status.textContent)) status.textContent = "running";
    if (event.type === "interrupt" && event.pending) {
      const line = pending.appendChild(document.createElement("p"));
      line.dataset.testid = "pending"; line.dataset.path = event.call_path;
      line.textContent = "pending at " + event.call_path + ": " + (event.reason || "");
    }
    if (event.type === "execution_resumed") {
      for (const line of pending.querySelectorAll("[data-testid=pending]"))
        if (line.dataset.path === event.path) line.remove();
    }
    if (["execution_completed", "execution_failed", "execution_cancelled", "execution_timed_out"]
        .includes(event.type)) source.close();
  };
  for (const type of TYPES) source.addEventListener(type, show);
})();
</script>"""


def login(csrf: str, *, base: str = "", error: str = "") -> str:
    """The token form shown when the server is protected."""
    problem = f"<p class=error role=alert>{escape(error)}</p>" if error else ""
    return page("Log in - tether", (
        f"<h1>tether</h1>{problem}<form method=post action='{escape(base)}/login'>"
        f"<input type=hidden name=csrf value='{escape(csrf)}'>"
        f"<label>token <input type=password name=token required autofocus></label>"
        f"<button>Log in</button></form>"
    ))


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
