"""The ``tether`` console script: see and act on executions in any store.

    tether pending                       # what waits for a decision, with full paths
    tether show refund-abc               # one execution: status, lease, journal timeline
    tether threads                       # conversations: their runs, and the latest of each
    tether show --thread chat-7          # the runs of one conversation, in order
    tether state refund-abc --path chain:refund      # an actor's state as of its last boundary
    tether resume refund-abc --set approved=true --set metadata.approver=alice --app flows:runners
    tether recover refund-abc --app flows:runners     # continue a run whose process died
    tether watch refund-abc              # follow it as it runs, until it ends or pauses
    tether serve --app flows:runners     # the HTTP API and the /approvals page

``--store`` (or ``TETHER_STORE``) names the store, before or after the command:
``sqlite:///path`` or ``postgresql://...``; the default is ``sqlite:///tether.db``
here. Commands that only look (``pending``, ``show``, ``state``, ``executions``, ``doctor``)
and commands that act on executions never create or migrate a database: a
missing one is an error. ``--json`` prints JSON instead of tables, everywhere.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import shlex
import signal
import sys
from datetime import UTC, datetime
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import click
from pydantic import ValidationError
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from tether.runtime._core.version import __version__
from tether.runtime._executions.query import query
from tether.runtime._executions.retention import Retention
from tether.stores import (
    AlreadyResumed,
    LeaseHeld,
    SchemaVersionError,
    StoreNotFound,
    StoreUnavailable,
    TetherError,
    open_store,
)

from . import _watching
from ._access import SCOPES, create_token as make_token
from ._operator import Operator, Timeline, age, load_app, parse_assignments, parse_duration, summarize

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Sequence
    from datetime import timedelta

    from tether.runtime._core.execution import RunResult
    from tether.runtime._executions.stream import Until
    from tether.stores import Execution

    from ._operator import Decision

T = TypeVar("T")
F = TypeVar("F", bound="Callable[..., Any]")
DEFAULT_STORE = "sqlite:///tether.db"
STATUSES = ["queued", "running", "paused", "decided", "completed", "failed", "cancelled", "timed_out"]
Part = str | tuple[str, str]  # text, or (text, style): never read as markup
_PAGE = 500  # rows read per query when a command lists everything (the runs of a thread)


def _width() -> int | None:
    """The width to fit: ``COLUMNS`` when set, else the terminal's; piped output is not cut."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    # Piped or captured output gets wide lines: a path wrapped to 80 columns helps nobody there.
    return None if sys.stdout.isatty() else 200


def _out() -> Console:
    return Console(highlight=False, width=_width())


def _err() -> Console:
    return Console(stderr=True, highlight=False, width=_width())


class Settings:
    """What the group's options (or the same options after the command) chose."""

    def __init__(self, store: str, backend: str) -> None:
        self.store = store
        self.backend = backend

    def run(self, job: Callable[[Operator], Awaitable[T]], app: str | None = None, *, create: bool = False) -> T:
        """Open the store (and the runners of ``app``), run ``job`` on the chosen backend.

        ``create=False``: an existing tether store only (see `tether.stores.open_store`).
        """
        runners = load_app(app) if app else []

        async def main() -> T:
            async with open_store(self.store, create=create) as store:
                return await job(Operator(store, runners))

        try:
            return anyio.run(main, backend=self.backend)
        except StoreNotFound as exc:
            exc.add_note(f"To make a new, empty store there: {self.hint('migrate')}")
            raise
        except SchemaVersionError as exc:
            if exc.found < exc.supported:
                exc.add_note(f"To migrate it: {self.hint('migrate')}")
            raise
        except LeaseHeld as exc:
            what = shlex.quote(exc.execution_id)
            exc.add_note(
                f"If that process is gone for good (it ran on another machine, or in a container), take its "
                f"lease over with --force: {self.hint(f'recover {what} --app module:attr --force')} (or cancel "
                f"{what} --force). The journal records the takeover with your user name."
            )
            raise

    def hint(self, command: str) -> str:
        """A command to type next, with the --store this one used (unless it is the default)."""
        flag = "" if self.store == DEFAULT_STORE else f" --store {shlex.quote(self.store)}"
        return f"tether{flag} {command}"


pass_settings = click.make_pass_decorator(Settings)


def _override(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        setattr(ctx.ensure_object(Settings), param.name or "", value)


def store_options(command: F) -> F:
    """``--store`` and ``--backend`` after the command too (``tether pending --store URL``)."""
    command = click.option("--backend", type=click.Choice(["asyncio", "trio"]), expose_value=False,
                           callback=_override, help="As before the command.")(command)
    return click.option("--store", expose_value=False, callback=_override, metavar="URL",
                        help="As before the command: sqlite:///path or postgresql://...")(command)


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(command)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--store", envvar="TETHER_STORE", default=DEFAULT_STORE, show_default=True, metavar="URL",
              help="sqlite:///path or postgresql://... (or $TETHER_STORE); also accepted after the command.")
@click.option("--backend", type=click.Choice(["asyncio", "trio"]), default="asyncio", show_default=True)
@click.version_option(__version__, prog_name="tether", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, store: str, backend: str) -> None:
    """See and act on durable executions: what is pending, what happened, resume, serve."""
    ctx.obj = Settings(store, backend)


@cli.command()
@click.option("--path-prefix", help="Only interrupts under this path (a plain string prefix).")
@json_option
@store_options
@pass_settings
def pending(settings: Settings, path_prefix: str | None, as_json: bool) -> None:
    """Pending interrupts: execution, full path, reason, context, age."""
    rows = settings.run(lambda op: op.pending(path_prefix))
    if as_json:
        _print_json([p.model_dump(mode="json") for p in rows])
        return
    out = _out()
    if not rows:
        out.print("Nothing is pending.")
        return
    title = f"{len(rows)} pending"
    table = Table("execution", "path", "reason", "context", "age", title=title)
    for row in rows:
        table.add_row(*map(Text, (row.execution_id, row.agent_path, row.reason, _json(row.context),
                                  age(row.created_at))))
    if _fits(out, table):
        out.print(table)
        return
    _say(out, (title, "bold"))
    for row in rows:
        _say(out, (row.execution_id, "bold"), f"  {row.agent_path}  ", (row.reason, "yellow"),
             f"  waiting {age(row.created_at)}")
        _say(out, _json(row.context), indent=4)


