"""What every runner (`Chain`, `Agent`) shares: a root actor driven through a `Runtime`."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from tether.runtime import Resume, RunResult, Runtime
from tether.runtime._actor import check_name
from tether.stores import ConfigurationError

if TYPE_CHECKING:
    from pydantic import BaseModel, JsonValue
    from tether.runtime import Actor
    from tether.stores import Lease, Store


class Runner:
    """A named root actor over a store; `run` starts an execution, `resume` continues one."""

    name: str
    store: Store | None
    lease_seconds: float
    _actor: type[Actor[Any]]
    _prepared: tuple[str, str] | None = None  # the definition last checked, and its hash

    def _named(self, kind: str, name: str) -> str:
        """``name``, refused at once (`ConfigurationError`) if it cannot be a path segment."""
        return check_name(kind, name)

    def check(self) -> None:
        """Refuse a definition that cannot run; called before a run or resume whose definition changed."""

    def definition(self) -> Any:
        """What a journal depends on (names of nodes, tools, members), not prompts or code."""
        return None

    @property
    def root_path(self) -> str:
        """The root actor's path, ``<kind>:<name>`` (``chain:refund``), as stored with each execution."""
        return f"{self._actor.kind}:{self.name}"

    @property
    def fingerprint(self) -> str:
        """A short hash of `definition`: stored with each execution, checked on resume."""
        return _digest(self._described())

    def _described(self) -> str:
        return json.dumps([type(self).__name__, self.name, self.definition()], sort_keys=True)

    def _prepare(self) -> type[Actor[Any]]:
        # Checked again only when the definition changed: a 200-node chain's check and
        # hash cost 130 us a run, and a hundred runs started at once hold the loop for all of them.
        described = self._described()
        prepared = self._prepared
        if prepared is None or prepared[0] != described:
            self.check()
            prepared = self._prepared = (described, _digest(described))
        self._actor.fingerprint = prepared[1]  # type: ignore[attr-defined]
        return self._actor

    def _typed(self, result: RunResult) -> RunResult:
        """The result as callers receive it (a runner may type the output)."""
        return result

    def _store(self) -> Store:
        if self.store is None:
            raise ConfigurationError(
                f"{type(self).__name__} {self.name!r} has no store: pass store=SQLiteStore(...) to run it "
                f"on its own (inside a team, the team's store serves it)."
            )
        return self.store

    def _input(self, input: Any) -> JsonValue:
        """The input as journaled, or `ConfigurationError` before anything is written."""
        return input  # type: ignore[no-any-return]

    async def run(self, input: Any = None, *, execution_id: str) -> RunResult:
        """Run to the end or to a pause, here; the execution id is an idempotency key."""
        data = self._input(input)
        actor = self._prepare()
        async with Runtime(self._store(), lease_seconds=self.lease_seconds) as rt:
            return self._typed(await rt.run(actor, data, execution_id=execution_id, name=self.name))

    async def start(self, input: Any = None, *, execution_id: str, detach: bool = True) -> RunResult:
        """Start an execution; with ``detach`` (the default), record it for a worker and return at once.

        A detached execution is ``queued`` until a worker (``tether worker``) with
        this runner takes it up. Without ``detach`` this is `run`.
        """
        if not detach:
            return await self.run(input, execution_id=execution_id)
        data = self._input(input)
        actor = self._prepare()
        async with Runtime(self._store(), lease_seconds=self.lease_seconds) as rt:
            return await rt.enqueue(actor, data, execution_id=execution_id, name=self.name)

    async def submit_resume(
        self, execution_id: str, value: Resume | BaseModel | dict[str, Any], *, path: str | None = None
    ) -> None:
        """Record a decision (claimed exactly once) and leave the run to a worker.

        Raises:
            AlreadyResumed: Someone decided first; nothing changed.
        """
        async with Runtime(self._store(), lease_seconds=self.lease_seconds) as rt:
            await rt.claim(execution_id, value, path=path)

    async def run_leased(self, lease: Lease, *, lease_seconds: float | None = None) -> RunResult:
        """Run an execution a worker leased with `Store.take_work` (what `ExecutionWorker` calls).

        ``lease_seconds`` is the worker's: its renewals must match the lease it took.
        """
        actor = self._prepare()
        async with Runtime(self._store(), lease_seconds=lease_seconds or self.lease_seconds) as rt:
            return self._typed(await rt.drive(actor, lease))

    async def resume(
        self,
        execution_id: str,
        value: Resume | BaseModel | dict[str, Any] | None = None,
        *,
        path: str | None = None,
        force: bool = False,
        by: str | None = None,
    ) -> RunResult:
        """Resume a paused run with a decision, or recover a crashed one (no value).

        In any process that builds the same runner. With a decision, the pending
        interrupt (the only one, or the one at ``path``) is claimed atomically:
        a second resumer gets `AlreadyResumed` and changes nothing. A run whose
        process died on this machine is taken over at once; ``force`` takes over
        a lease held elsewhere too (see `Runtime.resume`). ``by`` names the decider
        in the journal.
        """
        actor = self._prepare()
        async with Runtime(self._store(), lease_seconds=self.lease_seconds) as rt:
            return self._typed(await rt.resume(actor, execution_id, value, path=path, force=force, by=by))


def _digest(described: str) -> str:
    return hashlib.sha256(described.encode()).hexdigest()[:16]
