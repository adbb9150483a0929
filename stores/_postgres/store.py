"""`PostgresStore`: the production and multi-machine store, on asyncpg.

Every write is ONE statement: data-modifying CTEs fence, number, insert and
delete together, so a write is one round trip and atomic on its own. A write that
has been sent is never cancelled (the client could not tell whether the server
committed); the caller waits for its answer, which takes one round trip.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, get_args

import anyio

from .. import _json
from .._bridge import threadsafe_caller, threadsafe_scheduler
from .._claims import failed_claim, sole_pending
from .._driver import DriverStore
from .._errors import (
    ConfigurationError,
    DuplicateInterrupt,
    ExecutionFinished,
    ExecutionNotFound,
    LeaseHeld,
    NotFailed,
    SchemaVersionError,
    SerializationError,
    StaleLease,
    StoreCorrupted,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
    UsageError,
)
from .._json import entry_rows
from .._limits import Window, blocked, spent, take
from .._migrations import POSTGRES_MIGRATIONS
from .._models import (
    FINAL_STATUSES,
    Execution,
    ExecutionSearch,
    ExecutionStatus,
    IdempotencyRecord,
    JournalEntry,
    Lease,
    NewEntry,
    NewExecution,
    NewInterrupt,
    PendingInterrupt,
    QueueLimits,
    QueueStats,
    ScheduleRow,
    StartResult,
    ThreadSummary,
    TokenRow,
)
from .._protocol import (
    FEW_UNDER_PREFIX,
    SCHEMA_VERSION,
    ancestors,
    check_limit,
    prefix_range,
    prunable,
    token_digest_taken,
    token_named,
    version_pairs,
)
from .._queues import Candidate, Counts, admit, fetch_size, room, stats
from .._watch import committed
from .appends import Appends
from .pool import ConnectionPool, close_without_loop, connect_detached, finish_detached

if TYPE_CHECKING:
    import asyncio
    from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
    from datetime import datetime

    import asyncpg
    from pydantic import JsonValue

    from .._bridge import Op
    from .._watch import Check


log = logging.getLogger("tether.stores")

_EXEC_COLS = (
    "id, runner, root_path, fingerprint, status, input, result, error, "
    "lease_owner, lease_expires_at, lease_epoch, created_at, updated_at, wake_at, version, deadline, cancel, thread, trace, "
    "queue, queue_key, priority"
)
_PENDING_COLS = "execution_id, path, reason, context, seq, created_at, deadline, default_value"
_TOKEN_COLS = "name, digest, scopes, paths, created_at, revoked_at"
_FINAL_SQL = "('completed', 'failed', 'cancelled', 'timed_out')"
_FENCE = "id = $1 AND lease_epoch = $2 AND lease_owner = $3"
# Inserts the entries given as four parallel arrays, numbered from bump.first.
_INSERT_ENTRIES = """
    INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at)
    SELECT $1, bump.first + e.ord - 1, e.path, e.label, e.kind, e.payload::json, now()
    FROM bump, unnest($5::text[], $6::text[], $7::text[], $8::text[])
        WITH ORDINALITY AS e(path, label, kind, payload, ord)
    RETURNING seq, created_at
"""
# A claim: the pending row goes, the decision is journaled, and the execution is marked
# for whoever carries it out ({then}): workers (decided), or the claimer, who takes the lease.
_CLAIM = """WITH free AS (
        -- FOR UPDATE: a take_work or lease in flight finishes first, and the check
        -- then sees the lease it took.
        -- A recorded cancel claims nothing: the run will not continue.
        SELECT 1 FROM tether_executions WHERE id = $1 AND cancel IS NULL AND NOT (
            lease_owner IS NOT NULL AND lease_expires_at > now()
            AND lease_owner IS DISTINCT FROM $5::text)
        FOR UPDATE
    ), claimed AS (
        -- No path named: the execution's one pending interrupt, if only one is pending.
        DELETE FROM tether_pending
        WHERE execution_id = $1 AND ($3::bigint IS NULL OR seq = $3)
            AND (path = $2::text OR $2::text IS NULL
                 AND (SELECT count(*) FROM tether_pending WHERE execution_id = $1) = 1)
            AND EXISTS (SELECT 1 FROM free)
        RETURNING reason, seq, path
    ), bump AS (
        UPDATE tether_executions SET next_seq = next_seq + 1, updated_at = now(), {then}
        FROM claimed WHERE id = $1
        RETURNING next_seq - 1 AS seq, lease_epoch, lease_expires_at, deadline, cancel
    ), inserted AS (
        INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at)
        SELECT $1, bump.seq, claimed.path, 'resumed', 'resumed',
            CASE WHEN $6::text IS NULL
                THEN json_build_object('value', $4::json, 'suspended_seq', claimed.seq,
                                       'reason', claimed.reason)
                ELSE json_build_object('value', $4::json, 'suspended_seq', claimed.seq,
                                       'reason', claimed.reason, 'by', $6::text) END,
            now()
        FROM bump, claimed
        RETURNING seq, path, payload, created_at
    )
    SELECT inserted.seq, inserted.path, inserted.payload, inserted.created_at,
        bump.lease_epoch, bump.lease_expires_at, bump.deadline, bump.cancel
    FROM inserted, bump"""
_CLAIM_DECIDED = _CLAIM.format(
    then="wake_at = now(), status = CASE status WHEN 'paused' THEN 'decided' ELSE status END")
_CLAIM_LEASED = _CLAIM.format(
    then="wake_at = NULL, status = 'running', lease_owner = $5, lease_epoch = lease_epoch + 1, "
         "lease_expires_at = now() + make_interval(secs => $7)")
_FOLLOWER_SECONDS = 60
"""How long a follower's row asks for notifications; it is renewed every third of that."""
# A lock id for migrations, so concurrent starters apply them once.
_MIGRATION_LOCK = 0x7E7E_0001


