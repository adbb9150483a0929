"""The HTML of the operator console: server-rendered, no build step, every value escaped.

A tool's interrupt context is untrusted input (it may hold whatever a user typed
into an agent), and so are ids, paths, reasons, notes and approvers: nothing
reaches a page without `html.escape`, in text and in attributes alike. An
execution id may hold any character (``/``, ``?``, ``#``, ``%`` too), so a link
percent-encodes it whole. Every link starts with ``base``, the path the app is
mounted at. The pages work without JavaScript; the one script (the live
timeline) is a file of its own, and sets what it shows as text, never as HTML.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from tether.runtime._core.events import EVENT_TYPES

from ._operator import age, summarize

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tether.runtime._executions.history import Boundary
    from tether.stores import Execution, ExecutionSearch, PendingInterrupt

    from ._access import Principal
    from ._operator import Timeline

STATUSES = ("queued", "running", "paused", "decided", "completed", "failed", "cancelled", "timed_out")

STYLE = """
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fff}
header{display:flex;flex-wrap:wrap;gap:1rem;align-items:center;padding:.5rem 1rem;border-bottom:1px solid #ccc}
header nav a{margin-right:1rem;font-weight:600}header nav a[aria-current]{text-decoration:none;color:#1b1b1b}
header .who{margin-left:auto;color:#444}
main{margin:1rem auto;max-width:72rem;padding:0 1rem}
.skip{position:absolute;left:-999px}.skip:focus{left:1rem;top:.5rem;background:#fff;padding:.25rem .5rem}
:focus-visible{outline:3px solid #1a5fb4;outline-offset:2px}
a{color:#1a5fb4}h1{font-size:1.4rem;overflow-wrap:anywhere}h2{font-size:1.1rem;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;table-layout:auto}
td,th{border-bottom:1px solid #ddd;padding:.35rem .5rem;text-align:left;vertical-align:top;overflow-wrap:break-word}
#journal td:nth-child(2){white-space:nowrap}
code,pre{font:13px ui-monospace,monospace;overflow-wrap:anywhere}
pre{background:#f5f5f5;padding:.5rem;margin:.25rem 0;white-space:pre-wrap;max-height:24rem;overflow:auto}
.card{border:1px solid #ccc;border-radius:6px;padding:.75rem 1rem;margin:1rem 0}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:1rem}.cols>*{min-width:0}
.flash{background:#e6f4e6;border-left:4px solid #2e7d32;padding:.5rem 1rem}
.error{background:#fbeaea;border-left:4px solid #b3261e;padding:.5rem 1rem}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:end;margin-bottom:1rem}
caption{text-align:left;padding:.25rem 0}
label{display:inline-flex;flex-direction:column;font-size:.85rem;color:#333}
label.pick{flex-direction:row;gap:.3rem;align-items:center;display:inline-flex}
input,select,button{font:inherit}input,select{padding:.2rem .3rem;min-width:8rem}
button{padding:.3rem .8rem;border-radius:4px;border:1px solid #555;background:#f3f3f3;cursor:pointer}
button.approve{background:#2e7d32;border-color:#2e7d32;color:#fff}
button.reject{background:#fff;border-color:#b3261e;color:#b3261e}
button.danger{background:#fff;border-color:#b3261e;color:#b3261e}
.decide{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:end;margin-top:.5rem}
.badge{display:inline-block;padding:0 .45rem;border-radius:3px;font-size:.85rem;border:1px solid #888}
.s-paused,.s-decided{background:#fff4d6;border-color:#b7791f}.s-completed{background:#e6f4e6;border-color:#2e7d32}
.s-failed,.s-timed_out{background:#fbeaea;border-color:#b3261e}.s-cancelled{background:#eee}
.tree ul{list-style:none;margin:0;padding-left:1.25rem;border-left:1px dotted #999}.tree>ul{border:0;padding:0}
.tree li{margin:.2rem 0}.waiting{background:#fff4d6;outline:2px solid #b7791f;padding:0 .3rem;border-radius:3px}
.muted{color:#555}.pager{display:flex;gap:1rem;margin:1rem 0}
tr.at{background:#eef3fb}
"""


@dataclass(frozen=True)
class Chrome:
    """What every page needs: who is looking, the form token, where the app is mounted, the flash."""

    principal: Principal
    csrf: str
    base: str = ""
    flash: str = ""
    error: str = ""


def page(title: str, body: str, chrome: Chrome | None = None, *, current: str = "") -> str:
    """A whole HTML document: the header (when someone is logged in), then ``body`` as the main content."""
    header = "" if chrome is None else _header(chrome, current)
    notices = "" if chrome is None else _notices(chrome)
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'><style>{STYLE}</style></head>"
            f"<body><a class=skip href=#main>Skip to the content</a>{header}"
            f"<main id=main tabindex=-1>{notices}{body}</main></body></html>")


def _header(chrome: Chrome, current: str) -> str:
    base = escape(chrome.base)
    links = "".join(
        f"<a href='{base}/{name}'{' aria-current=page' if name == current else ''}>{label}</a>"
        for name, label in (("executions", "Executions"), ("approvals", "Approvals"))
    )
    who = chrome.principal
    if who.anonymous:
        signed = "<span class=who>open server (no token): every visitor may do everything</span>"
    else:
        scopes = ", ".join(sorted(who.scopes)) + (f" under {', '.join(who.paths)}" if who.paths else "")
        signed = (f"<span class=who>signed in as <strong data-testid=who>{escape(who.name)}</strong> "
                  f"({escape(scopes)})</span>"
                  f"<form method=post action='{base}/logout'>{_csrf(chrome)}<button>Log out</button></form>")
    return f"<header><nav aria-label=Main>{links}</nav>{signed}</header>"


def _notices(chrome: Chrome) -> str:
    parts = []
    if chrome.flash:
        parts.append(f"<p class=flash role=status>{escape(chrome.flash)}</p>")
    if chrome.error:
        parts.append(f"<p class=error role=alert>{escape(chrome.error)}</p>")
    return "".join(parts)


def _csrf(chrome: Chrome) -> str:
    return f"<input type=hidden name=csrf value='{escape(chrome.csrf)}'>"


def execution_href(execution_id: str, base: str = "") -> str:
    """The path of an execution's page (not yet HTML-escaped)."""
    return f"{base}/executions/{quote(execution_id, safe='')}"


def _status(status: str) -> str:
    return f"<span class='badge s-{escape(status)}' data-testid=status>{escape(status)}</span>"


def _when(moment: datetime) -> str:
    return (f"<time datetime='{escape(moment.isoformat())}' title='{escape(f'{moment:%Y-%m-%d %H:%M:%S} UTC')}'>"
            f"{escape(age(moment))} ago</time>")


# -- executions ---------------------------------------------------------------------------


def executions(rows: Sequence[Execution], search: ExecutionSearch, chrome: Chrome, *, more: str | None,
               first: bool) -> str:
    """The executions, newest first, under the filter form; ``more`` is the next page's query string."""
    base = escape(chrome.base)

    def field_(name: str, label: str, value: str | None, kind: str = "text") -> str:
        return (f"<label>{label}<input type={kind} name={name} value='{escape(value or '')}'"
                f"{' step=1' if kind == 'datetime-local' else ''}></label>")

    def moment(value: datetime | None) -> str | None:
        return None if value is None else f"{value:%Y-%m-%dT%H:%M:%S}"

    options = "".join(f"<option value={s}{' selected' if s == search.status else ''}>{s.replace('_', ' ')}</option>"
                      for s in STATUSES)
    form = (
        f"<form class=filters method=get action='{base}/executions' role=search aria-label='Filter executions'>"
        f"{field_('id', 'id starts with', search.id_prefix)}"
        f"<label>status<select name=status><option value=''>any</option>{options}</select></label>"
        f"{field_('runner', 'runner', search.root_path)}{field_('version', 'version', search.version)}"
        f"{field_('path', 'path prefix', search.path_prefix)}{field_('thread', 'thread', search.thread)}"
        f"{field_('since', 'created from (UTC)', moment(search.since), 'datetime-local')}"
        f"{field_('until', 'created before (UTC)', moment(search.until), 'datetime-local')}"
        f"<button>Filter</button> <a href='{base}/executions'>clear</a></form>"
    )
    body = "".join(
        f"<tr data-testid=execution-row><td><a href='{escape(execution_href(e.execution_id, chrome.base))}'>"
        f"{escape(e.execution_id)}</a></td><td><code>{escape(e.root_path)}</code></td>"
        f"<td>{escape(e.version) or '<span class=muted>-</span>'}</td><td>{_status(e.status)}</td>"
        f"<td>{_when(e.created_at)}</td><td>{_when(e.updated_at)}</td></tr>"
        for e in rows
    )
    table = (f"<table id=executions><caption class=muted>{'Newest first' if first else 'Older'}: "
             f"{len(rows)} shown</caption><thead><tr><th scope=col>id</th><th scope=col>runner</th>"
             f"<th scope=col>version</th><th scope=col>status</th><th scope=col>created</th>"
             f"<th scope=col>updated</th></tr></thead><tbody>{body}</tbody></table>") if rows else \
        "<p id=empty>No executions match.</p>"
    pager = []
    if not first:
        pager.append(f"<a href='{base}/executions?{escape(_filters(search))}'>&larr; newest</a>")
    if more is not None:
        pager.append(f"<a rel=next href='{base}/executions?{escape(more)}'>older &rarr;</a>")
    return page("Executions - tether", f"<h1>Executions</h1>{form}{table}<nav class=pager aria-label=Pages>"
                f"{''.join(pager)}</nav>", chrome, current="executions")


def _filters(search: ExecutionSearch) -> str:
    """The query string of a search (what the filter form sends)."""
    names = {"id_prefix": "id", "path_prefix": "path", "root_path": "runner"}
    given = {names.get(key, key): (f"{value:%Y-%m-%dT%H:%M:%S}" if isinstance(value, datetime) else value)
             for key, value in search.model_dump().items() if value is not None}
    return urlencode(given)


def cursor_of(last: Execution) -> str:
    """Where the page after ``last`` starts: its creation time and id, which never change."""
    return f"{last.created_at.isoformat()} {last.execution_id}"


def next_page(search: ExecutionSearch, last: Execution) -> str:
    """The query string of the page after ``last``: the same filters and its cursor."""
    return "&".join(filter(None, [_filters(search), urlencode({"before": cursor_of(last)})]))


# -- one execution ------------------------------------------------------------------------


@dataclass
class Actor:
    """One actor of an execution's tree, as its journal shows it."""

    path: str
    boundaries: int = 0
    messages: int = 0
    waiting: list[PendingInterrupt] = field(default_factory=list)
    children: dict[str, Actor] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def actor_tree(root_path: str, boundaries: Sequence[Boundary], pending: Sequence[PendingInterrupt]) -> Actor:
    """The tree of actors (and calls) that wrote the journal, with what each did and what waits."""
    root = Actor(root_path)

    def node(path: str) -> Actor:
        if path == root_path or not path.startswith(root_path + "/"):
            return root
        current = root
        for segment in path[len(root_path) + 1:].split("/"):
            child = f"{current.path}/{segment}"
            current = current.children.setdefault(child, Actor(child))
        return current

    for boundary in boundaries:
        actor = node(boundary.path)
        actor.boundaries += 1
        actor.messages += boundary.label.startswith("msg:")
    for row in pending:
        node(row.agent_path).waiting.append(row)
    return root


def _tree(actor: Actor) -> str:
    facts = [f"{actor.boundaries} boundar{'y' if actor.boundaries == 1 else 'ies'}"]
    if actor.messages:
        facts.append(f"{actor.messages} message{'s' if actor.messages != 1 else ''}")
    state = ""
    if actor.waiting:
        reasons = ", ".join(row.reason for row in actor.waiting)
        state = f" <strong class=waiting data-testid=waiting>waiting: {escape(reasons)}</strong>"
    children = "".join(_tree(child) for child in actor.children.values())
    inner = f"<ul>{children}</ul>" if children else ""
    return (f"<li data-testid=actor data-path='{escape(actor.path)}'><code title='{escape(actor.path)}'>"
            f"{escape(actor.name)}</code> <span class=muted>{escape(', '.join(facts))}</span>{state}{inner}</li>")


def execution(view: Timeline, boundaries: Sequence[Boundary], chrome: Chrome, *, at: int | None) -> str:
    """One execution: its facts, actions, actor tree, pending decisions, the state at a boundary, the timeline."""
    e = view.execution
    base = chrome.base
    href = escape(execution_href(e.execution_id, base))
    facts = [f"<code>{escape(e.root_path)}</code>", _status(e.status),
             f"version {escape(e.version)}" if e.version else "", f"thread {escape(e.thread)}" if e.thread else "",
             f"created {_when(e.created_at)}", f"updated {_when(e.updated_at)}"]
    parts = [f"<h1 data-testid=execution>{escape(e.execution_id)}</h1>",
             f"<p>{' &middot; '.join(fact for fact in facts if fact)}</p>", _actions(e, boundaries, chrome)]
    parts.append(f"<h2>Input</h2><pre data-testid=input>{escape(_pretty(e.input))}</pre>")
    if e.status == "completed":
        parts.append(f"<h2>Output</h2><pre data-testid=output>{escape(_pretty(e.result))}</pre>")
    if e.error:
        parts.append(f"<p class=error data-testid=error>{escape(e.error)}</p>")
    decision = view.decision
    if decision is not None:
        parts.append(
            f"<p data-testid=decision>decided {escape(f'{decision.at:%Y-%m-%d %H:%M:%S}')} UTC by "
            f"<strong>{escape(decision.by or 'someone')}</strong> at <code>{escape(decision.path)}</code>: "
            f"<code>{escape(json.dumps(decision.value, ensure_ascii=False))}</code>. Recorded; it goes on when "
            f"a process with its runner takes it up (a worker, or the application serving decisions).</p>"
        )
    parts.append("<h2>Actors</h2><div class=tree aria-label='Actor tree'><ul>"
                 f"{_tree(actor_tree(e.root_path, boundaries, view.pending))}</ul></div>")
    cards = "".join(_card(row, chrome, e.input, back=execution_href(e.execution_id, base)) for row in view.pending)
    parts.append(f"<h2>Waiting for a decision</h2><div id=pending>{cards or '<p class=muted>Nothing.</p>'}</div>")
    chosen = next((b for b in boundaries if b.seq == at), None)
    if chosen is not None:
        parts.append(f"<section id=state aria-labelledby=state-h><h2 id=state-h>State of "
                     f"<code>{escape(chosen.path)}</code> as of #{chosen.seq} ({escape(chosen.label)})</h2>"
                     f"<pre data-testid=state>{escape(_pretty(chosen.state))}</pre>"
                     f"<p class=muted>What it held:</p><pre>{escape(_pretty(chosen.value))}</pre></section>")
    rows = "".join(
        f"<tr{' class=at' if b.seq == at else ''}><td><a href='{href}?at={b.seq}#state' "
        f"aria-label='state as of boundary {b.seq}'>{b.seq}</a></td><td>{b.at:%H:%M:%S}</td>"
        f"<td><code>{escape(b.path)}</code></td><td>{escape(b.label)}</td>"
        f"<td><code>{escape(summarize(entry, 160))}</code></td></tr>"
        for b, entry in zip(boundaries, view.entries, strict=True)
    )
    cursor = view.entries[-1].seq if view.entries else 0
    live = "" if e.finished else f" data-live='{escape(json.dumps(EVENT_TYPES))}'"
    parts.append(f"<h2>Timeline</h2><table id=journal data-cursor={cursor}{live}><caption class=muted>Every "
                 f"boundary, oldest first; a number shows the actor's state as of it</caption><thead><tr>"
                 f"<th scope=col>#</th><th scope=col>at (UTC)</th><th scope=col>path</th><th scope=col>label</th>"
                 f"<th scope=col>what happened</th></tr></thead><tbody>{rows}</tbody></table>")
    if not e.finished:
        parts.append(f"<script src='{escape(base)}/assets/live.js' defer></script>")
    return page(f"{e.execution_id} - tether", "".join(parts), chrome, current="executions")


def _actions(e: Execution, boundaries: Sequence[Boundary], chrome: Chrome) -> str:
    """Cancel, retry and fork, for a token that may operate, where each applies."""
    if not chrome.principal.may("operate"):
        return ""
    action = escape(execution_href(e.execution_id, chrome.base))
    forms = []
    if not e.finished:
        forms.append(f"<form method=post action='{action}/cancel'>{_csrf(chrome)}"
                     f"<label>reason<input name=reason maxlength=2000></label> "
                     f"<button class=danger>Cancel execution</button></form>")
    if e.status == "failed":
        forms.append(f"<form method=post action='{action}/retry'>{_csrf(chrome)}"
                     f"<button>Retry from the last good boundary</button></form>")
    if boundaries:
        options = "".join(f"<option value={b.seq}>#{b.seq} {escape(b.path)} {escape(b.label)}</option>"
                          for b in boundaries)
        forms.append(f"<form method=post action='{action}/fork'>{_csrf(chrome)}"
                     f"<label>fork at<select name=at>{options}</select></label> "
                     f"<label>as new id<input name=as required maxlength=512></label> "
                     f"<button>Fork</button></form>")
    return f"<div class=decide aria-label=Actions>{''.join(forms)}</div>"


# -- approvals ----------------------------------------------------------------------------


def group_of(path: str) -> str:
    """The actor a pending call belongs to: its path without the call's own segment."""
    return path.rsplit("/", 1)[0] if "/" in path else path


def approvals(pending: Sequence[PendingInterrupt], inputs: dict[str, Any], chrome: Chrome, *,
              prefix: str = "", more: bool = False) -> str:
    """Pending interrupts grouped by the actor waiting, each with its context, the run's input and a decision."""
    base = escape(chrome.base)
    parts = ["<h1>Approvals</h1>",
             (f"<form class=filters method=get action='{base}/approvals' role=search aria-label='Filter approvals'>"
             f"<label>path prefix<input name=path_prefix value='{escape(prefix)}'></label>"
             f"<button>Show</button> <a href='{base}/approvals'>all</a></form>")]
    if not pending:
        parts.append("<p id=empty>Nothing is waiting for a decision.</p>")
        return page("Approvals - tether", "".join(parts), chrome, current="approvals")
    groups: dict[str, list[PendingInterrupt]] = {}
    for row in pending:
        groups.setdefault(group_of(row.agent_path), []).append(row)
    if more:
        parts.append(f"<p class=muted data-testid=more>The oldest {len(pending)} are shown; more wait. Narrow "
                     f"them with a path prefix, or decide these first.</p>")
    bulk = any(chrome.principal.may("approve", row.agent_path) for row in pending)
    sections = []
    for name, rows in groups.items():
        cards = "".join(_card(row, chrome, inputs.get(row.execution_id), back=f"{chrome.base}/approvals",
                              selectable=bulk) for row in rows)
        sections.append(f"<section data-testid=group data-group='{escape(name)}' aria-label='{escape(name)}'>"
                        f"<h2><code>{escape(name)}</code> <span class=muted>({len(rows)} waiting)</span></h2>"
                        f"{cards}</section>")
    parts.append("".join(sections))
    if bulk:
        # The checkboxes of every card belong to this form (form= attribute): one submit, then a confirmation.
        parts.append(f"<form id=bulk method=post action='{base}/approvals/bulk'>{_csrf(chrome)}"
                     f"<button class=approve>Approve the selected&hellip;</button> "
                     f"<span class=muted>You confirm on the next page.</span></form>")
    return page("Approvals - tether", "".join(parts), chrome, current="approvals")


def _card(row: PendingInterrupt, chrome: Chrome, run_input: Any, *, back: str, selectable: bool = False) -> str:
    """One pending interrupt and its decision form; ``seq`` pins the suspension the operator saw."""
    allowed = chrome.principal.may("approve", row.agent_path)
    pick = json.dumps([row.execution_id, row.agent_path, row.seq])
    select = (f"<label class=pick><input type=checkbox form=bulk name=pick value='{escape(pick)}'> select</label>"
              if selectable and allowed else "")
    if allowed:
        approver = "" if chrome.principal.anonymous else chrome.principal.name
        form = (f"<form class=decide method=post action='{escape(chrome.base)}/approvals/decide'>{_csrf(chrome)}"
                f"<input type=hidden name=back value='{escape(back)}'>"
                f"<input type=hidden name=execution_id value='{escape(row.execution_id)}'>"
                f"<input type=hidden name=path value='{escape(row.agent_path)}'>"
                f"<input type=hidden name=seq value='{row.seq}'>"
                f"<label>approver<input name=approver required maxlength=200 value='{escape(approver)}'></label>"
                f"<label>note<input name=note maxlength=2000></label>"
                f"<button class=approve name=decision value=approve>Approve</button>"
                f"<button class=reject name=decision value=reject>Reject</button></form>")
    else:
        form = "<p class=muted data-testid=not-yours>Your token may not decide at this path.</p>"
    return (
        f"<article class=card data-testid=pending data-execution='{escape(row.execution_id)}' "
        f"data-path='{escape(row.agent_path)}' aria-label='{escape(row.reason)} at {escape(row.agent_path)}'>"
        f"<div>{select} <a href='{escape(execution_href(row.execution_id, chrome.base))}'>"
        f"{escape(row.execution_id)}</a> &middot; waiting {escape(age(row.created_at))}</div>"
        f"<div><code data-testid=path>{escape(row.agent_path)}</code></div>"
        f"<div>reason: <strong data-testid=reason>{escape(row.reason)}</strong></div>"
        f"<div class=cols><div><p class=muted>context</p><pre data-testid=context>{escape(_pretty(row.context))}"
        f"</pre></div><div><p class=muted>the run's input</p><pre data-testid=input>{escape(_pretty(run_input))}"
        f"</pre></div></div>{form}</article>"
    )


def confirm_bulk(rows: Sequence[PendingInterrupt], chrome: Chrome) -> str:
    """The confirmation of a bulk approval: exactly what will be approved, and one button."""
    base = escape(chrome.base)
    items = "".join(f"<li data-testid=chosen><a href='{escape(execution_href(r.execution_id, chrome.base))}'>"
                    f"{escape(r.execution_id)}</a> <code>{escape(r.agent_path)}</code>: {escape(r.reason)}"
                    f"<input type=hidden name=pick value='{escape(json.dumps([r.execution_id, r.agent_path, r.seq]))}'>"
                    f"</li>" for r in rows)
    approver = "" if chrome.principal.anonymous else chrome.principal.name
    return page("Confirm - tether", (
        f"<h1>Approve {len(rows)} pending call{'s' if len(rows) != 1 else ''}?</h1>"
        f"<form method=post action='{base}/approvals/bulk'>{_csrf(chrome)}<input type=hidden name=confirm value=yes>"
        f"<ul>{items}</ul><div class=decide><label>approver<input name=approver required maxlength=200 "
        f"value='{escape(approver)}' autofocus></label><label>note<input name=note maxlength=2000></label>"
        f"<button class=approve>Approve {len(rows)}</button> <a href='{base}/approvals'>cancel, go back</a>"
        f"</div></form>"), chrome, current="approvals")


# -- the rest -----------------------------------------------------------------------------


def login(csrf: str, *, base: str = "", error: str = "") -> str:
    """The token form shown when the server is protected."""
    problem = f"<p class=error role=alert>{escape(error)}</p>" if error else ""
    return page("Log in - tether", (
        f"<h1>tether</h1>{problem}<form method=post action='{escape(base)}/login'>"
        f"<input type=hidden name=csrf value='{escape(csrf)}'>"
        f"<label>token<input type=password name=token required autofocus autocomplete=current-password></label> "
        f"<button>Log in</button></form>"
    ))


def message(title: str, text: str, chrome: Chrome | None = None) -> str:
    """A page that only says something (not found, forbidden, no store)."""
    return page(f"{title} - tether", f"<h1>{escape(title)}</h1><p class=error role=alert>{escape(text)}</p>", chrome)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


# The live timeline: follows the page's own event stream (the login cookie goes with it).
# Everything it shows is set as text, never as HTML: an event holds whatever a tool or a user put in it.
LIVE_JS = """(() => {
  const table = document.getElementById("journal");
  if (!table || !table.dataset.live) return;
  const body = table.tBodies[0];
  const status = document.querySelector("h1 + p [data-testid=status]");
  const pending = document.getElementById("pending");
  const base = new Set(["execution_id", "path", "label", "cursor", "at", "type"]);
  const verdicts = {execution_paused: "paused", execution_completed: "completed", execution_failed: "failed",
                    execution_cancelled: "cancelled", execution_timed_out: "timed_out",
                    execution_resumed: "decided"};
  const ends = ["execution_completed", "execution_failed", "execution_cancelled", "execution_timed_out"];
  const source = new EventSource(location.pathname + "/events?after=" + table.dataset.cursor);
  const cell = (row, text, code) => {
    const td = row.insertCell();
    const inner = code ? td.appendChild(document.createElement("code")) : td;
    inner.textContent = text;
  };
  const setStatus = (text) => {
    status.textContent = text;
    status.className = "badge s-" + text;
  };
  const show = (message) => {
    const event = JSON.parse(message.data);
    if (event.cursor === null) return;
    const rest = Object.fromEntries(Object.entries(event).filter(([key]) => !base.has(key)));
    const row = body.insertRow(-1);
    row.dataset.testid = "live";
    cell(row, event.cursor); cell(row, event.at.slice(11, 19)); cell(row, event.path, true);
    cell(row, event.label); cell(row, JSON.stringify(rest).slice(0, 160), true);
    table.dataset.cursor = event.cursor;
    if (verdicts[event.type]) setStatus(verdicts[event.type]);
    else if (["paused", "decided", "queued"].includes(status.textContent)) setStatus("running");
    if (event.type === "interrupt" && event.pending) {
      const line = pending.appendChild(document.createElement("p"));
      line.dataset.testid = "pending"; line.dataset.path = event.call_path;
      line.textContent = "pending at " + event.call_path + ": " + (event.reason || "") + " (reload to decide)";
    }
    if (event.type === "execution_resumed") {
      for (const card of pending.querySelectorAll("[data-testid=pending]"))
        if (card.dataset.path === event.path) card.remove();
      for (const actor of document.querySelectorAll("[data-testid=actor]"))
        if (actor.dataset.path === event.path) actor.querySelector(":scope > [data-testid=waiting]")?.remove();
      if (!pending.querySelector("[data-testid=pending]")) pending.textContent = "Nothing.";
    }
    if (ends.includes(event.type)) source.close();
  };
  for (const type of JSON.parse(table.dataset.live)) source.addEventListener(type, show);
})();
"""
