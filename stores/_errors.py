"""The errors the store layer raises, at the root of tether's one error tree.

The store layer defines them because it is the bottom layer: the runtime and
the actors raise these same classes. The whole tree, with the runtime's own
errors, is drawn (and importable) in `tether.runtime`.
"""

from __future__ import annotations

from datetime import UTC, datetime


class TetherError(Exception):
    """Base class of every error tether raises on purpose."""


class StoreError(TetherError):
    """A store operation could not be carried out."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or used; ``__cause__`` is the driver's error."""


class StoreNotFound(StoreError):
    """No tether store at the given location, and the store was opened with ``create=False``.

    Raised before anything is written: a missing file is not created, a database
    without tether's tables is left as it is.
    """


class StoreCorrupted(StoreError):
    """The database is not a tether store, or it is damaged."""


class SchemaVersionError(StoreError):
    """The database's schema version is not the one this tether writes.

    Newer: it was migrated by a newer tether. Older: it needs migrating, and the
    store was opened with ``create=False``, which never migrates.
    """

    def __init__(self, found: int, supported: int) -> None:
        self.found = found
        self.supported = supported
        if found > supported:
            detail = (f"newer than the {supported} this version of tether understands. "
                      f"Upgrade tether, or use another database.")
        else:
            detail = (f"older than the {supported} this version of tether writes, and this command "
                      f"never migrates. Migrate it (`tether migrate --store URL`, or open it from your "
                      f"application), then try again.")
        super().__init__(f"The database has schema version {found}, {detail}")


class ExecutionNotFound(StoreError):
    """No execution with the given id exists in the store."""

    def __init__(self, execution_id: str) -> None:
        self.execution_id = execution_id
        super().__init__(
            f"No execution {execution_id!r} in this store. Check the id "
            f"(`tether executions` lists them) and that --store names the right database."
        )


class NotFailed(StoreError):
    """A retry of an execution that did not fail: only a failed one continues from its journal."""

    def __init__(self, execution_id: str, status: str) -> None:
        self.execution_id = execution_id
        self.status = status
        what = {"completed": "it completed", "running": "it is running", "paused": "it waits for a decision or a timer",
                "decided": "a decision for it waits to be carried out", "queued": "it has not started",
                }.get(status, f"it is {status.replace('_', ' ')}")
        super().__init__(
            f"Execution {execution_id!r} did not fail ({what}), so there is nothing to retry; nothing was "
            f"changed. A paused one continues with a decision (tether resume), a crashed one with "
            f"tether recover; a finished one does not run again."
        )


class ExecutionFinished(StoreError):
    """The execution already ended (completed, failed or cancelled) and cannot run again."""

    def __init__(self, execution_id: str, status: str) -> None:
        self.execution_id = execution_id
        self.status = status
        super().__init__(
            f"Execution {execution_id!r} is {status.replace('_', ' ')}; a finished execution does not run "
            f"again. Start a new execution id to run the work again."
        )


class LeaseHeld(StoreError):
    """Another live process holds the execution's lease, so this one may not run it."""

    def __init__(self, execution_id: str, owner: str, expires_at: datetime) -> None:
        self.execution_id = execution_id
        self.owner = owner
        self.expires_at = expires_at
        super().__init__(
            f"Execution {execution_id!r} is being run by {owner!r} (lease valid until "
            f"{expires_at.isoformat()}). Wait for it to finish, or for its lease to expire "
            f"if that process died, then try again."
        )

    @property
    def seconds_left(self) -> float:
        """Seconds until the lease expires, by this machine's clock (0 once it has).

        A process that died keeps its lease until then; waiting this long (and a
        little more) before trying again is how recovery takes it over.
        """
        return max(0.0, (self.expires_at - datetime.now(UTC)).total_seconds())


class StaleLease(StoreError):
    """A write was refused because the lease it carried was taken over (fencing)."""

    def __init__(self, execution_id: str, epoch: int) -> None:
        self.execution_id = execution_id
        self.epoch = epoch
        super().__init__(
            f"Execution {execution_id!r}: this process's lease (epoch {epoch}) was taken "
            f"over by another process, so its writes are refused. Stop working on it; "
            f"the new holder continues the execution."
        )


class AlreadyResumed(StoreError):
    """The pending interrupt was claimed by another resumer first."""

    def __init__(self, execution_id: str, path: str) -> None:
        self.execution_id = execution_id
        self.path = path
        super().__init__(
            f"The interrupt of execution {execution_id!r} at {path!r} was already resumed "
            f"by someone else. Nothing was changed; its journal (store.read_journal) holds "
            f"the decision that was taken."
        )


class NoPendingInterrupt(StoreError):
    """There is no pending interrupt to claim at the given path."""

    def __init__(self, execution_id: str, path: str | None, pending: list[str]) -> None:
        self.execution_id = execution_id
        self.path = path
        self.pending = pending
        if path is None and pending:
            detail = f"it has {len(pending)} pending interrupts; name one with path=: {pending}"
        elif path is None:
            detail = "it has no pending interrupt"
        elif pending:
            detail = f"nothing is pending at {path!r}; pending paths are {pending}"
        else:
            detail = f"nothing is pending at {path!r}, and nothing was ever resumed there"
        super().__init__(f"Cannot resume execution {execution_id!r}: {detail}.")


class DuplicateInterrupt(StoreError):
    """A pending interrupt already exists at the path being suspended."""

    def __init__(self, execution_id: str, path: str) -> None:
        self.execution_id = execution_id
        self.path = path
        super().__init__(
            f"Execution {execution_id!r} already has a pending interrupt at {path!r}. "
            f"Two concurrent calls need distinct paths (the runtime numbers them '#2')."
        )


class SerializationError(TetherError, ValueError):
    """A value handed to tether cannot be stored as JSON."""


class ConfigurationError(TetherError, ValueError):
    """A store URL, option or argument is invalid."""


class UsageError(TetherError, RuntimeError):
    """The API was used out of order, for example a closed store used again."""