# The name fastaiagent's command had, for scripts and cron lines written for it.
cli.add_command(click.Command("list-pending", callback=pending.callback, params=pending.params,
                              help="The same as 'pending'.", short_help="The same as 'pending'."))


@cli.command()
@click.option("--status", type=click.Choice(STATUSES))
@click.option("--limit", default=100, show_default=True)
@json_option
@store_options
@pass_settings
def executions(settings: Settings, status: str | None, limit: int, as_json: bool) -> None:
    """Executions, most recently updated first; a decided one with who decided, and when."""
    async def listing(op: Operator) -> list[tuple[Execution, Decision | None]]:
        return [(row, await op.decision(row)) for row in await op.executions(status, limit=limit)]

    rows = settings.run(listing)
    if as_json:
        _print_json([{**e.model_dump(mode="json"), "decision": d.as_json() if d else None} for e, d in rows])
        return
    out = _out()
    if not rows:
        out.print(f"No {status} executions." if status else "No executions.")
        return
    title = _count(len(rows), "execution")
    table = Table("execution", "root", "status", "updated", title=title)
    for row, decision in rows:
        table.add_row(Text(row.execution_id), Text(row.root_path), Text.assemble(*_status(row, decision)),
                      Text(age(row.updated_at) + " ago"))
    if _fits(out, table):
        out.print(table)
        return
    _say(out, (title, "bold"))
    for row, decision in rows:
        _say(out, (row.execution_id, "bold"), f"  {row.root_path}  ", *_status(row, decision),
             f"  updated {age(row.updated_at)} ago")


@cli.group(invoke_without_command=True)
@json_option
@store_options
@pass_settings
@click.pass_context
def schedules(context: click.Context, settings: Settings, as_json: bool) -> None:
    """Schedules: their cron, zone, last tick and next; pause, resume or trigger one."""
    if context.invoked_subcommand is not None:
        return
    rows = settings.run(lambda op: op.store.list_schedules())
    if as_json:
        _print_json([{**row.model_dump(mode="json"), "next_tick": _next_tick(row)} for row in rows])
        return
    out = _out()
    if not rows:
        out.print("No schedules. Declare one in the app (Schedule(name, cron=..., runner=...)); a worker records it.")
        return
    table = Table("schedule", "cron", "zone", "runs", "last tick", "next tick", "state",
                  title=_count(len(rows), "schedule"))
    for row in rows:
        table.add_row(Text(row.name), Text(row.cron), Text(row.tz), Text(row.root_path),
                      Text(row.last_tick.isoformat(timespec="seconds")), Text(_next_tick(row) or "-"),
                      Text("paused" if row.paused else "active"))
    if _fits(out, table):
        out.print(table)
        return
    for row in rows:
        _say(out, (row.name, "bold"), f"  {row.cron} ({row.tz}) starts {row.root_path}; next {_next_tick(row)}",
             "  paused" if row.paused else "")


def _next_tick(row: Any) -> str | None:
    from zoneinfo import ZoneInfo

    from cronsim import CronSim

    if row.paused:
        return None
    later = max(row.last_tick, datetime.now(UTC))
    return next(iter(CronSim(row.cron, later.astimezone(ZoneInfo(row.tz))))).isoformat(timespec="seconds")


@schedules.command("pause")
@click.argument("name")
@store_options
@pass_settings
def pause_schedule(settings: Settings, name: str) -> None:
    """Start no more ticks of the schedule NAME, until it is resumed."""
    _pause(settings, name, paused=True)


@schedules.command("resume")
@click.argument("name")
@store_options
@pass_settings
def resume_schedule(settings: Settings, name: str) -> None:
    """Start the ticks of the schedule NAME again, from now: those that came while it was paused are skipped."""
    _pause(settings, name, paused=False)


def _pause(settings: Settings, name: str, *, paused: bool) -> None:
    row = settings.run(lambda op: op.store.pause_schedule(name, paused=paused, now=datetime.now(UTC)))
    if row is None:
        raise click.ClickException(f"No schedule {name!r} in {settings.store}: `tether schedules` lists them.")
    _say(_out(), f"Schedule {name} is {'paused' if paused else 'active again, counting from now'}.")


@schedules.command()
@click.argument("name")
@store_options
@pass_settings
def trigger(settings: Settings, name: str) -> None:
    """Start one execution of the schedule NAME now, for a worker to run."""
    from tether.runtime._executions.schedules import tick_execution
    from tether.runtime._executions.service import Executions

    async def start(op: Operator) -> str:
        row = next((r for r in await op.store.list_schedules() if r.name == name), None)
        if row is None:
            raise click.ClickException(f"No schedule {name!r} in {settings.store}: `tether schedules` lists them.")
        new = tick_execution(row, None, now=datetime.now(UTC))
        await Executions(op.store).enqueue(new)
        return new.execution_id

    execution_id = settings.run(start)
    _say(_out(), "Started ", (execution_id, "bold"), ": a worker with its runner runs it.")


@cli.command()
@json_option
@store_options
@pass_settings
def queues(settings: Settings, as_json: bool) -> None:
    """Queues: what waits, runs and started in the rate period, per queue and key, and the oldest waiting."""
    rows = settings.run(lambda op: op.store.queue_stats())
    if as_json:
        _print_json([row.model_dump(mode="json") for row in rows])
        return
    out = _out()
    if not rows:
        out.print("No queues. Declare one in the app (Queue(name, concurrency=...)); a worker records it.")
        return
    table = Table("queue", "key", "waiting", "running", "admitted", "oldest waiting",
                  title=_count(len({row.queue for row in rows}), "queue"))
    for row in rows:
        table.add_row(Text(row.queue if row.key is None else ""), Text(row.key or "(all)"), Text(str(row.waiting)),
                      Text(str(row.running)), Text(str(row.admitted)),
                      Text(age(row.oldest_waiting) if row.oldest_waiting else "-"))
    if _fits(out, table):
        out.print(table)
        return
    for row in rows:
        _say(out, (row.queue, "bold"), f"  {row.key or '(all)'}: {row.waiting} waiting, {row.running} running, "
             f"{row.admitted} admitted", f", oldest waiting {age(row.oldest_waiting)}" if row.oldest_waiting else "")


