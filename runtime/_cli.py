"""The ``tether`` console script: see and act on executions in any store.

    tether pending                       # what waits for a decision, with full paths
    tether show refund-abc               # one execution: status, lease, journal timeline
    tether resume refund-abc --set approved=true --set metadata.approver=alice --app flows:runners
    tether recover refund-abc --app flows:runners     # continue a run whose process died
    tether serve --app flows:runners     # the HTTP API and the /approvals page

``--store`` (or ``TETHER_STORE``) names the store, before or after the command:
``sqlite:///path`` or ``postgresql://...``; the default is ``sqlite:///tether.db``
here. Commands that only look (``pending``, ``show``, ``executions``, ``doctor``)
and commands that act on executions never create or migrate a database: a
missing one is an error. ``--json`` prints JSON instead of tables, everywhere.
"""

from __future__ import annotations

import getpass
import importlib
import json
import logging
import os
import shlex
import signal
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import click
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from tether.stores import AlreadyResumed, TetherError, open_store

from ._operator import Operator, Timeline, age, load_app, parse_assignments, parse_duration, summarize
from ._version import __version__

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from tether.stores import Execution

    from ._execution import RunResult

T = TypeVar("T")
F = TypeVar("F", bound="Callable[..., Any]")
DEFAULT_STORE = "sqlite:///tether.db"
STATUSES = ["queued", "running", "paused", "decided", "completed", "failed", "cancelled"]


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

        return anyio.run(main, backend=self.backend)

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
    table = Table("execution", "path", "reason", "context", "age", title=f"{len(rows)} pending")
    _fit_paths(table, 1, [row.agent_path for row in rows], out.width)
    for row in rows:
        table.add_row(row.execution_id, _wrapped(row.agent_path, table.columns[1].min_width), row.reason,
                      _json(row.context), age(row.created_at))
    out.print(table)


@cli.command()
@click.option("--status", type=click.Choice(STATUSES))
@click.option("--limit", default=100, show_default=True)
@json_option
@store_options
@pass_settings
def executions(settings: Settings, status: str | None, limit: int, as_json: bool) -> None:
    """Executions, most recently updated first."""
    rows = settings.run(lambda op: op.executions(status, limit=limit))
    if as_json:
        _print_json([e.model_dump(mode="json") for e in rows])
        return
    out = _out()
    table = Table("execution", "root", "status", "updated", title=_count(len(rows), "execution"))
    for row in rows:
        table.add_row(row.execution_id, row.root_path, _status(row), age(row.updated_at) + " ago")
    out.print(table)