def _execution(row: asyncpg.Record) -> Execution:
    return Execution(
        execution_id=row["id"],
        runner=row["runner"],
        root_path=row["root_path"],
        fingerprint=row["fingerprint"],
        status=row["status"],
        input=_json.loads(row["input"]),
        result=None if row["result"] is None else _json.loads(row["result"]),
        error=row["error"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        lease_epoch=row["lease_epoch"],
        wake_at=row["wake_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        version=row["version"],
        deadline=row["deadline"],
        cancel=None if row["cancel"] is None else _json.loads(row["cancel"]),
        thread=row["thread"],
        trace=row["trace"],
        queue=row["queue"],
        queue_key=row["queue_key"],
        priority=row["priority"],
    )


def _schedule(row: asyncpg.Record) -> ScheduleRow:
    return ScheduleRow(name=row["name"], paused=row["paused"], last_tick=row["last_tick"],
                       **_json.loads(row["definition"]))


def _token(row: asyncpg.Record) -> TokenRow:
    return TokenRow(name=row["name"], digest=row["digest"], scopes=_json.loads(row["scopes"]),
                    paths=_json.loads(row["paths"]), created_at=row["created_at"], revoked_at=row["revoked_at"])


def _lease(execution_id: str, owner: str, row: asyncpg.Record) -> Lease:
    """A lease as a statement that took it returned it, with what its holder must obey."""
    return Lease(execution_id=execution_id, owner=owner, epoch=row["lease_epoch"],
                 expires_at=row["lease_expires_at"], deadline=row["deadline"],
                 cancel=None if row["cancel"] is None else _json.loads(row["cancel"]))


def _pending(row: asyncpg.Record) -> PendingInterrupt:
    return PendingInterrupt(
        execution_id=row["execution_id"],
        agent_path=row["path"],
        reason=row["reason"],
        context=_json.loads(row["context"]),
        seq=row["seq"],
        created_at=row["created_at"],
        deadline=row["deadline"],
        default=None if row["default_value"] is None else _json.loads(row["default_value"]),
    )


FEW_IDS = 1000
"""At most this many ids under a prefix are looked up by the id index first, then fetched by id."""


def search_sql(s: ExecutionSearch, limit: int, before: Execution | None,
               ids: list[str] | None = None) -> tuple[str, list[Any]]:
    """`PostgresStore.search_executions`'s query: only the filters given, each one an index serves.

    ``ids``: the ids under ``s.id_prefix``, when they are few (see `FEW_IDS`).
    """
    where: list[str] = []
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    for column, value in (("status", s.status), ("version", s.version), ("thread", s.thread)):
        if value is not None:
            where.append(f"{column} = {arg(value)}")
    if s.root_path is not None:
        # In "C", as its indexes are (for a deterministic collation, equality is the same).
        where.append(f'root_path COLLATE "C" = {arg(s.root_path)}')
    if s.since is not None:
        where.append(f"created_at >= {arg(s.since)}")
    if s.until is not None:
        where.append(f"created_at < {arg(s.until)}")
    # Prefixes as ranges of the "C" collation (byte order), which their indexes are on:
    # exact and case-sensitive whatever the database's collation (see `prefix_range`).
    if ids is not None:
        where.append(f"id = ANY({arg(ids)}::text[])")
    elif s.id_prefix:
        where.append(_prefixed("id", s.id_prefix, arg))
    if s.path_prefix:
        below = _prefixed("root_path", s.path_prefix, arg)
        above = ancestors(s.path_prefix)  # the roots of trees the prefix lies in
        if above:
            below = f'({below} OR root_path COLLATE "C" = ANY({arg(above)}::text[]))'
        where.append(below)
    if before is not None:
        where.append(f"(created_at, id) < ({arg(before.created_at)}, {arg(before.execution_id)})")
    # The page's ids first, then their rows: every index a filter uses holds (created_at, id),
    # so the ids come from that index alone. Asked for whole rows, the planner would rather walk
    # the creation index (the table's own order) and filter, betting that the newest rows match:
    # a runner's older version matches none of them, and it read 90,000 rows for a page.
    order = "ORDER BY created_at DESC, id DESC"
    # The limit inline, as in every listing: a cached statement's generic plan then knows how few rows it needs.
    ids_sql = f"SELECT id FROM tether_executions WHERE {' AND '.join(where) or 'true'} {order} LIMIT {int(limit)}"
    return f"SELECT {_EXEC_COLS} FROM tether_executions WHERE id IN ({ids_sql}) {order}", args


def _prefixed(column: str, prefix: str, arg: Callable[[Any], str]) -> str:
    """``column`` starts with ``prefix``, as a range of the "C" collation that its index serves."""
    low, high = prefix_range(prefix)
    starts = f'{column} COLLATE "C" >= {arg(low)}'
    return starts if high is None else f'({starts} AND {column} COLLATE "C" < {arg(high)})'


def _pending_where(execution_id: str | None, path_prefix: str | None,
                   args: list[Any] | None = None) -> tuple[list[str], list[Any]]:
    """Conditions on pending rows, numbering their parameters after ``args``: a prefix as a path index range."""
    args = [] if args is None else args
    where: list[str] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    if execution_id is not None:
        where.append(f"execution_id = {arg(execution_id)}")
    if path_prefix:
        where.append(_prefixed("path", path_prefix, arg))
    return where, args


async def _few_under(conn: asyncpg.Connection, prefix: str) -> bool:
    """Fewer than `FEW_UNDER_PREFIX` pending interrupts under ``prefix`` (counting no further)."""
    where, args = _pending_where(None, prefix)
    found = await conn.fetchval(f"SELECT count(*) FROM (SELECT 1 FROM tether_pending WHERE {where[0]} "
                                f"LIMIT {FEW_UNDER_PREFIX}) AS few", *args)
    return int(found) < FEW_UNDER_PREFIX


def redact(dsn: str) -> str:
    """The DSN with its password replaced, for messages and logs."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)


def _columns(rows: list[tuple[str, str, str, str]]) -> list[list[str]]:
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[], [], [], []]


class PostgresListener:
    """A LISTEN connection of `PostgresStore.listen`: a `tether.stores.Listener`."""

    def __init__(self, store: PostgresStore, conn: Any) -> None:
        self._store = store
        self._conn = conn

    @property
    def closed(self) -> bool:
        """True once the connection is gone (the server restarted, the network dropped)."""
        return bool(self._conn.is_closed())

    async def aclose(self) -> None:
        """Stop listening."""
        conn = self._conn

        async def close_listener(op: Op) -> None:
            with contextlib.suppress(Exception):  # a dead connection has nothing left to close
                await conn.close(timeout=5)

        with anyio.CancelScope(shield=True):
            await self._store._run(close_listener)


class PostgresStore(DriverStore):
    """A store in a PostgreSQL database, for many processes on many machines.

    Args:
        dsn: A libpq connection URL, ``postgresql://user@host:5432/db``.
        min_size: Connections the pool keeps open.
        max_size: Most connections the pool opens.
        connect_timeout: Seconds to wait for the server before `StoreUnavailable`.
        command_timeout: Seconds one operation may wait on the server (its
            statements, its transaction) before `StoreUnavailable`; the
            connection is then dropped. ``None`` waits without bound. Keep it
            under the workers' lease (30 s by default), so that a worker cut off
            from the server hears of it before its lease runs out. Migrations,
            whose length grows with the data, are not bounded by it.
        schema: A schema to keep tether's tables in (created if missing); by
            default the server's search path decides.
        create: ``False`` opens only an existing tether store of this version and
            creates nothing (for the operator's read commands): no schema, table or
            migration. Otherwise `StoreNotFound` (no tether tables there) or
            `SchemaVersionError`.

    Tables are prefixed ``tether_``, so they can share a database with an
    application's own.
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
        command_timeout: float | None = 10.0,
        schema: str | None = None,
        create: bool = True,
    ) -> None:
        super().__init__()
        if schema is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", schema):
            raise ConfigurationError(
                f"schema={schema!r} is not a plain identifier; use letters, digits and '_'."
            )
        self.schema = schema
        self.create = create
        # The first damage the server reported; from then on every operation is refused with it.
        self._damage: StoreCorrupted | None = None
        self.dsn = dsn
        self.min_size = min_size
        self.max_size = max_size
        self.connect_timeout = connect_timeout
        if command_timeout is not None and not command_timeout > 0:
            raise ConfigurationError(
                f"command_timeout={command_timeout!r}: give a positive number of seconds, or None for no bound."
            )
        self.command_timeout = command_timeout
        self._pool: ConnectionPool | None = None
        # LISTEN connects whose caller was cancelled, still under way: closing waits for them.
        self._listen_connects: set[asyncio.Task[Any]] = set()
        # The LISTEN connection of this object's journal watches, and how many use it.
        self._journal_listener: PostgresListener | None = None
        self._followers = 0
        self._follow_lock: anyio.Lock | None = None
        self._control_listener: PostgresListener | None = None
        self._control_lock: anyio.Lock | None = None
        self._closing = False  # a listener that connects from now on is closed, not kept
        self._appending: dict[str, int] = {}  # followed executions this object is appending to now
        self._appends = Appends(self._pooled_fetch)

    def __repr__(self) -> str:
        return f"PostgresStore({redact(self.dsn)!r})"

    @property
    def identity(self) -> object:
        return ("postgresql", self.dsn, self.schema)

    # -- plumbing ------------------------------------------------------------

    @contextmanager
    def _map_errors(self, *, checking: bool = False) -> Iterator[None]:
        """Translate asyncpg's errors into tether's; refuse to run once the server reported damage.

        ``checking`` (`check`, which only reads) runs on a damaged store too.
        """
        import asyncpg

        if self._damage is not None and not checking:
            raise StoreCorrupted(
                f"Postgres at {redact(self.dsn)} reported damage earlier, so this store refuses every "
                f"operation since (nothing was read or written now): {self._damage} Open a new store "
                f"once the database is repaired."
            )
        try:
            yield
        except StoreError:
            raise
        except (asyncpg.DataCorruptedError, asyncpg.IndexCorruptedError) as exc:
            damage = StoreCorrupted(
                f"Postgres at {redact(self.dsn)} reports damaged data ({type(exc).__name__}: {exc}). "
                f"Repair the table or index (REINDEX) or restore a backup; `tether doctor` lists the damage."
            )
            if self._damage is None:
                self._damage = damage
            raise damage from exc
        except TimeoutError as exc:
            log.warning("Postgres at %s did not answer in time", redact(self.dsn), extra={"store": redact(self.dsn)})
            raise StoreUnavailable(
                f"Postgres at {redact(self.dsn)} did not answer within its timeout (connect_timeout="
                f"{self.connect_timeout:g} s, command_timeout={self.command_timeout} s); the connection was "
                f"dropped. Check the server and the network to it. The operation may or may not have taken "
                f"effect: a recovery reads which from the journal."
            ) from exc
        except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
                asyncpg.InternalClientError, asyncpg.CannotConnectNowError) as exc:
            log.warning("Postgres at %s is unavailable: %s: %s", redact(self.dsn), type(exc).__name__, exc,
                        extra={"store": redact(self.dsn)})
            raise StoreUnavailable(
                f"Postgres at {redact(self.dsn)} is unavailable ({type(exc).__name__}: {exc}). "
                f"Check that the server is running and the DSN is right."
            ) from exc
        except (asyncpg.CharacterNotInRepertoireError, asyncpg.UntranslatableCharacterError) as exc:
            # Text no row can hold (a NUL, a lone surrogate) given as a key or a filter: bad input, not an outage.
            raise SerializationError(
                f"Postgres cannot take text holding a NUL character or a lone surrogate ({exc}); no tether row "
                f"holds such text, so nothing can match it. Nothing was read or written."
            ) from exc
        except asyncpg.PostgresError as exc:
            raise StoreUnavailable(
                f"Postgres at {redact(self.dsn)} refused an operation ({type(exc).__name__}: {exc})."
            ) from exc

    async def _open(self) -> None:
        import asyncpg

        settings = {"search_path": self.schema} if self.schema else {}

        async def connect() -> Any:
            return await asyncpg.connect(self.dsn, timeout=self.connect_timeout, server_settings=settings)

        pool = ConnectionPool(connect, self.max_size, self.command_timeout)
        with self._map_errors():
            try:
                await pool.fill(self.min_size)
                async with pool.connection(bounded=False) as conn, conn.transaction():
                    # Taken by readers too: they wait for a migration in progress, and see its end.
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
                    # Look before creating anything: a schema that is not a tether store is left as it was.
                    names = sorted(r[0] for r in await conn.fetch(
                        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                        r"WHERE n.nspname = ANY(current_schemas(false)) AND c.relname LIKE 'tether\_%'"
                    ))
                    current = 0
                    if "tether_schema" in names:
                        current = await conn.fetchval("SELECT max(version) FROM tether_schema") or 0
                        if current > SCHEMA_VERSION or (current < SCHEMA_VERSION and not self.create):
                            raise SchemaVersionError(current, SCHEMA_VERSION)
                    elif names or not self.create:
                        where = (f"schema {self.schema!r}" if self.schema else
                                 f"search path {await conn.fetchval('SHOW search_path')!r}")
                        where += f" of Postgres at {redact(self.dsn)}"
                        if names:
                            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
                            raise StoreCorrupted(
                                f"The {where} is not a tether store: it holds objects named like tether's "
                                f"({shown}) that tether did not create (it has no tether_schema table). "
                                f"Nothing was changed. Give tether a schema of its own (schema=..., or "
                                f"?schema= in the URL), or another database."
                            )
                        raise StoreNotFound(
                            f"No tether store in the {where}: it has no tether tables. Nothing was "
                            f"created: the store was opened with create=False. Check the DSN and its "
                            f"?schema=, or create the store: `tether migrate --store URL`, or open it "
                            f"from a program that writes to it (your application, `tether worker`)."
                        )
                    if current < SCHEMA_VERSION:  # only with create: the checks above refused it otherwise
                        if self.schema:
                            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
                        for statement in POSTGRES_MIGRATIONS[0]:
                            await conn.execute(statement)
                    for version in range(current + 1, SCHEMA_VERSION + 1):
                        for statement in POSTGRES_MIGRATIONS[version]:
                            await conn.execute(statement)
                        await conn.execute("INSERT INTO tether_schema (version) VALUES ($1)", version)
            except BaseException:
                await pool.aclose()
                raise
        self._pool = pool

    async def _close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.aclose()
        await finish_detached(self._listen_connects)

    async def _abandon(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            # Its loop is gone, so nothing can be awaited on its connections: drop them.
            pool.terminate()

    async def listen(self, on_work: Callable[[], object]) -> PostgresListener:
        """Call ``on_work`` whenever an execution becomes runnable, until the listener is closed.

        A dedicated connection LISTENs on ``tether_work``, which a trigger notifies
        whenever an execution's ``wake_at`` is set (a decision, a timer, a detached
        start), in whatever process or machine wrote it. ``on_work`` runs on the
        caller's event loop. If the connection drops, notifications stop and the
        listener says so (``closed``): callers keep a slow poll and listen again.

        Raises:
            StoreUnavailable: The server cannot be reached.
        """
        wake = threadsafe_caller(on_work)
        return await self._listen_on("tether_work", lambda payload: wake())

    async def _listen_on(self, channel: str, on_notify: Callable[[str], object],
                         adopt: Callable[[PostgresListener], object] | None = None) -> PostgresListener:
        """A dedicated connection that LISTENs on ``channel``, calling ``on_notify(payload)`` on the driver loop.

        ``adopt``: what keeps the listener of a caller cancelled before it connected (else it is closed).
        """
        import asyncpg

        await self._loop()
        settings = {"search_path": self.schema} if self.schema else {}

        async def connect() -> Any:
            conn = await asyncpg.connect(self.dsn, timeout=self.connect_timeout, server_settings=settings)
            await conn.add_listener(channel, lambda _conn, _pid, _channel, payload: on_notify(payload))
            return conn

        async def open_listener(op: Op) -> Any:
            with self._map_errors():
                # Never interrupted by a cancellation (see _pgpool); a cancelled caller's is terminated.
                return await connect_detached(connect, self._listen_connects, orphaned)

        def orphaned(conn: Any) -> None:
            if conn is None:
                return
            if adopt is None:
                conn.terminate()
            else:
                adopt(PostgresListener(self, conn))

        return PostgresListener(self, await self._run(open_listener))

    @contextlib.asynccontextmanager
    async def _change_source(self, execution_id: str) -> AsyncIterator[tuple[Check | None, float]]:
        # One LISTEN connection serves every watch of this store object, opened with the
        # first and closed with the last. If it drops, watches re-read every second and
        # the next check listens again.
        await self._follow()
        follower = uuid.uuid4().hex
        try:
            # Listening first, then said: nothing notified in between is missed, and the
            # follower reads the journal after this anyway.
            await self._say_following(execution_id, follower)
            said = anyio.current_time()

            async def check() -> bool:
                nonlocal said
                if anyio.current_time() - said > _FOLLOWER_SECONDS / 3:
                    with contextlib.suppress(StoreUnavailable):
                        await self._say_following(execution_id, follower)
                        said = anyio.current_time()
                listener = self._journal_listener
                if listener is not None and not listener.closed:
                    return False
                with contextlib.suppress(StoreUnavailable):
                    await self._listen_to_journal()
                return True

            yield check, 1.0
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(StoreError, UsageError):
                await self._fetch("DELETE FROM tether_followers WHERE execution_id = $1 AND follower = $2",
                                  execution_id, follower, write=True)
            self._followers -= 1
            if not self._followers:
                listener, self._journal_listener = self._journal_listener, None
                if listener is not None:
                    with contextlib.suppress(StoreError, UsageError):  # the store closed first
                        await listener.aclose()

    async def _say_following(self, execution_id: str, follower: str) -> None:
        """Ask for the journal's notifications of ``execution_id`` for a while (a row that expires)."""
        await self._fetch(
            """WITH gone AS (  -- the rows of followers that died without a word
                DELETE FROM tether_followers WHERE execution_id = $1 AND expires_at < now()
            ) INSERT INTO tether_followers (execution_id, follower, expires_at)
            VALUES ($1, $2, now() + make_interval(secs => $3))
            ON CONFLICT (execution_id, follower) DO UPDATE SET expires_at = excluded.expires_at""",
            execution_id, follower, float(_FOLLOWER_SECONDS), write=True,
        )

    async def _follow(self) -> None:
        self._followers += 1
        try:
            if self._journal_listener is None:
                await self._listen_to_journal()
        except BaseException:
            self._followers -= 1
            raise

    async def _listen_to_journal(self) -> None:
        if self._follow_lock is None:
            self._follow_lock = anyio.Lock()
        async with self._follow_lock:
            listener = self._journal_listener
            if listener is not None and not listener.closed:
                return
            schedule = threadsafe_scheduler()
            grew = self._journal_grew

            appending = self._appending

            def told(execution_id: str, seq: int) -> None:
                if not appending.get(execution_id):  # else this object's own append, handed over next
                    grew(execution_id, seq)

            def notified(payload: str) -> None:
                seq, _, execution_id = payload.partition(":")  # the trigger's "<seq>:<execution id>"
                if seq.isdigit():
                    schedule(lambda: told(execution_id, int(seq)))
                else:  # not the trigger's: wake whoever follows that id, and let them read
                    schedule(lambda: grew(payload))

            self._journal_listener = await self._listen_on("tether_journal", notified)
            if listener is not None and self._watchers:
                self._watchers.poke_all()  # what was written while it was away

    async def aclose(self) -> None:
        # Its followers are told (they read next, and learn that the store is closed), and
        # their LISTEN connections go with it.
        self._closing = True
        loop = self._driver_loop
        for listener in (self._journal_listener, self._control_listener):
            if listener is None:
                continue
            if loop is not None and not loop.reachable():  # opened under an event loop that has ended
                close_without_loop(listener._conn)
            else:
                with anyio.CancelScope(shield=True), contextlib.suppress(StoreError, UsageError):
                    await listener.aclose()
        self._journal_listener = self._control_listener = None
        if self._watchers:
            self._watchers.poke_all()
        await super().aclose()

    async def drop_schema(self) -> None:
        """Drop this store's schema, with every table and row tether kept there, and close the store.

        For tests that give each case a schema of its own (``schema=`` or
        ``?schema=``) and clean up after it.

        Raises:
            ConfigurationError: The store has no schema of its own.
        """
        if not self.schema:
            raise ConfigurationError(
                f"{self!r} has no schema of its own to drop; open it with schema=... (or ?schema=) first."
            )
        await self._fetch(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE', write=True)
        await self.aclose()

    async def _fetch(self, sql: str, *args: Any, write: bool = False) -> list[asyncpg.Record]:
        async def op_fn(op: Op) -> list[asyncpg.Record]:
            assert self._pool is not None
            with self._map_errors():
                async with self._pool.connection() as conn:
                    if write:
                        op.commit()
                    return await conn.fetch(sql, *args)  # type: ignore[no-any-return]

        return await self._run(op_fn)

    async def _pooled_fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """One statement on a pooled connection, inside an operation already on the driver loop."""
        assert self._pool is not None
        with self._map_errors():
            async with self._pool.connection() as conn:
                return await conn.fetch(sql, *args)  # type: ignore[no-any-return]

    async def _explain_fence(self, lease: Lease) -> StoreError:
        rows = await self._fetch("SELECT 1 FROM tether_executions WHERE id = $1", lease.execution_id)
        return StaleLease(lease.execution_id, lease.epoch) if rows else ExecutionNotFound(lease.execution_id)

    # -- executions ----------------------------------------------------------

    async def start_execution(
        self, new: NewExecution, *, owner: str, lease_seconds: float
    ) -> StartResult:
        input_json = _json.dumps(new.input, what="the execution's input")
        rows = await self._fetch(
            f"INSERT INTO tether_executions ({_EXEC_COLS}, next_seq) "
            "VALUES ($1, $2, $3, $4, 'running', $5::json, NULL, NULL, $6, "
            "now() + make_interval(secs => $7), 1, now(), now(), NULL, $8, $9, NULL, $10, $11, NULL, NULL, 0, 1) "
            f"ON CONFLICT (id) DO NOTHING RETURNING {_EXEC_COLS}",
            new.execution_id, new.runner, new.root_path, new.fingerprint, input_json,
            owner, float(lease_seconds), new.version, new.deadline, new.thread, new.trace, write=True,
        )
        if rows:
            execution = _execution(rows[0])
            assert execution.lease_expires_at is not None
            lease = Lease(execution_id=new.execution_id, owner=owner, epoch=1,
                          expires_at=execution.lease_expires_at, deadline=execution.deadline)
            return StartResult(execution=execution, created=True, lease=lease)
        existing = await self.get_execution(new.execution_id)
        assert existing is not None  # executions are only removed by delete/prune
        return StartResult(execution=existing, created=False)

    async def enqueue_execution(self, new: NewExecution) -> StartResult:
        input_json = _json.dumps(new.input, what="the execution's input")
        rows = await self._fetch(
            f"INSERT INTO tether_executions ({_EXEC_COLS}, next_seq) "
            "VALUES ($1, $2, $3, $4, 'queued', $5::json, NULL, NULL, NULL, NULL, 0, now(), now(), now(), $6, $7, "
            f"NULL, $8, $9, $10, $11, $12, 1) ON CONFLICT (id) DO NOTHING RETURNING {_EXEC_COLS}",
            new.execution_id, new.runner, new.root_path, new.fingerprint, input_json, new.version, new.deadline,
            new.thread, new.trace, new.queue, new.queue_key, new.priority, write=True,
        )
        if rows:
            return StartResult(execution=_execution(rows[0]), created=True)
        existing = await self.get_execution(new.execution_id)
        assert existing is not None
        return StartResult(execution=existing, created=False)

    async def take_work(
        self, *, owner: str, lease_seconds: float, limit: int, roots: Sequence[str] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Lease]:
        check_limit(limit)
        # What may be taken, each kind read through the index that holds only its few rows
        # (a single OR of them all is planned as a scan of every running execution): due ones
        # by their wake time, running ones whose lease was handed back or ran out. Then the
        # oldest of those, locked; SKIP LOCKED: concurrent workers each take different rows
        # instead of queueing on one. Enough candidates that those other workers hold can be
        # skipped; a worker that finds all of them held takes fewer this time.
        mine = ("AND ($4::text[] IS NULL OR root_path = ANY($4::text[])) "
                "AND ($5::text[] IS NULL OR version = '' OR root_path || chr(31) || version = ANY($5::text[]))")
        runnable = ("queue IS NULL AND ((status IN ('queued', 'paused', 'decided') AND wake_at <= now()) "
                    "OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= now())))")
        rows = await self._fetch(
            f"""WITH candidates AS (
                (SELECT id, wake_at AS at FROM tether_executions
                 WHERE wake_at <= now() AND status IN ('queued', 'paused', 'decided') AND queue IS NULL {mine}
                 ORDER BY wake_at LIMIT $6)
                UNION ALL
                (SELECT id, wake_at FROM tether_executions
                 WHERE status = 'running' AND lease_expires_at IS NULL AND queue IS NULL {mine} LIMIT $6)
                UNION ALL
                (SELECT id, coalesce(wake_at, lease_expires_at) FROM tether_executions
                 WHERE status = 'running' AND lease_expires_at <= now() AND queue IS NULL {mine}
                 ORDER BY lease_expires_at LIMIT $6)
            ), ready AS (
                SELECT e.id FROM tether_executions e JOIN candidates c ON c.id = e.id
                WHERE {runnable} {mine}
                ORDER BY c.at LIMIT $3 FOR UPDATE OF e SKIP LOCKED
            )
            UPDATE tether_executions e SET lease_owner = $1,
                lease_expires_at = now() + make_interval(secs => $2),
                lease_epoch = e.lease_epoch + 1, status = 'running', wake_at = NULL, updated_at = now()
            FROM ready WHERE e.id = ready.id
            RETURNING e.id, e.lease_epoch, e.lease_expires_at, e.deadline, e.cancel""",
            owner, float(lease_seconds), limit, None if roots is None else list(roots),
            None if versions is None else version_pairs(versions), 4 * limit + 32, write=True,
        )
        return [_lease(r["id"], owner, r) for r in rows]

    async def declare_queue(self, limits: QueueLimits) -> None:
        await self._fetch(
            "INSERT INTO tether_queues (name, concurrency, per_key, rate_limit, rate_seconds, priority, updated_at) "
            "VALUES ($1, $2, $3, $4, $5, $6, now()) ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency, "
            "per_key = excluded.per_key, rate_limit = excluded.rate_limit, rate_seconds = excluded.rate_seconds, "
            "priority = excluded.priority, updated_at = excluded.updated_at",
            limits.name, limits.concurrency, limits.per_key, limits.rate_limit, limits.rate_seconds, limits.priority,
            write=True,
        )

    async def take_queued(
        self, queue: str, *, owner: str, lease_seconds: float, limit: int, roots: Sequence[str] | None = None,
        versions: Mapping[str, Sequence[str]] | None = None,
    ) -> list[Lease]:
        check_limit(limit)
        root_list = None if roots is None else list(roots)
        pairs = None if versions is None else version_pairs(versions)

        async def op_fn(op: Op) -> list[asyncpg.Record]:
            assert self._pool is not None
            with self._map_errors():
                async with self._pool.connection() as conn:
                    op.commit()
                    async with conn.transaction():
                        # The queue's row is the lock: claimers of one queue count and lease in turn.
                        row = await conn.fetchrow(
                            "SELECT concurrency, per_key, rate_limit, rate_seconds, priority FROM tether_queues "
                            "WHERE name = $1 FOR UPDATE", queue)
                        if row is None:
                            return []
                        limits = QueueLimits(name=queue, **dict(row))
                        running: dict[str | None, int] = {r[0]: r[1] for r in await conn.fetch(
                            "SELECT queue_key, count(*) FROM tether_executions WHERE queue = $1 "
                            "AND status = 'running' AND lease_expires_at > now() GROUP BY queue_key", queue)}
                        free = room(limits, running, limit)
                        if free == 0:
                            return []
                        admitted = 0 if limits.rate_limit is None else await conn.fetchval(
                            "SELECT count(*) FROM tether_executions WHERE queue = $1 "
                            "AND admitted_at > now() - make_interval(secs => $2)", queue, limits.rate_seconds or 60.0)
                        rows = await conn.fetch(
                            """SELECT id, queue_key, status FROM (
                                SELECT id, queue_key, status, priority, created_at,
                                    row_number() OVER (PARTITION BY queue_key ORDER BY priority, created_at, id) AS turn
                                FROM tether_executions
                                WHERE queue = $1 AND ((status IN ('queued', 'paused', 'decided') AND wake_at <= now())
                                    OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= now())))
                                  AND ($2::text[] IS NULL OR root_path = ANY($2::text[]))
                                  AND ($3::text[] IS NULL OR version = ''
                                       OR root_path || chr(31) || version = ANY($3::text[]))) ready
                            WHERE $4::int IS NULL OR queue_key IS NULL OR turn <= $4::int
                            ORDER BY priority, created_at, id LIMIT $5""",
                            queue, root_list, pairs, limits.per_key, fetch_size(free, running))
                        taken = admit(limits, [Candidate(r["id"], r["queue_key"], r["status"] == "queued")
                                               for r in rows], running, admitted, free)
                        if not taken:
                            return []
                        return list(await conn.fetch(
                            """UPDATE tether_executions e SET lease_owner = $1,
                                lease_expires_at = now() + make_interval(secs => $2),
                                lease_epoch = e.lease_epoch + 1, status = 'running', wake_at = NULL,
                                updated_at = now(), admitted_at = coalesce(admitted_at, now())
                            WHERE id = ANY($3::text[])
                            RETURNING e.id, e.lease_epoch, e.lease_expires_at, e.deadline, e.cancel""",
                            owner, float(lease_seconds), taken))

        return [_lease(r["id"], owner, r) for r in await self._run(op_fn)]

    async def declare_schedule(self, schedule: ScheduleRow) -> ScheduleRow:
        definition = _json.dumps(schedule.definition(), what="the schedule's input")
        rows = await self._fetch(
            "INSERT INTO tether_schedules (name, definition, paused, last_tick, updated_at) "
            "VALUES ($1, $2::json, $3, $4, now()) ON CONFLICT (name) DO UPDATE SET "
            "definition = excluded.definition, updated_at = excluded.updated_at "
            "RETURNING name, definition, paused, last_tick",
            schedule.name, definition, schedule.paused, schedule.last_tick, write=True,
        )
        return _schedule(rows[0])

    async def list_schedules(self) -> list[ScheduleRow]:
        rows = await self._fetch("SELECT name, definition, paused, last_tick FROM tether_schedules ORDER BY name")
        return [_schedule(row) for row in rows]

    async def advance_schedule(self, name: str, *, seen: datetime, to: datetime) -> bool:
        rows = await self._fetch(
            "UPDATE tether_schedules SET last_tick = $3, updated_at = now() WHERE name = $1 AND last_tick = $2 "
            "RETURNING 1", name, seen, to, write=True)
        return bool(rows)

    async def pause_schedule(self, name: str, *, paused: bool, now: datetime) -> ScheduleRow | None:
        rows = await self._fetch(
            "UPDATE tether_schedules SET paused = $2, updated_at = now(), "
            "last_tick = CASE WHEN $2 THEN last_tick ELSE greatest(last_tick, $3) END "
            "WHERE name = $1 RETURNING name, definition, paused, last_tick", name, paused, now, write=True)
        return _schedule(rows[0]) if rows else None

    async def take_llm_quota(self, name: str, *, requests: int | None, tokens: int | None,
                             per_seconds: float) -> float:
        return await self._with_window(name, lambda window, now: take(window, now, per_seconds, requests, tokens))

    async def add_llm_tokens(self, name: str, tokens: int, *, per_seconds: float) -> None:
        await self._with_window(name, lambda window, now: (0.0, spent(window, now, per_seconds, tokens)))

    async def block_llm(self, name: str, seconds: float) -> None:
        await self._with_window(name, lambda window, now: (0.0, blocked(window, now, seconds)))

    async def _with_window(self, name: str,
                           change: Callable[[Window | None, float], tuple[float, Window]]) -> float:
        """Read the limit's window under a row lock, store what ``change`` makes of it, in one transaction."""
        async def op_fn(op: Op) -> float:
            assert self._pool is not None
            with self._map_errors():
                async with self._pool.connection() as conn:
                    op.commit()
                    async with conn.transaction():
                        # The row exists first, so that concurrent callers queue on its lock.
                        await conn.execute(
                            "INSERT INTO tether_llm_limits (name, window_start, requests, tokens, blocked_until) "
                            "VALUES ($1, 0, 0, 0, 0) ON CONFLICT (name) DO NOTHING", name)
                        row = await conn.fetchrow(
                            "SELECT window_start, requests, tokens, blocked_until, "
                            "extract(epoch FROM clock_timestamp())::float8 AS now "
                            "FROM tether_llm_limits WHERE name = $1 FOR UPDATE", name)
                        assert row is not None
                        window = Window(row["window_start"], row["requests"], row["tokens"], row["blocked_until"])
                        wait, window = change(window, row["now"])
                        await conn.execute(
                            "UPDATE tether_llm_limits SET window_start = $2, requests = $3, tokens = $4, "
                            "blocked_until = $5 WHERE name = $1",
                            name, window.start, window.requests, window.tokens, window.blocked_until)
                        return wait

        return await self._run(op_fn)

    async def queue_stats(self) -> list[QueueStats]:
        rows = await self._fetch(
            """SELECT q.name, e.queue_key,
                count(*) FILTER (WHERE (e.status IN ('queued', 'paused', 'decided') AND e.wake_at <= now())
                    OR (e.status = 'running' AND (e.lease_expires_at IS NULL OR e.lease_expires_at <= now())))
                    AS waiting,
                count(*) FILTER (WHERE e.status = 'running' AND e.lease_expires_at > now()) AS running,
                count(*) FILTER (WHERE e.admitted_at > now() - make_interval(secs => coalesce(q.rate_seconds, 60)))
                    AS admitted,
                min(e.created_at) FILTER (WHERE (e.status IN ('queued', 'paused', 'decided') AND e.wake_at <= now())
                    OR (e.status = 'running' AND (e.lease_expires_at IS NULL OR e.lease_expires_at <= now())))
                    AS oldest,
                count(e.id) AS executions
            FROM tether_queues q LEFT JOIN tether_executions e ON e.queue = q.name
            GROUP BY q.name, e.queue_key ORDER BY q.name""")
        by_queue: dict[str, dict[str | None, Counts]] = {}
        for r in rows:
            keys = by_queue.setdefault(r["name"], {})
            if r["executions"]:
                keys[r["queue_key"]] = Counts(r["waiting"], r["running"], r["admitted"], r["oldest"])
        return [row for name, keys in by_queue.items() for row in stats(name, keys)]

    async def request_cancel(self, execution_id: str, *, by: str, reason: str) -> Execution | None:
        request = _json.dumps({"by": by, "reason": reason}, what="the cancel request")
        # The NOTIFY tells the holder of a running one (sent on commit only); setting
        # wake_at tells the workers of one nobody runs, through its trigger.
        rows = await self._fetch(
            f"""WITH asked AS (
                UPDATE tether_executions SET
                    cancel = coalesce(cancel, json_build_object('by', $2::json->'by', 'reason', $2::json->'reason',
                                                                'at', now())),
                    updated_at = now(),
                    wake_at = CASE WHEN status = 'running' THEN wake_at ELSE now() END
                WHERE id = $1 AND status NOT IN {_FINAL_SQL}
                RETURNING {_EXEC_COLS}, pg_notify('tether_control', id) AS told
            ) SELECT {_EXEC_COLS} FROM asked
            UNION ALL SELECT {_EXEC_COLS} FROM tether_executions
            WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM asked)""",
            execution_id, request, write=True,
        )
        self._control_requested(execution_id)
        return _execution(rows[0]) if rows else None

    @contextlib.asynccontextmanager
    async def _control_source(self, execution_id: str) -> AsyncIterator[tuple[Check | None, float]]:
        # One LISTEN connection for every holder of this store object, opened with the first
        # and kept until the store closes: a run should not pay a connection for its cancel.
        # If it cannot be had, holders learn of a cancel at their next renewal instead.
        with contextlib.suppress(StoreUnavailable):
            await self._listen_to_controls()
        yield None, 0.0

    async def _listen_to_controls(self) -> None:
        if self._control_lock is None:
            self._control_lock = anyio.Lock()
        async with self._control_lock:
            listener = self._control_listener
            if listener is not None and not listener.closed:
                return
            schedule = threadsafe_scheduler()
            requested = self._control_requested

            def adopt(listener: PostgresListener) -> None:
                # Its first holder ended before it connected: it serves the next ones (or is closed).
                if self._control_listener is None and not self._closing:
                    self._control_listener = listener
                else:
                    listener._conn.terminate()

            listening = await self._listen_on(
                "tether_control", lambda execution_id: schedule(lambda: requested(execution_id)), adopt
            )
            if self._control_listener is not None and not self._control_listener.closed:
                await listening.aclose()  # an earlier holder's, adopted meanwhile, serves already
            else:
                self._control_listener = listening

    async def get_execution(self, execution_id: str) -> Execution | None:
        rows = await self._fetch(
            f"SELECT {_EXEC_COLS} FROM tether_executions WHERE id = $1", execution_id
        )
        return _execution(rows[0]) if rows else None

    async def load_execution(self, execution_id: str) -> tuple[Execution, list[JournalEntry]] | None:
        # One statement, so one snapshot: the row first, then the journal, each column sent once.
        columns = _EXEC_COLS.split(", ")
        journal_columns = ("seq", "path", "label", "kind", "payload", "created_at")
        rows = await self._fetch(
            f"SELECT 0 AS part, {_EXEC_COLS}, {', '.join(f'NULL AS j_{c}' for c in journal_columns)} "
            "FROM tether_executions WHERE id = $1 "
            f"UNION ALL SELECT 1, {', '.join('NULL' for _ in columns)}, "
            f"{', '.join(f'j.{c}' for c in journal_columns)} FROM tether_journal j WHERE j.execution_id = $1 "
            "ORDER BY part, j_seq",
            execution_id,
        )
        if not rows or rows[0]["part"] != 0:
            return None
        journal = [
            JournalEntry(execution_id=execution_id, seq=r["j_seq"], path=r["j_path"], label=r["j_label"],
                         kind=r["j_kind"], payload=_json.loads(r["j_payload"]), created_at=r["j_created_at"])
            for r in rows[1:]
        ]
        return _execution(rows[0]), journal

    async def list_executions(
        self,
        *,
        status: ExecutionStatus | None = None,
        limit: int = 100,
        after: Execution | None = None,
        recent: bool = False,
        thread: str | None = None,
    ) -> list[Execution]:
        check_limit(limit)
        # Most recently updated first, or oldest first; a page starts after the last row of the one before.
        column, beyond, order = ("updated_at", "<", "DESC") if recent else ("created_at", ">", "ASC")
        # Only the filters given, each shape its own cached statement (with a plan for it).
        where: list[str] = []
        args: list[Any] = []
        for name, value in (("status", status), ("thread", thread)):
            if value is not None:
                args.append(value)
                where.append(f"{name} = ${len(args)}")
        if after is not None:
            args += [after.updated_at if recent else after.created_at, after.execution_id]
            where.append(f"({column}, id) {beyond} (${len(args) - 1}, ${len(args)})")
        sql = (f"SELECT {_EXEC_COLS} FROM tether_executions WHERE {' AND '.join(where) or 'true'} "
               f"ORDER BY {column} {order}, id {order} LIMIT {int(limit)}")
        return [_execution(r) for r in await self._fetch(sql, *args)]

    async def search_executions(
        self, search: ExecutionSearch | None = None, *, limit: int = 50, before: Execution | None = None
    ) -> list[Execution]:
        check_limit(limit)
        search = search or ExecutionSearch()
        sql, args = search_sql(search, limit, before)

        async def op_fn(op: Op) -> list[asyncpg.Record]:
            assert self._pool is not None
            with self._map_errors():
                async with self._pool.connection() as conn:
                    if search.id_prefix:
                        # The planner cannot estimate a "C" range on ids (its statistics are in the
                        # database's collation) and guesses 1% of the table: for a rare prefix it then
                        # walks the creation index through every row. Few ids are fetched by id instead.
                        low, high = prefix_range(search.id_prefix)
                        found = await conn.fetch(
                            'SELECT id FROM tether_executions WHERE id COLLATE "C" >= $1'
                            + ('' if high is None else ' AND id COLLATE "C" < $2') + f" LIMIT {FEW_IDS + 1}",
                            *([low] if high is None else [low, high]))
                        if len(found) <= FEW_IDS:
                            sql_ids, args_ids = search_sql(search, limit, before, [row[0] for row in found])
                            return await (await conn.prepare(sql_ids)).fetch(*args_ids)  # type: ignore[no-any-return]
                    # A statement of its own, planned for these values: a cached one may switch to a
                    # generic plan after five runs, and a generic plan may walk the creation index
                    # past a rare runner's or path's rows (the whole table, for one that matches none).
                    statement = await conn.prepare(sql)
                    return await statement.fetch(*args)  # type: ignore[no-any-return]

        return [_execution(r) for r in await self._run(op_fn)]

    async def create_token(self, token: TokenRow) -> None:
        import asyncpg

        scopes = _json.dumps(token.scopes, what="the token's scopes")
        paths = _json.dumps(token.paths, what="the token's paths")

        async def op_fn(op: Op) -> None:
            assert self._pool is not None
            with self._map_errors():
                async with self._pool.connection() as conn:
                    op.commit()
                    try:
                        await conn.execute(
                            f"INSERT INTO tether_tokens ({_TOKEN_COLS}) VALUES ($1, $2, $3::json, $4::json, $5, $6)",
                            token.name, token.digest, scopes, paths, token.created_at, token.revoked_at)
                    except asyncpg.UniqueViolationError as exc:
                        # The unique index on live names decides, so two concurrent creators cannot both win.
                        if exc.constraint_name == "tether_tokens_live":
                            raise token_named(token.name) from None
                        raise token_digest_taken() from None

        await self._run(op_fn)

    async def find_token(self, digest: str) -> TokenRow | None:
        rows = await self._fetch(f"SELECT {_TOKEN_COLS} FROM tether_tokens WHERE digest = $1 AND revoked_at IS NULL",
                                 digest)
        return _token(rows[0]) if rows else None

    async def list_tokens(self) -> list[TokenRow]:
        rows = await self._fetch(f"SELECT {_TOKEN_COLS} FROM tether_tokens ORDER BY name, created_at, digest")
        return [_token(r) for r in rows]

    async def revoke_token(self, name: str, *, at: datetime) -> bool:
        rows = await self._fetch("UPDATE tether_tokens SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL "
                                 "RETURNING 1", name, at, write=True)
        return bool(rows)

    async def list_threads(self, *, limit: int = 100, after: str | None = None) -> list[ThreadSummary]:
        check_limit(limit)
        rows = await self._fetch(
            f"""SELECT t.runs, {', '.join(f'e.{c}' for c in _EXEC_COLS.split(', '))}
            FROM (SELECT thread, count(*) AS runs FROM tether_executions
                  WHERE thread IS NOT NULL AND ($1::text IS NULL OR thread > $1)
                  GROUP BY thread ORDER BY thread LIMIT $2) t
            CROSS JOIN LATERAL (SELECT * FROM tether_executions x WHERE x.thread = t.thread
                                ORDER BY x.created_at DESC, x.id DESC LIMIT 1) e
            ORDER BY t.thread""",
            after, limit,
        )
        return [ThreadSummary(thread=r["thread"], runs=r["runs"], latest=_execution(r)) for r in rows]

    async def reopen(self, execution_id: str, *, by: str) -> Execution:
        payload = _json.dumps({"by": by}, what="who retries")
        rows = await self._fetch(
            f"""WITH bump AS (
                UPDATE tether_executions SET status = 'running', error = NULL, lease_owner = NULL,
                    lease_expires_at = NULL, wake_at = NULL, updated_at = now(), next_seq = next_seq + 1
                WHERE id = $1 AND status = 'failed' RETURNING {_EXEC_COLS}, next_seq - 1 AS first
            ), inserted AS (
                INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at)
                SELECT $1, first, root_path, 'retried', 'entry', $2::json, now() FROM bump
            ) SELECT * FROM bump""",
            execution_id, payload, write=True,
        )
        if not rows:
            found = await self.get_execution(execution_id)
            if found is None:
                raise ExecutionNotFound(execution_id)
            raise NotFailed(execution_id, found.status)
        self._journal_grew(execution_id, rows[0]["first"])
        return _execution(rows[0])

    # -- leases ----------------------------------------------------------------

    async def acquire_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, replacing: str | None = None
    ) -> Lease:
        # The holder may release between the refused UPDATE and the look that explains
        # it; then the lease is free and the UPDATE is simply tried again.
        while True:
            rows = await self._fetch(
                "UPDATE tether_executions SET lease_owner = $2, "
                "lease_expires_at = now() + make_interval(secs => $3), "
                "lease_epoch = lease_epoch + 1, status = 'running', updated_at = now() "
                f"WHERE id = $1 AND status NOT IN {_FINAL_SQL} "
                "AND (lease_owner IS NULL OR lease_expires_at <= now() OR lease_owner = $2 "
                "     OR lease_owner = $4::text) "
                "RETURNING lease_epoch, lease_expires_at, deadline, cancel",
                execution_id, owner, float(lease_seconds), replacing, write=True,
            )
            if rows:
                return _lease(execution_id, owner, rows[0])
            found = await self._fetch(
                "SELECT status, lease_owner, lease_expires_at, "
                "lease_owner IS NOT NULL AND lease_expires_at > now() AS held "
                "FROM tether_executions WHERE id = $1",
                execution_id,
            )
            if not found:
                raise ExecutionNotFound(execution_id)
            if found[0]["status"] in FINAL_STATUSES:
                raise ExecutionFinished(execution_id, found[0]["status"])
            if found[0]["held"]:
                raise LeaseHeld(execution_id, found[0]["lease_owner"], found[0]["lease_expires_at"])

    async def renew_lease(self, lease: Lease, *, lease_seconds: float) -> Lease:
        rows = await self._fetch(
            "UPDATE tether_executions SET lease_expires_at = now() + make_interval(secs => $4) "
            f"WHERE {_FENCE} RETURNING lease_expires_at, cancel",
            lease.execution_id, lease.epoch, lease.owner, float(lease_seconds), write=True,
        )
        if not rows:
            raise await self._explain_fence(lease)
        cancel = rows[0]["cancel"]
        return lease.model_copy(update={"expires_at": rows[0]["lease_expires_at"],
                                        "cancel": None if cancel is None else _json.loads(cancel)})

    async def release_lease(
        self,
        lease: Lease,
        *,
        status: ExecutionStatus | None = None,
        result: JsonValue = None,
        error: str | None = None,
        entries: Sequence[NewEntry] = (),
        wake_at: datetime | None = None,
    ) -> list[int]:
        rows = entry_rows(entries)
        final = status in FINAL_STATUSES
        result_json = _json.dumps(result, what="the execution's result") if final else None
        out = await self._fetch(
            f"""WITH bump AS (
                UPDATE tether_executions SET next_seq = next_seq + $4,
                    lease_owner = NULL, lease_expires_at = NULL,
                    wake_at = CASE WHEN $10 THEN NULL ELSE $13::timestamptz END,
                    status = coalesce($9::text, status),
                    result = CASE WHEN $10 THEN $11::json ELSE result END,
                    error = CASE WHEN $10 THEN $12::text ELSE error END,
                    cancel = CASE WHEN $10 THEN NULL ELSE cancel END,
                    updated_at = now()
                WHERE {_FENCE} RETURNING next_seq - $4 AS first
            ), cleared AS (
                DELETE FROM tether_pending
                WHERE $10 AND execution_id = $1 AND EXISTS (SELECT 1 FROM bump)
            ), inserted AS ({_INSERT_ENTRIES})
            SELECT first FROM bump""",
            lease.execution_id, lease.epoch, lease.owner, len(rows), *_columns(rows),
            status, final, result_json, error, wake_at, write=True,
        )
        if not out:
            raise await self._explain_fence(lease)
        first = out[0]["first"]
        if rows:
            self._journal_grew(lease.execution_id, first + len(rows) - 1)
        return list(range(first, first + len(rows)))

    # -- journal -------------------------------------------------------------

    async def append(self, lease: Lease, entries: Sequence[NewEntry]) -> list[int]:
        rows = entry_rows(entries)
        if not rows:
            return []
        execution_id = lease.execution_id
        followed = self._watchers is not None and self._watchers.has(execution_id)
        if followed:  # its NOTIFY is not news here: the entries are handed over below
            self._appending[execution_id] = self._appending.get(execution_id, 0) + 1
        async def op_fn(op: Op) -> list[Any]:
            return await self._appends.write(op, execution_id, lease.epoch, lease.owner, rows)

        try:
            out = await self._run(op_fn)
        finally:
            if followed:
                left = self._appending.pop(execution_id) - 1
                if left:
                    self._appending[execution_id] = left
        if not out:
            raise await self._explain_fence(lease)
        seqs = sorted(r["seq"] for r in out)
        if followed:
            self._journal_grew(execution_id, seqs[-1], committed(execution_id, seqs, rows, out[0]["created_at"]))
        return seqs

    async def rewrite(self, lease: Lease, journal: Sequence[JournalEntry], *,
                      pending: Sequence[PendingInterrupt], version: str, fingerprint: str) -> None:
        entries = [(lease.execution_id, e.seq, e.path, e.label, e.kind, _json.dumps(e.payload, what="a journal entry"),
                    e.created_at) for e in journal]
        rows = [(lease.execution_id, p.agent_path, p.reason, _json.dumps(p.context, what="the interrupt's context"),
                 p.seq, p.created_at, p.deadline, _json.dumps(p.default, what="the interrupt's default"))
                for p in pending]
        last = max((e.seq for e in journal), default=0)

        async def op_fn(op: Op) -> bool:
            assert self._pool is not None
            with self._map_errors():
                async with self._pool.connection() as conn:
                    op.commit()
                    async with conn.transaction():
                        fenced = await conn.fetchval(
                            "UPDATE tether_executions SET version = $4, fingerprint = $5, updated_at = now(), "
                            f"next_seq = greatest(next_seq, $6 + 1) WHERE {_FENCE} RETURNING 1",
                            lease.execution_id, lease.epoch, lease.owner, version, fingerprint, last,
                        )
                        if fenced is None:
                            return False
                        await conn.execute("DELETE FROM tether_journal WHERE execution_id = $1", lease.execution_id)
                        await conn.executemany(
                            "INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at) "
                            "VALUES ($1, $2, $3, $4, $5, $6::json, $7)", entries)
                        await conn.execute("DELETE FROM tether_pending WHERE execution_id = $1", lease.execution_id)
                        await conn.executemany(
                            f"INSERT INTO tether_pending ({_PENDING_COLS}) "
                            "VALUES ($1, $2, $3, $4::json, $5, $6, $7, $8::json)", rows)
                        return True

        if not await self._run(op_fn):
            raise await self._explain_fence(lease)
        self._journal_grew(lease.execution_id)

    async def read_journal(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEntry]:
        check_limit(limit)
        rows = await self._fetch(
            "SELECT seq, path, label, kind, payload, created_at FROM tether_journal "
            "WHERE execution_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            execution_id, after_seq, limit,
        )
        return [
            JournalEntry(execution_id=execution_id, seq=r["seq"], path=r["path"], label=r["label"],
                         kind=r["kind"], payload=_json.loads(r["payload"]),
                         created_at=r["created_at"])
            for r in rows
        ]

    async def suspend(
        self, lease: Lease, entries: Sequence[NewEntry], interrupt: NewInterrupt
    ) -> PendingInterrupt:
        import asyncpg

        rows = entry_rows(entries)
        context_json = _json.dumps(interrupt.context, what="the interrupt's context")
        default_json = _json.dumps(interrupt.default, what="the interrupt's default")
        try:
            out = await self._fetch(
                f"""WITH bump AS (
                    UPDATE tether_executions SET next_seq = next_seq + $4
                    WHERE {_FENCE} RETURNING next_seq - $4 AS first
                ), inserted AS ({_INSERT_ENTRIES})
                INSERT INTO tether_pending ({_PENDING_COLS})
                SELECT $1, $9, $10, $11::json, bump.first + $4 - 1, now(), $12, $13::json FROM bump
                RETURNING {_PENDING_COLS}""",
                lease.execution_id, lease.epoch, lease.owner, len(rows), *_columns(rows),
                interrupt.path, interrupt.reason, context_json, interrupt.deadline, default_json, write=True,
            )
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, asyncpg.UniqueViolationError):
                raise DuplicateInterrupt(lease.execution_id, interrupt.path) from exc.__cause__
            raise
        if not out:
            raise await self._explain_fence(lease)
        pending = _pending(out[0])
        self._journal_grew(lease.execution_id, pending.seq)
        return pending

    async def claim(
        self,
        execution_id: str,
        value: JsonValue,
        *,
        path: str | None = None,
        seq: int | None = None,
        owner: str | None = None,
        by: str | None = None,
    ) -> JournalEntry:
        entry, _ = await self._claim(execution_id, value, path=path, seq=seq, owner=owner, by=by)
        return entry

    async def claim_and_lease(
        self,
        execution_id: str,
        value: JsonValue,
        *,
        owner: str,
        lease_seconds: float,
        path: str | None = None,
        seq: int | None = None,
        by: str | None = None,
    ) -> tuple[JournalEntry, Lease | None]:
        # One transaction: a claim that succeeds has taken the lease too.
        return await self._claim(execution_id, value, path=path, seq=seq, owner=owner, by=by,
                                 lease_seconds=lease_seconds)

    async def _claim(self, execution_id: str, value: JsonValue, *, path: str | None, seq: int | None,
                     owner: str | None, by: str | None, lease_seconds: float | None = None,
                     ) -> tuple[JournalEntry, Lease | None]:
        """Claim in one statement; with ``lease_seconds``, ``owner`` also takes the lease in it."""
        value_json = _json.dumps(value, what="the resume value")
        args = [execution_id, path, seq, value_json, owner, by]
        if lease_seconds is None:
            out = await self._fetch(_CLAIM_DECIDED, *args, write=True)
        else:
            out = await self._fetch(_CLAIM_LEASED, *args, float(lease_seconds), write=True)
        if not out:
            # Read again to say why: with no path named, several pending is the claimer's mistake.
            target = path if path is not None else sole_pending(execution_id, await self._pending_paths(execution_id))
            raise await self._explain_failed_claim(execution_id, target, owner)
        row = out[0]
        self._journal_grew(execution_id, row["seq"])
        entry = JournalEntry(execution_id=execution_id, seq=row["seq"], path=row["path"],
                             label="resumed", kind="resumed", payload=_json.loads(row["payload"]),
                             created_at=row["created_at"])
        if lease_seconds is None:
            return entry, None
        assert owner is not None
        return entry, _lease(execution_id, owner, row)

    async def _pending_paths(self, execution_id: str) -> list[str]:
        rows = await self._fetch(
            "SELECT path FROM tether_pending WHERE execution_id = $1 ORDER BY path", execution_id
        )
        return [r["path"] for r in rows]

    async def _explain_failed_claim(self, execution_id: str, path: str | None,
                                    owner: str | None = None) -> StoreError:
        """Why the claim's statement consumed nothing: the facts, read after it (see `failed_claim`).

        In one statement, so one snapshot: a cancel committing meanwhile cannot show
        its lease from before and its cleared pending rows from after.
        """
        rows = await self._fetch(
            """SELECT e.status, e.lease_expires_at, e.cancel IS NOT NULL AS cancelling,
                CASE WHEN e.lease_owner IS NOT NULL AND e.lease_expires_at > now()
                     AND e.lease_owner IS DISTINCT FROM $2::text THEN e.lease_owner END AS held_by,
                ARRAY(SELECT p.path FROM tether_pending p WHERE p.execution_id = $1 ORDER BY p.path) AS pending,
                (SELECT j.path FROM tether_journal j WHERE j.execution_id = $1 AND j.kind = 'resumed'
                 AND ($3::text IS NULL OR j.path = $3) ORDER BY j.seq DESC LIMIT 1) AS resumed
            FROM tether_executions e WHERE e.id = $1""",
            execution_id, owner, path,
        )
        if not rows:
            return failed_claim(execution_id, path, status=None)
        row = rows[0]
        return failed_claim(
            execution_id, path, status=row["status"], pending=list(row["pending"]), last_resumed=row["resumed"],
            held=(row["held_by"], row["lease_expires_at"]) if row["held_by"] is not None else None,
            cancelling=row["cancelling"],
        )

    async def deliver_message(self, execution_id: str, path: str, message: JsonValue, *, by: str) -> JournalEntry:
        payload_json = _json.dumps({"message": message, "by": by}, what="the message")
        rows = await self._fetch(
            f"""WITH bump AS (
                UPDATE tether_executions SET wake_at = now(), updated_at = now(), next_seq = next_seq + 1
                WHERE id = $1 AND status NOT IN {_FINAL_SQL} RETURNING next_seq - 1 AS first
            ) INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at)
            SELECT $1, first, $2, 'message', 'entry', $3::json, now() FROM bump
            RETURNING seq, created_at""",
            execution_id, path, payload_json, write=True,
        )
        if not rows:
            execution = await self.get_execution(execution_id)
            if execution is None:
                raise ExecutionNotFound(execution_id)
            raise ExecutionFinished(execution_id, execution.status)
        self._journal_grew(execution_id, rows[0]["seq"])
        return JournalEntry(execution_id=execution_id, seq=rows[0]["seq"], path=path, label="message", kind="entry",
                            payload=_json.loads(payload_json), created_at=rows[0]["created_at"])

    async def list_pending(
        self,
        *,
        execution_id: str | None = None,
        path_prefix: str | None = None,
        limit: int = 100,
        after: PendingInterrupt | None = None,
        due_before: datetime | None = None,
    ) -> list[PendingInterrupt]:
        check_limit(limit)
        where, args = _pending_where(execution_id, None)

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        if due_before is not None:
            where.append(f"deadline <= {arg(due_before)}")
        if after is not None:
            where.append(f"(created_at, execution_id, path) > "
                         f"({arg(after.created_at)}, {arg(after.execution_id)}, {arg(after.agent_path)})")
        # Only the filters given, so that each shape is its own cached statement with a plan
        # for it; the limit inline, so that its plan knows how few rows it needs.
        sql = (f"SELECT {_PENDING_COLS} FROM tether_pending WHERE {{}} "
               f"ORDER BY created_at, execution_id, path LIMIT {int(limit)}")
        if not path_prefix:
            rows = await self._fetch(sql.format(" AND ".join(where) or "true"), *args)
            return [_pending(r) for r in rows]
        # Through the path index when few rows are under the prefix, else walking the age
        # index (see `FEW_UNDER_PREFIX`); an execution's own rows, or those due, are few already.
        ranged, ranged_args = _pending_where(None, path_prefix, list(args))
        walked = sql.format(" AND ".join([*where, f"starts_with(path, ${len(args) + 1})"]))
        by_path = sql.format(" AND ".join([*where, *ranged]))
        may_range = execution_id is None and due_before is None

        async def op_fn(op: Op) -> list[asyncpg.Record]:
            assert self._pool is not None
            with self._map_errors():
                async with self._pool.connection() as conn:
                    if may_range and await _few_under(conn, path_prefix):
                        return await conn.fetch(by_path, *ranged_args)  # type: ignore[no-any-return]
                    return await conn.fetch(walked, *args, path_prefix)  # type: ignore[no-any-return]

        return [_pending(r) for r in await self._run(op_fn)]

    async def count_pending(
        self, *, execution_id: str | None = None, path_prefix: str | None = None
    ) -> int:
        where, args = _pending_where(execution_id, path_prefix)
        rows = await self._fetch(f"SELECT count(*) AS n FROM tether_pending WHERE {' AND '.join(where) or 'true'}",
                                 *args)
        return int(rows[0]["n"])

    # -- idempotency ---------------------------------------------------------

    async def get_idempotent(self, execution_id: str, key: str) -> IdempotencyRecord | None:
        rows = await self._fetch(
            "SELECT value, created_at FROM tether_idempotency WHERE execution_id = $1 AND key = $2",
            execution_id, key,
        )
        if not rows:
            return None
        return IdempotencyRecord(execution_id=execution_id, key=key,
                                 value=_json.loads(rows[0]["value"]), created_at=rows[0]["created_at"])

    async def list_idempotent(self, execution_id: str) -> list[IdempotencyRecord]:
        rows = await self._fetch(
            "SELECT key, value, created_at FROM tether_idempotency WHERE execution_id = $1 ORDER BY key",
            execution_id,
        )
        return [IdempotencyRecord(execution_id=execution_id, key=r["key"], value=_json.loads(r["value"]),
                                  created_at=r["created_at"]) for r in rows]

    async def put_idempotent(self, lease: Lease, key: str, value: JsonValue) -> IdempotencyRecord:
        value_json = _json.dumps(value, what=f"the result recorded for {key!r}")
        # DO UPDATE (a no-op) rather than DO NOTHING: it waits for a concurrent insert
        # of the same key and returns the committed row, which DO NOTHING cannot see.
        out = await self._fetch(
            f"""WITH fence AS (
                SELECT 1 FROM tether_executions WHERE {_FENCE} FOR SHARE
            )
            INSERT INTO tether_idempotency (execution_id, key, value, created_at)
            SELECT $1, $4, $5::json, now() FROM fence
            ON CONFLICT (execution_id, key) DO UPDATE SET value = tether_idempotency.value
            RETURNING value, created_at""",
            lease.execution_id, lease.epoch, lease.owner, key, value_json, write=True,
        )
        if not out:
            raise await self._explain_fence(lease)
        return IdempotencyRecord(execution_id=lease.execution_id, key=key,
                                 value=_json.loads(out[0]["value"]), created_at=out[0]["created_at"])

    # -- maintenance ---------------------------------------------------------

    async def delete_execution(self, execution_id: str) -> bool:
        rows = await self._fetch(
            """WITH gone AS (DELETE FROM tether_executions WHERE id = $1 RETURNING id),
            j AS (DELETE FROM tether_journal WHERE execution_id = $1),
            p AS (DELETE FROM tether_pending WHERE execution_id = $1),
            i AS (DELETE FROM tether_idempotency WHERE execution_id = $1)
            SELECT count(*) AS n FROM gone""",
            execution_id, write=True,
        )
        return bool(rows[0]["n"])

    async def prune(self, *, older_than: datetime, statuses: Sequence[ExecutionStatus] | None = None,
                    limit: int | None = None) -> int:
        chosen = prunable(statuses, limit)
        rows = await self._fetch(
            f"""WITH doomed AS (
                DELETE FROM tether_executions WHERE id IN (
                    SELECT id FROM tether_executions e
                    WHERE status IN {_FINAL_SQL} AND status = ANY($2::text[]) AND updated_at < $1
                      -- a thread's runs go together, once its latest is old and finished
                      AND (thread IS NULL OR NOT EXISTS (
                          SELECT 1 FROM tether_executions k WHERE k.thread = e.thread
                          AND (k.status NOT IN {_FINAL_SQL} OR k.updated_at >= $1)))
                    ORDER BY updated_at LIMIT {'ALL' if limit is None else int(limit)})
                RETURNING id
            ),
            j AS (DELETE FROM tether_journal WHERE execution_id IN (SELECT id FROM doomed)),
            p AS (DELETE FROM tether_pending WHERE execution_id IN (SELECT id FROM doomed)),
            i AS (DELETE FROM tether_idempotency WHERE execution_id IN (SELECT id FROM doomed))
            SELECT count(*) AS n FROM doomed""",
            older_than, chosen, write=True,
        )
        return int(rows[0]["n"])

    # -- checks ----------------------------------------------------------------

    async def check(self) -> list[str]:
        """Check tether's own invariants, and read every row; change nothing.

        In one read-only snapshot: no journal entry, pending interrupt or
        idempotency record may lack its execution; a pending interrupt's ``seq``
        must be a ``suspended`` entry of its journal; an execution's next entry
        number must lie past its journal; every status must be one. Every row is
        read in full, so the server reports damaged pages or TOAST data it finds
        (all it can find: it checksums pages only if the cluster was initialized
        with ``--data-checksums``). It runs on a store that already found damage too.

        Returns:
            What is wrong, one line per problem (the first few of each kind, then
            how many more); empty when the store is sound.

        Raises:
            StoreUnavailable: The server cannot be reached.
        """
        import asyncpg

        shown_per_kind = 10
        orphans = ("SELECT execution_id, count(*) FROM {} t WHERE NOT EXISTS ("
                   "SELECT 1 FROM tether_executions e WHERE e.id = t.execution_id) GROUP BY execution_id")
        # tether's own invariants, as queries whose rows are problems, with the line each row makes.
        invariants: list[tuple[str, str, tuple[Any, ...]]] = [
            (f"execution {{0!r}} has no row in tether_executions, but its {rows} remain ({{1}})",
             orphans.format(table), ())
            for table, rows in (("tether_journal", "journal entries"),
                                ("tether_pending", "pending interrupts"),
                                ("tether_idempotency", "idempotency records"))
        ]
        invariants += [
            (
                ("the pending interrupt of execution {0!r} at {1!r} names seq {2}, which is no "
                 "'suspended' entry of its journal"),
                ("SELECT p.execution_id, p.path, p.seq FROM tether_pending p "
                 "WHERE EXISTS (SELECT 1 FROM tether_executions e WHERE e.id = p.execution_id) "
                 "AND NOT EXISTS (SELECT 1 FROM tether_journal j WHERE j.execution_id = p.execution_id "
                 "AND j.seq = p.seq AND j.kind = 'suspended')"),
                (),
            ),
            (
                ("execution {0!r} would number its next journal entry {1}, but its journal already "
                 "reaches {2}"),
                ("SELECT e.id, e.next_seq, max(j.seq) FROM tether_executions e "
                 "JOIN tether_journal j ON j.execution_id = e.id "
                 "GROUP BY e.id, e.next_seq HAVING max(j.seq) >= e.next_seq"),
                (),
            ),
            (
                "execution {0!r} has the status {1!r}, which is no execution status",
                "SELECT id, status FROM tether_executions WHERE status <> ALL($1::text[])",
                (list(get_args(ExecutionStatus)),),
            ),
        ]
        tables = ("tether_executions", "tether_journal", "tether_pending", "tether_idempotency", "tether_tokens")

        async def op_fn(op: Op) -> tuple[list[str], bool]:
            assert self._pool is not None
            by_kind: dict[str, list[str]] = {}
            damaged = False

            def report(kind: str, line: str) -> None:
                by_kind.setdefault(kind, []).append(line)

            with self._map_errors(checking=True):
                async with self._pool.connection() as conn, conn.transaction(
                    isolation="repeatable_read", readonly=True
                ):
                    for table in tables:
                        try:
                            # A savepoint each: a read that fails leaves the others to run.
                            async with conn.transaction():
                                await conn.fetch(f"SELECT count(*), sum(length(t::text)) FROM {table} t")
                        except (asyncpg.DataCorruptedError, asyncpg.IndexCorruptedError,
                                asyncpg.InternalServerError) as exc:
                            damaged = True
                            report("unreadable", f"{table} cannot be read in full: {exc}")
                    for line, sql, args in invariants:
                        try:
                            async with conn.transaction():
                                for row in await conn.fetch(sql, *args):
                                    report(line, line.format(*row))
                        except (asyncpg.DataCorruptedError, asyncpg.IndexCorruptedError,
                                asyncpg.InternalServerError) as exc:
                            damaged = True
                            report("unreadable", f"a check of tether's invariants could not read: {exc}")
            problems: list[str] = []
            for found in by_kind.values():  # the first few of each kind, then how many more
                problems += found[:shown_per_kind]
                if len(found) > shown_per_kind:
                    problems.append(f"... and {len(found) - shown_per_kind} more like the line above")
            return problems, damaged

        problems, damaged = await self._run(op_fn)
        if damaged and self._damage is None:
            self._damage = StoreCorrupted(
                f"Postgres at {redact(self.dsn)} reports damaged data: check() found {len(problems)} "
                f"problems, the first: {problems[0]} Repair or restore it; `tether doctor` lists the damage."
            )
        return problems