@cli.command()
@click.option("--limit", default=100, show_default=True, help="Threads listed at most.")
@click.option("--after", metavar="NAME", help="Only threads whose name sorts after NAME (the next page).")
@json_option
@store_options
@pass_settings
def threads(settings: Settings, limit: int, after: str | None, as_json: bool) -> None:
    """Conversations (threads), by name: how many runs each has, and its latest run."""
    rows = settings.run(lambda op: op.store.list_threads(limit=limit, after=after))
    if as_json:
        _print_json([{"thread": t.thread, "runs": t.runs, "latest": t.latest.model_dump(mode="json")} for t in rows])
        return
    out = _out()
    if not rows:
        out.print("No threads.")
        return
    title = _count(len(rows), "thread")
    table = Table("thread", "runs", "latest run", "status", "updated", title=title)
    for row in rows:
        latest = row.latest
        table.add_row(Text(row.thread), Text(str(row.runs)), Text(latest.execution_id),
                      Text.assemble(*_status(latest)), Text(age(latest.updated_at) + " ago"))
    if _fits(out, table):
        out.print(table)
        return
    _say(out, (title, "bold"))
    for row in rows:
        _say(out, (row.thread, "bold"), f"  {_count(row.runs, 'run')}, latest {row.latest.execution_id}  ",
             *_status(row.latest), f"  updated {age(row.latest.updated_at)} ago")


@cli.command()
@click.argument("execution_id", required=False)
@click.option("--thread", metavar="NAME", help="Instead of one execution: the runs of this thread, in order.")
@json_option
@store_options
@pass_settings
def show(settings: Settings, execution_id: str | None, thread: str | None, as_json: bool) -> None:
    """One execution: status, lease, pending interrupts, and its journal as a timeline.

    With --thread NAME instead of an id: the runs of that conversation, first run first.
    """
    if (execution_id is None) == (thread is None):
        raise click.UsageError("give an execution id, or --thread NAME, but not both.")
    if thread is not None:
        _show_thread(settings, thread, as_json)
        return
    assert execution_id is not None
    timeline = settings.run(lambda op: op.show(execution_id))
    if as_json:
        _print_json(timeline.as_json())
        return
    _print_timeline(settings, timeline)


def _show_thread(settings: Settings, thread: str, as_json: bool) -> None:
    """``tether show --thread NAME``: every run of the thread, in the order they started."""
    async def runs(op: Operator) -> list[Execution]:
        found: list[Execution] = []
        while True:  # a page at a time: a thread may have many runs
            page = await op.store.list_executions(thread=thread, limit=_PAGE, after=found[-1] if found else None)
            found += page
            if len(page) < _PAGE:
                return found

    rows = settings.run(runs)
    if not rows:
        raise click.ClickException(f"No runs of thread {thread!r} in this store. See the threads there with: "
                                   f"{settings.hint('threads')}")
    if as_json:
        _print_json({"thread": thread, "runs": [row.model_dump(mode="json") for row in rows]})
        return
    out = _out()
    title = f"thread {thread}: {_count(len(rows), 'run')} of {rows[-1].root_path}"
    table = Table("#", "execution", "status", "started", "input", "output", title=title)
    for number, row in enumerate(rows, 1):
        output = _json(row.result) if row.status == "completed" else row.error or ""
        table.add_row(Text(str(number)), Text(row.execution_id), Text.assemble(*_status(row)),
                      Text(f"{row.created_at:%Y-%m-%d %H:%M:%S}"), Text(_json(row.input)), Text(output))
    if _fits(out, table):
        out.print(table)
        return
    _say(out, (title, "bold"))
    for number, row in enumerate(rows, 1):
        _say(out, f"{number:>3}  ", (row.execution_id, "bold"), "  ", *_status(row),
             f"  started {row.created_at:%Y-%m-%d %H:%M:%S} UTC")
        _say(out, f"input: {_json(row.input)}", indent=5)
        if row.status == "completed":
            _say(out, f"output: {_json(row.result)}", indent=5)
        elif row.error:
            _say(out, ("error: ", "red"), row.error, indent=5)



@cli.command()
@click.argument("execution_id")
@json_option
@store_options
@pass_settings
def history(settings: Settings, execution_id: str, as_json: bool) -> None:
    """Every boundary of an execution: what it holds, and its actor's state as of it."""
    boundaries = settings.run(lambda op: op.history(execution_id))
    if as_json:
        _print_json([b.as_json() for b in boundaries])
        return
    out = _out()
    table = Table("#", "path", "label", "holds", "state")
    for b in boundaries:
        table.add_row(*map(Text, (str(b.seq), b.path, b.label, _json(b.value), _json(b.state) if b.state else "")))
    if _fits(out, table):
        out.print(table)
        return
    for b in boundaries:
        _say(out, f"{b.seq:>3}  {b.path}  ", (b.label, "cyan"))
        _say(out, _json(b.value), indent=5)


@cli.command()
@click.argument("execution_id")
@click.option("--path", metavar="PATH",
              help="The actor, e.g. supervisor:planner/worker:auditor (default: the root actor).")
@json_option
@store_options
@pass_settings
def state(settings: Settings, execution_id: str, path: str | None, as_json: bool) -> None:
    """An actor's state as of its last journaled boundary; reads only, takes no lease."""
    found = settings.run(lambda op: query(op.store, execution_id, path))
    if as_json:
        _print_json(found.model_dump(mode="json"))
        return
    out = _out()
    _say(out, (found.execution_id, "bold"), f"  {found.path}  ", (found.status, "cyan"))
    as_of = f"as of #{found.seq} {found.label}" if found.label else "no boundary journaled yet"
    _say(out, as_of)
    _print_json(found.state)  # whole, never folded to the width: it is there to be read or copied


@cli.command()
@click.argument("execution_id")
@click.option("--at", "at", required=True, metavar="BOUNDARY",
              help="Where to fork: a seq from `tether history`, or a label such as node:b or turn:2.")