@cli.command()
@click.argument("execution_id")
@json_option
@store_options
@pass_settings
def show(settings: Settings, execution_id: str, as_json: bool) -> None:
    """One execution: status, lease, pending interrupts, and its journal as a timeline."""
    timeline = settings.run(lambda op: op.show(execution_id))
    if as_json:
        _print_json(timeline.as_json())
        return
    _print_timeline(settings, timeline)


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
    application that serves decisions, or `tether resume ID --app ...`.
    """
    as_json = json_flag is not None
    if json_flag:  # --json '{"approved": true}', the old spelling of --decision
        if raw is not None:
            raise click.UsageError("Give the decision with --decision, not with both --decision and --json.")
        _err().print("[yellow]--json JSON is deprecated:[/] write --decision JSON (--json now asks for JSON output).")
        raw = json_flag
    value = _decision(assignments, raw, "--json" if json_flag else "--decision")
    if value is None and (app is None or detach):
        raise click.UsageError("Recovering a run here needs its runner: pass --app module:attr (without --detach).")
    if detach:
        app = None
    decider = by or _decider()
    if app is not None:
        _print_result(settings, settings.run(
            lambda op: op.carry_on(execution_id, value, path=path, by=decider), app), as_json)
        return

    async def record(op: Operator) -> Timeline:
        assert value is not None
        await op.decide(execution_id, value, path=path, by=decider)
        return await op.show(execution_id)

    timeline = settings.run(record)
    if as_json:
        _print_json({"execution_id": execution_id, "status": timeline.execution.status, "continuing": False,
                     "decision": timeline.decision.as_json() if timeline.decision else None})
        return
    _out().print(
        f"Decision recorded for [bold]{execution_id}[/] (by {decider}). No process here continues it: a "
        f"worker (tether worker --app module:attr) or an application serving decisions will, or run "
        f"{settings.hint(f'resume {shlex.quote(execution_id)} --app module:attr')}"
    )


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
    result = settings.run(lambda op: op.carry_on(execution_id, None, force=force), app)
    _print_result(settings, result, as_json)


@cli.command()
@click.argument("execution_id")
@click.option("--force", is_flag=True, help="Take the lease over even if its process may be alive.")
@json_option
@store_options
@pass_settings
def cancel(settings: Settings, execution_id: str, force: bool, as_json: bool) -> None:
    """Stop a paused or crashed execution for good (its pending interrupts go too)."""
    _print_result(settings, settings.run(lambda op: op.cancel(execution_id, force=force)), as_json)


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
    _out().print(f"Deleted {_count(count, 'finished execution')} older than {older_than}.")


@cli.command()
@json_option
@store_options
@pass_settings
def doctor(settings: Settings, as_json: bool) -> None:
    """Check the whole store for damage and broken invariants (reads everything; changes nothing)."""
    problems = settings.run(lambda op: op.store.check())
    if as_json:
        _print_json({"store": settings.store, "problems": problems})
    elif problems:
        err = _err()
        err.print(f"[bold red]{_count(len(problems), 'problem')}[/] in {settings.store}:")
        for problem in problems:
            err.print(f"  {problem}")
    else:
        _out().print(f"{settings.store}: no problems found.")
    if problems:
        sys.exit(1)


@cli.command()
@json_option
@store_options
@pass_settings
def migrate(settings: Settings, as_json: bool) -> None:
    """Create tether's tables in the store, or bring them up to this version's schema."""
    from tether.stores import SCHEMA_VERSION

    async def nothing(op: Operator) -> None:
        return None

    settings.run(nothing, create=True)
    if as_json:
        _print_json({"store": settings.store, "schema_version": SCHEMA_VERSION})
        return
    _out().print(f"{settings.store}: schema version {SCHEMA_VERSION}.")


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
@store_options
@pass_settings
def worker(settings: Settings, app: str, concurrency: int, lease_seconds: float, poll_interval: float,
           grace: float, no_notify: bool) -> None:
    """Run ready executions until SIGTERM: decided, due, detached, or left by a dead process."""
    from ._worker import ExecutionWorker

    runners = load_app(app)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def main() -> None:
        async with open_store(settings.store) as store, ExecutionWorker(
            store, runners, concurrency=concurrency, lease_seconds=lease_seconds, poll_interval=poll_interval,
            notify=not no_notify,
        ) as running:
            logging.getLogger("tether.worker").info(
                "worker %s on %s for %s", running.name, settings.store, ", ".join(r.root_path for r in runners))
            async with anyio.create_task_group() as tg:
                tg.start_soon(_stop_on_signal, running)
                await running.serve(grace=grace)
                tg.cancel_scope.cancel()

    anyio.run(main, backend=settings.backend)


async def _stop_on_signal(running: Any) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            logging.getLogger("tether.worker").info("stopping: no new work, finishing what runs")
            running.stop()
            return


@cli.command()
@click.option("--backend", "demo_backend", type=click.Choice(["asyncio", "trio"]), default=None,
              help="Override the group's --backend for the demo's processes.")
@click.option("--store", expose_value=False, callback=_override, metavar="URL", help="As before the command.")
@pass_settings
def demo(settings: Settings, demo_backend: str | None) -> None:
    """A supervisor's run paused for a $50k refund, resumed by another process, a crash recovered."""
    # The story needs agents; the kernel knows none, so it is looked up by name.
    story = importlib.import_module("tether.actors._demo")
    sys.exit(story.run_demo(settings.store, backend=demo_backend or settings.backend))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tether`` command line and return its exit code."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="tether", standalone_mode=False)
    except click.exceptions.Exit as done:
        return int(done.exit_code or 0)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        _err().print("Aborted.")
        return 1
    except AlreadyResumed as exc:
        _err().print(f"[bold red]Already resumed:[/] {exc}")
        return 2
    except ValidationError as exc:
        _err().print(f"[bold red]Not a valid decision[/] (nothing was claimed): {exc}")
        return 2
    except TetherError as exc:
        _err().print(f"[bold red]{type(exc).__name__}:[/] {exc}")
        return 1
    return 0


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
            raise click.UsageError(f"{option} is not JSON ({exc}); nothing was claimed.") from exc
        if not isinstance(value, dict):
            raise click.UsageError(f"{option} must be a JSON object, like '{{\"approved\": true}}'.")
        return value
    return parse_assignments(assignments) if assignments else None


