"""The ``tether`` console script: see and act on executions in any store.

    tether pending                       # what waits for a decision, with full paths
    tether show refund-abc               # one execution: status, lease, journal timeline
    tether resume refund-abc --set approved=true --set metadata.approver=alice --app flows:runners
    tether serve --app flows:runners     # the HTTP API and the /approvals page

``--store`` (or ``TETHER_STORE``) names the store: ``sqlite:///path`` or
``postgresql://...``; the default is ``sqlite:///tether.db`` here.
"""

from __future__ import annotations

import importlib
import json
import logging
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
DEFAULT_STORE = "sqlite:///tether.db"
# Piped or captured output gets wide lines: a path cut to fit 80 columns would hide what matters.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False)


class Settings:
    def __init__(self, store: str, backend: str) -> None:
        self.store = store
        self.backend = backend

    def run(self, job: Callable[[Operator], Awaitable[T]], app: str | None = None) -> T:
        """Open the store (and the runners of ``app``), run ``job`` on the chosen backend."""
        runners = load_app(app) if app else []

        async def main() -> T:
            async with open_store(self.store) as store:
                return await job(Operator(store, runners))

        return anyio.run(main, backend=self.backend)


pass_settings = click.make_pass_decorator(Settings)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--store", envvar="TETHER_STORE", default=DEFAULT_STORE, show_default=True,
              help="sqlite:///path or postgresql://... (or $TETHER_STORE).")
@click.option("--backend", type=click.Choice(["asyncio", "trio"]), default="asyncio", show_default=True)
@click.version_option(__version__, prog_name="tether", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, store: str, backend: str) -> None:
    """See and act on durable executions: what is pending, what happened, resume, serve."""
    ctx.obj = Settings(store, backend)