@click.option("--as", "new_id", required=True, metavar="ID", help="The fork's execution id (a new one).")
@click.option("--update", "update", metavar="JSON",
              help="Replaces what the boundary holds: a step's result, or a decision's value.")
@click.option("--reuse-effects", is_flag=True,
              help="Answer the calls the original made alike with its recorded results, instead of running them.")
@click.option("--app", metavar="MODULE:ATTR", help="Run the fork here with this runner; else a worker does.")
@json_option
@store_options
@pass_settings
def fork(settings: Settings, execution_id: str, at: str, new_id: str, update: str | None, reuse_effects: bool,
         app: str | None, as_json: bool) -> None:
    """A new execution from one boundary of this one, which stays as it is."""
    where: int | str = int(at) if at.isdigit() else at
    changes: dict[str, Any] = {}
    if update is not None:
        try:
            changes["update"] = json.loads(update)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--update") from None
    effects = "reuse" if reuse_effects else "again"
    result = settings.run(lambda op: op.fork(execution_id, at=where, new_execution_id=new_id,
                                             run=app is not None, effects=effects, **changes), app)
    if app is None and not as_json:
        out = _out()
        _say(out, (new_id, "bold"), f" forked from {execution_id} at {at}: recorded, not run. A worker with its "
                                    f"runner continues it, or")
        _say(out, settings.hint(f"recover {shlex.quote(new_id)} --app module:attr"), indent=4)
        return
    _print_result(settings, result, as_json)


@cli.command()
@click.argument("execution_id")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE",
              help="A field of the decision (repeatable): approved=true, metadata.approver=alice.")
@click.option("--decision", "raw", metavar="JSON", help="The whole decision as a JSON object.")
@click.option("--json", "json_flag", is_flag=False, flag_value="", default=None, metavar="",
              help="Print JSON instead of text. (Followed by a JSON object it is the decision, as "
                   "--decision: deprecated.)")
@click.option("--path", help="Which pending interrupt, when several are pending.")
@click.option("--app", metavar="MODULE:ATTR", help="The runner(s) to continue with, importable here.")
@click.option("--detach", is_flag=True, help="Only record the decision; a worker continues the run.")
@click.option("--by", help="Who decides, journaled with the decision (default: cli:<your user name>).")
@store_options
@pass_settings
def resume(settings: Settings, execution_id: str, assignments: tuple[str, ...], raw: str | None,
           json_flag: str | None, path: str | None, app: str | None, detach: bool, by: str | None) -> None:
    """Decide a pending interrupt and continue the run here; with no decision, recover a crashed run.

    With --detach, or without --app, the decision is recorded (exactly once) and
    the run is left to a process that has the runner: a `tether worker`, an
    application that serves decisions, or `tether recover ID --app ...`.
    """
    as_json = json_flag == ""
    if json_flag and not json_flag.lstrip().startswith("{"):
        raise click.UsageError(f"--json takes no value here, and {json_flag!r} is no JSON object: put --json "
                               f"after the execution id, and give a decision with --decision JSON.")
    if json_flag:  # --json '{"approved": true}', the old spelling of --decision (its output stays text)
        if raw is not None:
            raise click.UsageError("Give the decision with --decision, not with both --decision and --json.")
        _say(_err(), ("--json JSON is deprecated:", "yellow"),
             " write --decision JSON (--json alone asks for JSON output).")
        raw = json_flag
    value = _decision(assignments, raw, "--json" if json_flag else "--decision")
    if value is None and (app is None or detach):
        raise click.UsageError("Recovering a run here needs its runner: pass --app module:attr (without --detach).")
    decider = by or _decider()
    if app is not None and not detach:
        _print_result(settings, settings.run(
            lambda op: op.resume(execution_id, value, path=path, by=decider), app), as_json)
        return

    async def record(op: Operator) -> Timeline:
        assert value is not None
        await op.decide(execution_id, value, path=path, by=decider)
        return await op.show(execution_id)

    timeline = settings.run(record, app)  # with --detach the app is loaded: its decision models check the value
    decision = timeline.decision
    if as_json:
        _print_json({"execution_id": execution_id, "status": timeline.execution.status, "continuing": False,
                     "decision": decision.as_json() if decision else None})
        return
    out = _out()
    what = shlex.quote(execution_id)
    _say(out, "Decision recorded for ", (execution_id, "bold"), f" (by {decider})",
         f": {_json(decision.value)}" if decision else "", ". No process here continues the run; one with "
         "its runner will: a `tether worker`, the application serving decisions, or")
    _say(out, settings.hint(f"recover {what} --app module:attr"), indent=2)


@cli.command()
@click.argument("execution_id")
@click.option("--app", required=True, metavar="MODULE:ATTR", help="The runner(s) to continue with, importable here.")
@click.option("--force", is_flag=True,
              help="Take the lease over even if its process may be alive (another machine, a container). "
                   "Journaled, with your user name.")
@json_option
@store_options
@pass_settings
def recover(settings: Settings, execution_id: str, app: str, force: bool, as_json: bool) -> None:
    """Continue a run whose process died, from its journal (with any decision recorded for it).

    A process that died on this machine is proven dead from the process table,
    and its lease is taken over at once; one on another machine is waited out
    (its lease expires) unless --force.
    """
    result = settings.run(lambda op: op.resume(execution_id, None, force=force), app)
    _print_result(settings, result, as_json)


@cli.command()
@click.argument("execution_id")
@click.option("--after", default=0, show_default=True, metavar="CURSOR",
              type=click.IntRange(0, _watching.LAST_CURSOR),
              help="Only events after this cursor (the first column; 0: from the beginning).")
@click.option("--through-pauses", is_flag=True, help="Keep following while it waits for a decision, to its end.")
@click.option("--json", "as_json", is_flag=True, help="One event per line, as JSON.")
@store_options
@pass_settings
def watch(settings: Settings, execution_id: str, after: int, through_pauses: bool, as_json: bool) -> None:
    """Follow an execution as it runs, wherever it runs, until it ends or pauses.

    Steps print as rows as they are journaled; a pause shows what it waits for and
    how to decide it. Interrupt with Ctrl-C: the execution goes on; continue watching
    later with --after and the last cursor printed.
    """
    out = _out()
    until: Until = "finished" if through_pauses else "paused"
    last = settings.run(lambda op: _watching.watch(op.store, execution_id, out, after=after, until=until,
                                                   as_json=as_json))
    if as_json or last is None or last.type != "execution_paused":
        return
    _say(_err(), f"Paused. Decide it with: {settings.hint(f'resume {shlex.quote(execution_id)} --set approved=true')}"
                 f" (or on the /approvals page); then watch again with --after {last.cursor}.")