def _print_timeline(settings: Settings, timeline: Timeline) -> None:
    out = _out()
    execution = timeline.execution
    out.print(f"[bold]{execution.execution_id}[/]  {execution.root_path}  {_status(execution)}")
    out.print(f"started {execution.created_at:%Y-%m-%d %H:%M:%S} UTC, updated {age(execution.updated_at)} ago, "
              f"definition {execution.fingerprint or '-'}")
    if execution.lease_owner:
        out.print(f"lease: {execution.lease_owner}, epoch {execution.lease_epoch}, "
                  f"expires {execution.lease_expires_at:%H:%M:%S}")
    if execution.error:
        out.print(f"[red]error:[/] {execution.error}")
    if execution.status == "completed":
        out.print(f"output: {_json(execution.result)}")
    decision = timeline.decision
    if decision is not None:
        out.print(f"[magenta]decided[/] {decision.at:%Y-%m-%d %H:%M:%S} UTC by {decision.by or 'someone'} at "
                  f"{_wrapped(decision.path, out.width)}: {_json(decision.value)}")
        out.print("  recorded; a process with its runner carries it out: "
                  + settings.hint(f"recover {shlex.quote(execution.execution_id)} --app module:attr"))
    for row in timeline.pending:
        out.print(f"[yellow]pending[/] {_wrapped(row.agent_path, out.width)}: {row.reason} {_json(row.context)}")
    table = Table("#", "at", "path", "label", "what happened")
    _fit_paths(table, 2, [e.path for e in timeline.entries], out.width)
    _fit_paths(table, 3, [e.label for e in timeline.entries], out.width // 4)
    table.columns[4].overflow = "fold"
    for entry in timeline.entries:
        table.add_row(str(entry.seq), f"{entry.created_at:%H:%M:%S.%f}"[:-3],
                      _wrapped(entry.path, table.columns[2].min_width),
                      _wrapped(entry.label, table.columns[3].min_width), summarize(entry))
    out.print(table)


def _print_result(settings: Settings, result: RunResult, as_json: bool) -> None:
    if as_json:
        _print_json(result.model_dump(mode="json"))
        return
    out = _out()
    if result.status == "paused" and result.pending:
        if len(result.pending) > 1:
            out.print(f"[yellow]paused[/] at {len(result.pending)} paths:")
        for row in result.pending:
            lead = "  " if len(result.pending) > 1 else "[yellow]paused[/] at "
            out.print(f"{lead}{_wrapped(row.agent_path, out.width)}: {row.reason} {_json(row.context)}")
    elif result.status == "completed":
        out.print(f"[green]completed[/]: {_json(result.output)}")
    else:
        out.print(f"{result.status}" + (f": {result.error}" if result.error else ""))


def _fit_paths(table: Table, column: int, paths: list[str], width: int) -> None:
    """Size a column of paths so that they wrap between segments, never inside one."""
    if not paths:
        return
    longest = max(len(p) for p in paths)
    segment = max(len(s) + 1 for p in paths for s in p.split("/"))
    room = max(segment, min(longest, width * 2 // 5))
    settings = table.columns[column]
    settings.min_width = settings.max_width = room
    settings.no_wrap = True


def _wrapped(path: str, width: int | None) -> str:
    """``path`` broken into lines of at most ``width`` characters, each but the last ending in ``/``."""
    if not width or len(path) <= width:
        return path
    parts = path.split("/")
    lines: list[str] = []
    line = parts[0]
    for index, part in enumerate(parts[1:], 2):
        more = 1 if index < len(parts) else 0  # the "/" that would end this line
        if len(line) + 1 + len(part) + more <= width:
            line += "/" + part
        else:
            lines.append(line + "/")
            line = part
    lines.append(line)
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _status(execution: Execution) -> str:
    colour = {"completed": "green", "paused": "yellow", "decided": "magenta", "failed": "red",
              "running": "cyan"}.get(execution.status)
    return f"[{colour}]{execution.status}[/]" if colour else execution.status


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