@cli.command()
@click.option("--path-prefix", help="Only interrupts under this path (a plain string prefix).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_settings
def pending(settings: Settings, path_prefix: str | None, as_json: bool) -> None:
    """Pending interrupts: execution, full path, reason, context, age."""
    rows = settings.run(lambda op: op.pending(path_prefix))
    if as_json:
        click.echo(json.dumps([p.model_dump(mode="json") for p in rows], indent=2))
        return
    if not rows:
        out.print("Nothing is pending.")
        return
    table = Table("execution", "path", "reason", "context", "age", title=f"{len(rows)} pending")
    for row in rows:
        table.add_row(row.execution_id, row.agent_path, row.reason, _json(row.context), age(row.created_at))
    out.print(table)


@cli.command()
@click.option("--status", type=click.Choice(["running", "paused", "completed", "failed", "cancelled"]))
@click.option("--limit", default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@pass_settings
def executions(settings: Settings, status: str | None, limit: int, as_json: bool) -> None:
    """Executions, most recently updated first."""
    rows = settings.run(lambda op: op.executions(status, limit=limit))
    if as_json:
        click.echo(json.dumps([e.model_dump(mode="json") for e in rows], indent=2))
        return
    table = Table("execution", "root", "status", "updated", title=f"{len(rows)} executions")
    for row in rows:
        table.add_row(row.execution_id, row.root_path, _status(row), age(row.updated_at) + " ago")
    out.print(table)


@cli.command()
@click.argument("execution_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a timeline.")
@pass_settings
def show(settings: Settings, execution_id: str, as_json: bool) -> None:
    """One execution: status, lease, pending interrupts, and its journal as a timeline."""
    timeline = settings.run(lambda op: op.show(execution_id))
    if as_json:
        click.echo(json.dumps({
            "execution": timeline.execution.model_dump(mode="json"),
            "pending": [p.model_dump(mode="json") for p in timeline.pending],
            "journal": [e.model_dump(mode="json") for e in timeline.entries],
        }, indent=2))
        return
    _print_timeline(timeline)


@cli.command()
@click.argument("execution_id")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE",
              help="A field of the decision (repeatable): approved=true, metadata.approver=alice.")
@click.option("--json", "raw", metavar="JSON", help="The whole decision as a JSON object.")
@click.option("--path", help="Which pending interrupt, when several are pending.")
@click.option("--app", metavar="MODULE:ATTR", help="The runner(s) to continue with, importable here.")
@click.option("--detach", is_flag=True, help="Only record the decision; a worker continues the run.")
@pass_settings
def resume(settings: Settings, execution_id: str, assignments: tuple[str, ...], raw: str | None,
           path: str | None, app: str | None, detach: bool) -> None:
    """Decide a pending interrupt and continue the run here; with no decision, recover a crashed run.

    With --detach, or without --app, the decision is recorded (exactly once) and
    the run is left to a process that has the runner: a `tether worker`, or
    `tether resume ID --app ...`.
    """
    value = _decision(assignments, raw)
    if value is None and (app is None or detach):
        raise click.UsageError("Recovering a run here needs its runner: pass --app module:attr (without --detach).")
    if detach:
        app = None

    async def job(op: Operator) -> RunResult | None:
        if app is None:
            assert value is not None
            await op.decide(execution_id, value, path=path)
            return None
        return await op.carry_on(execution_id, value, path=path)

    result = settings.run(job, app)
    if result is None:
        out.print(f"Decision recorded for [bold]{execution_id}[/]. A process with its runner continues it: "
                  f"tether resume {execution_id} --app module:attr")
        return
    _print_result(result)


@cli.command()
@click.argument("execution_id")
@pass_settings
def cancel(settings: Settings, execution_id: str) -> None:
    """Stop a paused or crashed execution for good (its pending interrupts go too)."""
    _print_result(settings.run(lambda op: op.cancel(execution_id)))


@cli.command()
@click.option("--older-than", required=True, metavar="AGE", help="30d, 12h, 45m or 90s.")
@pass_settings
def prune(settings: Settings, older_than: str) -> None:
    """Delete finished executions (completed, failed, cancelled) older than AGE."""
    age = parse_duration(older_than)
    count = settings.run(lambda op: op.prune(age))
    out.print(f"Deleted {count} finished execution{'s' if count != 1 else ''} older than {older_than}.")


@cli.command()
@click.option("--app", metavar="MODULE:ATTR", help="The runner(s) that continue approved executions here.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True)
@click.option("--token", envvar="TETHER_TOKEN", help="Bearer token for the API and login for the page "
                                                     "($TETHER_TOKEN); required off loopback.")
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
        err.print("Aborted.")
        return 1
    except AlreadyResumed as exc:
        err.print(f"[bold red]Already resumed:[/] {exc}")
        return 2
    except ValidationError as exc:
        err.print(f"[bold red]Not a valid decision[/] (nothing was claimed): {exc}")
        return 2
    except TetherError as exc:
        err.print(f"[bold red]{type(exc).__name__}:[/] {exc}")
        return 1
    return 0


def _decision(assignments: tuple[str, ...], raw: str | None) -> dict[str, Any] | None:
    if raw is not None and assignments:
        raise click.UsageError("Give the decision with --set or with --json, not both.")
    if raw is not None:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise click.UsageError(f"--json is not JSON ({exc}); nothing was claimed.") from exc
        if not isinstance(value, dict):
            raise click.UsageError("--json must be a JSON object, like '{\"approved\": true}'.")
        return value
    return parse_assignments(assignments) if assignments else None


def _print_timeline(timeline: Timeline) -> None:
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
    for row in timeline.pending:
        out.print(f"[yellow]pending[/] {row.agent_path}: {row.reason} {_json(row.context)}")
    table = Table("#", "at", "path", "label", "what happened")
    table.columns[2].overflow = table.columns[3].overflow = "fold"
    for entry in timeline.entries:
        table.add_row(str(entry.seq), f"{entry.created_at:%H:%M:%S.%f}"[:-3], entry.path, entry.label,
                      summarize(entry))
    out.print(table)


def _print_result(result: RunResult) -> None:
    if result.status == "paused" and result.pending_interrupt is not None:
        row = result.pending_interrupt
        out.print(f"[yellow]paused[/] at {row.agent_path}: {row.reason} {_json(row.context)}")
    elif result.status == "completed":
        out.print(f"[green]completed[/]: {_json(result.output)}")
    else:
        out.print(f"{result.status}" + (f": {result.error}" if result.error else ""))


def _status(execution: Execution) -> str:
    colour = {"completed": "green", "paused": "yellow", "failed": "red", "running": "cyan"}.get(execution.status)
    return f"[{colour}]{execution.status}[/]" if colour else execution.status


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)



if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