@cli.command()
@click.argument("execution_id")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE",
              help="A field of the message (repeatable): approved=true, by=alice.")
@click.option("--message", "raw", metavar="JSON", help="The whole message as a JSON object.")
@click.option("--path", help="The receiving actor (default: the execution's root).")
@click.option("--by", help="Who sends it, journaled with it (default: cli:<your user name>).")
@click.option("--app", metavar="MODULE:ATTR", help="The application's code, to check the message against the "
                                                   "type a waiting actor expects.")
@json_option
@store_options
@pass_settings
def send(settings: Settings, execution_id: str, assignments: tuple[str, ...], raw: str | None, path: str | None,
         by: str | None, app: str | None, as_json: bool) -> None:
    """Send a durable message to an execution: the next wait_for of its type there receives it, once.

    It is journaled at once, in order, whether the execution runs now, waits for
    it (then it is marked for a worker), or its process is down. A message an
    actor waits for is checked against the type it waits for (with --app, which
    defines that type) before it is accepted.
    """
    message = _decision(assignments, raw, "--message")
    if message is None:
        raise click.UsageError("Give the message with --set KEY=VALUE (repeatable) or --message JSON.")
    try:
        entry = settings.run(lambda op: op.send_message(execution_id, message, path=path, by=by or _decider()), app)
    except ValidationError as exc:
        _complain("Not a valid message", exc, " (nothing was sent)")
        raise click.exceptions.Exit(2) from None
    if as_json:
        _print_json(entry.model_dump(mode="json"))
    else:
        _say(_out(), f"Sent to {entry.path} of {execution_id} (#{entry.seq}).")


@cli.command()
@click.argument("execution_id")
@click.option("--app", metavar="MODULE:ATTR", help="The runner(s) to continue with here; without: a worker does.")
@click.option("--by", help="Who retries, journaled (default: cli:<your user name>).")
@json_option
@store_options
@pass_settings
def retry(settings: Settings, execution_id: str, app: str | None, by: str | None, as_json: bool) -> None:
    """Continue a failed execution from its last good boundary (its finished steps are not run again).

    With --app it continues here, to its end or its next pause; without, it is
    marked to continue and a `tether worker` (or `tether recover ID --app ...`)
    carries it on.
    """
    result = settings.run(lambda op: op.retry(execution_id, by=by or _decider(), here=app is not None), app)
    if result.status == "running" and not as_json:
        _say(_out(), f"Retrying: {execution_id} continues from its last good boundary in the next process that "
                     f"takes it up: a worker, or {settings.hint(f'recover {shlex.quote(execution_id)} --app module:attr')}")
    else:
        _print_result(settings, result, as_json)


@cli.command()
@click.argument("execution_id")
@click.option("--reason", default="", help="Why, journaled with the verdict.")
@click.option("--by", help="Who cancels, journaled with the verdict (default: cli:<your user name>).")
@click.option("--wait", "wait", type=click.FloatRange(min=0), default=10.0, show_default=True,
              metavar="SECONDS", help="How long to wait for a running execution's process to stop it.")
@click.option("--no-wait", is_flag=True, help="Record the cancel and return (--wait 0).")
@click.option("--force", is_flag=True, help="Take the lease over even if its process may be alive.")
@json_option
@store_options
@pass_settings
def cancel(settings: Settings, execution_id: str, reason: str, by: str | None, wait: float, no_wait: bool,
           force: bool, as_json: bool) -> None:
    """Cancel an execution for good, wherever it runs or waits (its pending interrupts go too).

    A paused, decided, queued or sleeping execution is cancelled at once. A running
    one is stopped by the process that runs it, which is told and cancels what it
    is doing at its next await (Postgres: at once; SQLite: within a quarter
    second); this command waits --wait seconds for that. A process that has not
    stopped it by then is named (exit 1): it may be gone, and --force takes over.
    """
    wait = 0 if no_wait else wait

    async def job(op: Operator) -> RunResult:
        result = await op.cancel(execution_id, reason=reason, by=by or _decider(), force=force, wait=wait)
        found = await op.store.get_execution(execution_id) if result.status == "running" and wait else None
        if found is not None and found.lease_owner and found.lease_expires_at:
            held = LeaseHeld(execution_id, found.lease_owner, found.lease_expires_at)
            held.add_note("The cancel is recorded: that process stops the execution at its next await, or "
                          "the next one to take it up does.")
            raise held
        return result

    result = settings.run(job)
    if result.status in ("completed", "failed", "timed_out") and not as_json:
        # It ended before the cancel took: say so, not "completed" as if cancelling did that.
        _say(_err(), f"Not cancelled: {execution_id} had already {result.status.replace('_', ' ')}; a finished "
                     f"execution stays as it ended.")
    elif result.status == "running" and not as_json:
        _say(_out(), f"Cancel recorded: {execution_id} stops at its next await, in the process that runs it. "
                     f"Follow it with: {settings.hint(f'watch {shlex.quote(execution_id)}')}")
    else:
        _print_result(settings, result, as_json)
    if result.status not in ("cancelled", "running"):
        raise click.exceptions.Exit(1)


@cli.command()
@click.option("--older-than", required=True, metavar="AGE", help="30d, 12h, 45m or 90s.")
@json_option
@store_options
@pass_settings
def prune(settings: Settings, older_than: str, as_json: bool) -> None:
    """Delete finished executions (completed, failed, cancelled) older than AGE."""
    age = parse_duration(older_than)
    count = settings.run(lambda op: op.prune(age))
    if as_json:
        _print_json({"deleted": count})
        return
    _say(_out(), f"Deleted {_count(count, 'finished execution')} older than {older_than}.")


