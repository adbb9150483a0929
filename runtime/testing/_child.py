"""`crash_in_child`: the same crash as `crash_at`, for real, in a child process killed with SIGKILL.

Run as ``python -m tether.runtime.testing._child APP STORE EXECUTION_ID INPUT [DECISION]``
by the helper; it announces nothing and is not meant to be started by hand.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import trio
from tether.runtime._core import hooks
from tether.runtime.ops._operator import load_app
from tether.stores import ConfigurationError, open_store

if TYPE_CHECKING:
    from tether.runtime._core.execution import RunResult
    from tether.runtime._executions.runner import Runner


@dataclass(frozen=True)
class ChildCrash:
    """How the child process ended."""

    returncode: int
    """``-9`` when it was killed at the boundary."""
    stdout: str
    stderr: str

    @property
    def killed(self) -> bool:
        """Whether it died by SIGKILL, as the crash point asked."""
        return self.returncode == -signal.SIGKILL


async def crash_in_child(
    app: str,
    store_url: str,
    *,
    execution_id: str,
    at: str | int,
    input: Any = None,
    decision: dict[str, Any] | None = None,
    backend: str | None = None,
) -> ChildCrash:
    """Run (or resume) an execution in a fresh Python process that SIGKILLs itself at a boundary.

    For the cases an in-process `crash_at` cannot stand for: a driver's
    connection cut mid-flight, a file lock, the operating system's view of a
    dead process. The child builds the runner from ``app`` (``module:attr``
    naming one runner, importable from this process's path) on the store at
    ``store_url`` (as for ``open_store``: a file or a server, never
    ``memory://``), arms ``TETHER_FAULTS`` with the boundary and runs. Once it
    is dead, the next ``resume`` of the execution in this process takes over
    its lease at once, as it could once the lease expired.

    Args:
        app: The runner, as ``module:attr``.
        store_url: The store's URL.
        execution_id: The execution to run, or to resume with ``decision``.
        at: A boundary's label (``"node:charge"``) or the number of a journal write.
        input: The run's input (JSON).
        decision: Resume a paused execution with this decision instead of running it.
        backend: ``"asyncio"`` or ``"trio"`` for the child (default: the caller's).

    Returns:
        How the child ended; ``killed`` is true when it reached the boundary.

    Raises:
        ConfigurationError: A ``memory://`` store, which a child cannot share.
        AssertionError: The child did not die at the boundary (its output says why).
    """
    if store_url.startswith("memory:"):
        raise ConfigurationError("crash_in_child needs a store another process can open: a SQLite file or Postgres.")
    point = f"write:{at}" if isinstance(at, int) else f"at:{at}"
    argv = [sys.executable, "-m", __name__, app, store_url, execution_id, json.dumps(input),
            json.dumps(decision), backend or _current_backend()]
    env = {**os.environ, "TETHER_FAULTS": point,
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the same modules as here
    done = await anyio.run_process(argv, env=env, check=False)
    crash = ChildCrash(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))
    if not crash.killed:
        raise AssertionError(
            f"crash_in_child({app!r}, at={at!r}): the child exited with {crash.returncode} instead of dying "
            f"at the boundary.\nstdout: {crash.stdout}\nstderr: {crash.stderr}"
        )
    async with open_store(store_url) as opened:
        execution = await opened.get_execution(execution_id)
    if execution is not None and execution.lease_owner is not None:
        hooks.installed().heirs[execution_id] = execution.lease_owner
    return crash


async def _child(app: str, store_url: str, execution_id: str, input: Any, decision: Any) -> RunResult:
    [runner] = _one_runner(app)
    async with open_store(store_url) as store:
        runner.store = store
        if decision is not None:
            return await runner.resume(execution_id, decision)
        return await runner.run(input, execution_id=execution_id)


def _current_backend() -> str:
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return "asyncio"
    return "trio"


def _one_runner(app: str) -> list[Runner]:
    runners = load_app(app)
    if len(runners) != 1:
        raise ConfigurationError(f"{app!r} names {len(runners)} runners; crash_in_child needs exactly one.")
    return runners


if __name__ == "__main__":
    app_, store_, id_, input_, decision_, backend_ = sys.argv[1:7]
    outcome = anyio.run(_child, app_, store_, id_, json.loads(input_), json.loads(decision_), backend=backend_)
    print(outcome.model_dump_json())  # noqa: T201 - the parent shows it when no crash came