@cli.command()
@json_option
@store_options
@pass_settings
def doctor(settings: Settings, as_json: bool) -> None:
    """Check the whole store for damage and broken invariants (reads everything; changes nothing)."""
    problems = settings.run(lambda op: op.store.check())
    out = _out()
    if as_json:
        _print_json({"store": settings.store, "problems": problems})
    elif problems:  # on stdout: the list is what the command was asked for (`tether doctor | less`)
        _say(out, (f"{_count(len(problems), 'problem')}", "bold red"), f" in {settings.store}:")
        for problem in problems:
            _say(out, problem, indent=2)
    else:
        _say(out, f"{settings.store}: no problems found.")
    if problems:
        raise click.exceptions.Exit(1)  # not sys.exit: main() returns the code, in-process too


@cli.command(epilog="\b\n"  # kept as written: one example a line
              "tether migrate                                   # the schema only\n"
              "tether migrate refund-7 --to 2 --app app:runners [--dry-run]\n"
              "tether migrate --all --from 1 --to 2 --app app:runners [--dry-run]")
@click.argument("execution_id", required=False)
@click.option("--all", "every", is_flag=True, help="Every unfinished run on --from (instead of one id).")
@click.option("--from", "from_version", metavar="VERSION", help="With --all: the version runs leave.")
@click.option("--to", "to", metavar="VERSION", help="The version runs move to; its code comes with --app.")
@click.option("--app", metavar="MODULE:ATTR", help="The runner(s), with version --to and its migrations.")
@click.option("--dry-run", is_flag=True, help="Say what would change, and write nothing.")
@click.option("--by", help="Who migrates, journaled with the migration (default: cli:<your user name>).")
@json_option
@store_options
@pass_settings
def migrate(settings: Settings, execution_id: str | None, every: bool, from_version: str | None,
            to: str | None, app: str | None, dry_run: bool, by: str | None, as_json: bool) -> None:
    """Bring the store's tables up to this tether's schema; with an id or --all, move runs to another version."""
    if execution_id is None and not every:
        if to is not None or from_version is not None or dry_run:
            raise click.UsageError("give an execution id or --all to move runs to another version.")
        _migrate_schema(settings, as_json)
        return
    if every == (execution_id is not None):
        raise click.UsageError("give either an execution id or --all, not both.")
    if to is None or app is None or (every and from_version is None):
        raise click.UsageError("moving runs needs --to and --app (and --from with --all).")
    decider = by or _decider()
    if every:
        assert from_version is not None
        moved = settings.run(lambda op: op.migrate_all(from_version=from_version, to=to, dry_run=dry_run,
                                                       by=decider), app)
    else:
        assert execution_id is not None
        moved = [(execution_id, settings.run(lambda op: op.migrate(execution_id, to=to, dry_run=dry_run,
                                                                    by=decider), app))]
    failed = [(run, exc) for run, exc in moved if isinstance(exc, Exception)]
    if as_json:
        _print_json([done.as_json() if not isinstance(done, Exception) else
                     {"execution_id": run, "error": str(done)} for run, done in moved])
    else:
        out = _out()
        if not moved:
            _say(out, f"No unfinished run on version {from_version!r} of a runner with version {to!r}.")
        for run, done in moved:
            if isinstance(done, Exception):
                _say(out, (run, "bold"), ("  not moved: ", "red"), str(done))
                continue
            verb = "would move" if dry_run else "moved"
            _say(out, (run, "bold"), f"  {verb} from version {done.from_version!r} to {done.to_version!r}: "
                                     f"{'; '.join(done.changes)}")
        if dry_run and moved:
            _say(out, "Dry run: nothing was written.")
    if failed:
        raise click.exceptions.Exit(1)


def _migrate_schema(settings: Settings, as_json: bool) -> None:
    from tether.stores import SCHEMA_VERSION

    async def nothing(op: Operator) -> None:
        return None

    settings.run(nothing, create=True)
    if as_json:
        _print_json({"store": settings.store, "schema_version": SCHEMA_VERSION})
        return
    _say(_out(), f"{settings.store}: schema version {SCHEMA_VERSION}.")


@cli.command()
@click.option("--app", metavar="MODULE:ATTR", help="The runner(s) that continue approved executions here.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True)
@click.option("--token", envvar="TETHER_TOKEN", help="Bearer token for the API and login for the page "
                                                     "($TETHER_TOKEN); required off loopback.")
@store_options
@pass_settings
def serve(settings: Settings, app: str | None, host: str, port: int, token: str | None) -> None:
    """Serve the HTTP API and the /approvals page (uvicorn under asyncio, hypercorn under trio)."""
    from ._serve import serve_forever

    serve_forever(settings.store, load_app(app) if app else [], host=host, port=port, token=token,
                  backend=settings.backend)


@cli.command()
@click.option("--app", required=True, metavar="MODULE:ATTR", help="The runners whose executions it takes.")
@click.option("--concurrency", default=4, show_default=True, help="Executions run at once.")
@click.option("--lease-seconds", default=30.0, show_default=True,
              help="How long a dead worker's executions wait before another takes them.")
@click.option("--poll-interval", default=1.0, show_default=True,
              help="Seconds between looks when no notification comes.")
@click.option("--grace", default=30.0, show_default=True,
              help="On SIGTERM, seconds to let running executions finish before handing them back.")
@click.option("--no-notify", is_flag=True, help="Poll only; do not LISTEN for Postgres notifications.")
@click.option("--retain", "retain", multiple=True, metavar="STATUS=AGE",
              help="Prune finished executions of STATUS older than AGE in the background (repeatable): "
                   "completed=30d, failed=90d.")
@store_options
@pass_settings
def worker(settings: Settings, app: str, concurrency: int, lease_seconds: float, poll_interval: float,
           grace: float, no_notify: bool, retain: tuple[str, ...]) -> None:
    """Run ready executions until SIGTERM: decided, due, detached, or left by a dead process."""
    from tether.runtime._executions.worker import ExecutionWorker

    retention = _retention(retain)
    runners = load_app(app)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    log = logging.getLogger("tether.runtime.worker")

    async def main() -> None:
        # A worker started while its store is down (a deploy during a database restart) waits
        # for it, as a running worker rides the outage out; only a store that cannot be used
        # once reached (a newer schema, a damaged file) ends it.
        for wait in _backoff():
            started = False
            try:
                async with open_store(settings.store) as store, ExecutionWorker(
                    store, runners, concurrency=concurrency, lease_seconds=lease_seconds,
                    poll_interval=poll_interval, notify=not no_notify, retention=retention,
                ) as running:
                    started = True
                    log.info("worker %s on %s for %s", running.name, settings.store,
                             ", ".join(r.root_path for r in runners))
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_stop_on_signal, running)
                        await running.serve(grace=grace)
                        tg.cancel_scope.cancel()
                return
            except StoreUnavailable as exc:
                if started:
                    raise
                log.warning("cannot start: %s; trying again in %.1f s", exc, wait)
                if await _signalled_within(wait):
                    log.info("stopping: nothing was started")
                    return

    anyio.run(main, backend=settings.backend)


def _backoff(first: float = 0.5, most: float = 10.0) -> Iterator[float]:
    """Seconds to wait before each next try: doubling from ``first`` up to ``most``, without end."""
    wait = first
    while True:
        yield wait
        wait = min(wait * 2, most)


def _retention(retain: tuple[str, ...]) -> Retention | None:
    """``--retain completed=30d`` options as a policy (None when there are none)."""
    if not retain:
        return None
    ages: dict[str, timedelta] = {}
    for option in retain:
        status, _, age = option.partition("=")
        if status not in ("completed", "failed", "cancelled", "timed_out") or not age:
            raise click.UsageError(f"--retain {option!r}: write STATUS=AGE, STATUS one of completed, failed, "
                                   f"cancelled, timed_out, e.g. --retain completed=30d.")
        ages[status] = parse_duration(age)
    return Retention(completed=ages.get("completed"), failed=ages.get("failed"),
                     cancelled=ages.get("cancelled"), timed_out=ages.get("timed_out"))


async def _signalled_within(seconds: float) -> bool:
    """Wait ``seconds``; true, at once, if SIGTERM or SIGINT comes first."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals, anyio.move_on_after(seconds):
        async for _ in signals:
            return True
    return False


async def _stop_on_signal(running: Any) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            logging.getLogger("tether.runtime.worker").info("stopping: no new work, finishing what runs")
            running.stop()
            return


@cli.group()
def tokens() -> None:
    """Access tokens for `tether serve`: each with a name and scopes, kept hashed in the store.

    Scopes: read (see executions and approvals), approve (decide; --path limits where),
    operate (cancel, retry, fork, send messages), admin (everything). The server's own
    TETHER_TOKEN stays an admin token named admin.
    """


@tokens.command("create")
@click.argument("name")
@click.option("--scope", "scopes", multiple=True, required=True, type=click.Choice(list(SCOPES)),
              help="What it may do (repeat for several).")
@click.option("--path", "paths", multiple=True, metavar="PREFIX",
              help="With --scope approve: decide only under this agent path prefix (repeat for several).")
@store_options
@pass_settings
def create_token(settings: Settings, name: str, scopes: tuple[str, ...], paths: tuple[str, ...]) -> None:
    """Make the token NAME and print its secret: shown this once, stored only as a hash."""
    secret = settings.run(lambda op: make_token(op.store, name, scopes, paths))
    err = _err()
    _say(err, "Token ", (name, "bold"), f" made ({', '.join(scopes)}"
         + (f" under {', '.join(paths)}" if paths else "") + "). Its secret, shown only now:")
    click.echo(secret)  # alone on stdout, for `$(tether tokens create ...)`


@tokens.command("list")
@json_option
@store_options
@pass_settings
def list_tokens(settings: Settings, as_json: bool) -> None:
    """Every token: its scopes, paths, when it was made, and whether it was revoked (never its secret)."""
    rows = settings.run(lambda op: op.store.list_tokens())
    if as_json:
        _print_json([row.model_dump(mode="json", exclude={"digest"}) for row in rows])
        return
    out = _out()
    if not rows:
        out.print("No tokens. Make one: tether tokens create NAME --scope read --scope approve")
        return
    table = Table("token", "scopes", "approves under", "made", "state", title=_count(len(rows), "token"))
    for row in rows:
        table.add_row(Text(row.name), Text(", ".join(row.scopes)), Text(", ".join(row.paths) or "any path"),
                      Text(row.created_at.isoformat(timespec="seconds")),
                      Text(f"revoked {row.revoked_at.isoformat(timespec='seconds')}" if row.revoked_at else "live"))
    out.print(table)


@tokens.command("revoke")
@click.argument("name")
@store_options
@pass_settings
def revoke_token(settings: Settings, name: str) -> None:
    """Revoke the token NAME: refused from the next request on, pages and API alike."""
    if not settings.run(lambda op: op.store.revoke_token(name, at=datetime.now(UTC))):
        raise click.ClickException(f"No live token {name!r} in {settings.store}: `tether tokens list` shows them.")
    _say(_out(), f"Token {name} is revoked.")


@cli.command()
@click.option("--backend", "demo_backend", type=click.Choice(["asyncio", "trio"]), default=None,
              help="Override the group's --backend for the demo's processes.")
@click.option("--store", expose_value=False, callback=_override, metavar="URL", help="As before the command.")
@pass_settings
def demo(settings: Settings, demo_backend: str | None) -> None:
    """A supervisor's run paused for a $50k refund, resumed by another process, a crash recovered."""
    # The story needs agents, which live a layer above this one: the package that tells
    # it registers it under the "tether.demo" entry point.
    stories = entry_points(group="tether.demo", name="default")
    if not stories:
        raise click.ClickException("No demo is installed: reinstall tether (pip install tether).")
    run_demo = next(iter(stories)).load()
    raise click.exceptions.Exit(run_demo(settings.store, backend=demo_backend or settings.backend))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tether`` command line and return its exit code."""
    try:
        # Not standalone: click returns an Exit's code (doctor's 1, --help's 0) instead of exiting.
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="tether", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        _say(_err(), "Aborted.")
        return 1
    except AlreadyResumed as exc:
        _complain("Already resumed", exc)
        return 2
    except ValidationError as exc:
        _complain("Not a valid decision", exc, " (nothing was claimed)")
        return 2
    except TetherError as exc:
        _complain(type(exc).__name__, exc)
        return 1
    return code if isinstance(code, int) else 0


def _complain(title: str, exc: BaseException, aside: str = "") -> None:
    """An error on stderr: what happened (the message, never read as markup), then its notes."""
    err = _err()
    _say(err, (f"{title}:", "bold red"), f"{aside} {exc}")
    for note in getattr(exc, "__notes__", ()):
        _say(err, note)


def _decider() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no name for this uid (a container, say)
        return "cli"


def _decision(assignments: tuple[str, ...], raw: str | None, option: str = "--decision") -> dict[str, Any] | None:
    if raw is not None and assignments:
        raise click.UsageError(f"Give the decision with --set or with {option}, not both.")
    if raw is not None:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise click.UsageError(f"{option} is not JSON ({exc}); nothing was done.") from exc
        if not isinstance(value, dict):
            raise click.UsageError(f"{option} must be a JSON object, like '{{\"approved\": true}}'.")
        return value
    return parse_assignments(assignments) if assignments else None


def _print_timeline(settings: Settings, timeline: Timeline) -> None:
    out = _out()
    execution = timeline.execution
    _say(out, (execution.execution_id, "bold"), f"  {execution.root_path}  ", *_status(execution))
    _say(out, f"started {execution.created_at:%Y-%m-%d %H:%M:%S} UTC, updated {age(execution.updated_at)} ago, "
              f"version {execution.version or '-'}, definition {execution.fingerprint or '-'}")
    if execution.lease_owner:
        _say(out, f"lease: {execution.lease_owner}, epoch {execution.lease_epoch}, "
                  f"expires {execution.lease_expires_at:%H:%M:%S} UTC")
    if execution.deadline is not None and not execution.finished:
        _say(out, f"deadline: {execution.deadline:%Y-%m-%d %H:%M:%S} UTC (it ends timed_out then)")
    if isinstance(execution.cancel, dict):
        reason = f": {execution.cancel.get('reason')}" if execution.cancel.get("reason") else ""
        _say(out, ("cancelling", "yellow"), f" (asked by {execution.cancel.get('by')}{reason}): the process that "
                  f"runs it stops it at its next await")
    if execution.error:
        _say(out, ("error: ", "red"), execution.error)
    if execution.status == "completed":
        _say(out, f"output: {_json(execution.result)}")
    decision = timeline.decision
    if decision is not None:
        _say(out, ("decided", "magenta"), f" {decision.at:%Y-%m-%d %H:%M:%S} UTC by {decision.by or 'someone'} "
                  f"at {decision.path}: {_json(decision.value)}")
        _say(out, "Recorded, not carried out yet: a process with its runner will (a `tether worker`, the "
                  "application serving decisions), or", indent=2)
        _say(out, settings.hint(f"recover {shlex.quote(execution.execution_id)} --app module:attr"), indent=4)
    for row in timeline.pending:
        _say(out, ("pending", "yellow"), f" {row.agent_path}: {row.reason} {_json(row.context)}")
    table = Table("#", "at", "path", "label", "what happened")
    times = [f"{entry.created_at:%H:%M:%S.%f}"[:-3] for entry in timeline.entries]
    for entry, at in zip(timeline.entries, times, strict=True):
        table.add_row(*map(Text, (str(entry.seq), at, entry.path, entry.label, summarize(entry))))
    if _fits(out, table):
        out.print(table)
        return
    _say(out, ("journal:", "bold"))
    for entry, at in zip(timeline.entries, times, strict=True):
        _say(out, f"{entry.seq:>3}  {at}  {entry.path}  ", (entry.label, "cyan"))
        _say(out, summarize(entry), indent=5)


def _print_result(settings: Settings, result: RunResult, as_json: bool) -> None:
    if as_json:
        _print_json(result.model_dump(mode="json"))
        return
    out = _out()
    if result.status == "paused" and result.pending:
        many = len(result.pending) > 1
        if many:
            _say(out, ("paused", "yellow"), f" at {len(result.pending)} paths:")
        for row in result.pending:
            lead: list[Part] = [] if many else [("paused", "yellow"), " at "]
            _say(out, *lead, f"{row.agent_path}: {row.reason} {_json(row.context)}", indent=2 if many else 0)
    elif result.status == "completed":
        _say(out, ("completed", "green"), f": {_json(result.output)}")
    else:
        _say(out, result.status + (f": {result.error}" if result.error else ""))


def _say(console: Console, *parts: Part, indent: int = 0) -> None:
    """Print ``parts`` as one paragraph folded to the console's width.

    Lines break at spaces; a word too long for a line (a path, a store URL) breaks
    right after one of its ``/``, so that a path is never cut inside a segment.
    Nothing is read as markup: an execution id or an interrupt's context may hold ``[/]``.
    """
    text = Text.assemble(*parts)
    room = max(console.width - indent, 20)
    for paragraph in text.split("\n", allow_blank=True):
        for start, end in _spans(paragraph.plain, room):
            console.print(Text(" " * indent) + paragraph[start:end], soft_wrap=True)


def _spans(text: str, width: int) -> Iterator[tuple[int, int]]:
    """Where `_say` breaks ``text``: ``(start, end)`` of each line, at most ``width`` long."""
    start = 0
    while len(text) - start > width:
        space = text.rfind(" ", start + 1, start + width + 1)
        if space != -1:
            yield start, len(text[start:space].rstrip()) + start
            start = len(text) - len(text[space:].lstrip())
            continue
        slash = text.rfind("/", start, start + width)
        end = slash + 1 if slash != -1 else start + width  # no "/" either: cut it where it must be
        yield start, end
        start = end
    yield start, len(text)


def _fits(console: Console, table: Table) -> bool:
    """Whether ``table`` fits the width with no cell wrapped; else it is printed as paragraphs."""
    return Measurement.get(console, console.options.update_width(1 << 16), table).maximum <= console.width


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _status(execution: Execution, decision: Decision | None = None) -> list[Part]:
    colour = {"completed": "green", "paused": "yellow", "decided": "magenta", "failed": "red", "timed_out": "red",
              "running": "cyan"}.get(execution.status, "")
    parts: list[Part] = [(execution.status, colour)]
    if decision is not None:
        parts.append(f" by {decision.by or 'someone'}, {age(decision.at)} ago")
    return parts


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))

