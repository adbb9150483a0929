"""Numbered schema migrations, one list of statements per version.

Entry 0 creates the version table itself. `setup()` applies, in one transaction
under a lock, every version above the one recorded; adding a version means
appending a list here, never editing an old one.
"""

from __future__ import annotations

# SQLite keeps times as integer microseconds since the epoch (exact round trips).
SQLITE_MIGRATIONS: list[list[str]] = [
    ["CREATE TABLE IF NOT EXISTS tether_schema (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)"],
    [
        """CREATE TABLE tether_executions (
            id TEXT PRIMARY KEY,
            runner TEXT NOT NULL,
            root_path TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            status TEXT NOT NULL,
            input TEXT NOT NULL,
            result TEXT,
            error TEXT,
            lease_owner TEXT,
            lease_expires_at INTEGER,
            lease_epoch INTEGER NOT NULL DEFAULT 0,
            next_seq INTEGER NOT NULL DEFAULT 1,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
        "CREATE INDEX tether_executions_by_status ON tether_executions (status, updated_at)",
        "CREATE INDEX tether_executions_by_created ON tether_executions (created_at, id)",
        """CREATE TABLE tether_journal (
            execution_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            path TEXT NOT NULL,
            label TEXT NOT NULL,
            kind TEXT NOT NULL,
            payload TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (execution_id, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE tether_pending (
            execution_id TEXT NOT NULL,
            path TEXT NOT NULL,
            reason TEXT NOT NULL,
            context TEXT NOT NULL,
            seq INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (execution_id, path)
        )""",
        "CREATE INDEX tether_pending_by_age ON tether_pending (created_at, execution_id, path)",
        """CREATE TABLE tether_idempotency (
            execution_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (execution_id, key)
        ) WITHOUT ROWID""",
    ],
    [
        # Version 2: workers. wake_at marks an execution a worker should take up (a
        # decision, a due timer, a detached start); a pending interrupt may have a
        # deadline after which a worker decides it with its default.
        "ALTER TABLE tether_executions ADD COLUMN wake_at INTEGER",
        "CREATE INDEX tether_executions_due ON tether_executions (wake_at) WHERE wake_at IS NOT NULL",
        "CREATE INDEX tether_executions_leased ON tether_executions (lease_expires_at) WHERE status = 'running'",
        "ALTER TABLE tether_pending ADD COLUMN deadline INTEGER",
        "ALTER TABLE tether_pending ADD COLUMN default_value TEXT",
        "CREATE INDEX tether_pending_due ON tether_pending (deadline) WHERE deadline IS NOT NULL",
    ],
    [
        # Version 3: a journal entry's number comes from the journal (max(seq) + 1, under
        # the file's write lock), so a boundary no longer rewrites its execution's row.
        # Dropping the counter makes a tether that still used it refuse this file
        # (SchemaVersionError) instead of numbering entries from a stale count.
        "ALTER TABLE tether_executions DROP COLUMN next_seq",
    ],
    [
        # Version 4 changes no table. A durable step's journal entry now names its step by
        # its key within the message; a tether of version 3 or older would not find such
        # a step, and would run it (and its side effects) again. Now it refuses the file.
    ],
    [
        # Version 5: an execution whose decision is recorded but not yet carried out is
        # 'decided' (a tether of version 4 could not read that status); operators list
        # the most recently updated executions first.
        "CREATE INDEX tether_executions_by_updated ON tether_executions (updated_at, id)",
    ],
    [
        # Version 6: the version of its runner an execution started on ('' for a runner
        # that names none); a run continues on its own version, or is migrated to another.
        "ALTER TABLE tether_executions ADD COLUMN version TEXT NOT NULL DEFAULT ''",
    ],
    [
        # Version 7 changes no table. An execution's verdict (paused, completed, failed,
        # cancelled) is journaled with it, so its followers see it at its cursor.
    ],
    [
        # Version 8: live executions. A deadline after which an execution is 'timed_out'
        # (a status a tether of version 7 could not read), and a cancel asked for by any
        # process, which the holder of the lease carries out.
        "ALTER TABLE tether_executions ADD COLUMN deadline INTEGER",
        "ALTER TABLE tether_executions ADD COLUMN cancel TEXT",
        # The conversation (thread) an execution is a run of: its runs are listed by it.
        "ALTER TABLE tether_executions ADD COLUMN thread TEXT",
        ("CREATE INDEX tether_executions_by_thread ON tether_executions (thread, created_at, id) "
         "WHERE thread IS NOT NULL"),
    ],
    [
        # Version 9: the trace context (W3C traceparent) an execution's telemetry continues
        # in every process that handles it; NULL when it started with telemetry off.
        "ALTER TABLE tether_executions ADD COLUMN trace TEXT",
    ],
    [
        # Version 10: queues. An execution may belong to one, with a key (whose it is) and a
        # priority; admitted_at is when its queue first admitted it (what its rate counts).
        "ALTER TABLE tether_executions ADD COLUMN queue TEXT",
        "ALTER TABLE tether_executions ADD COLUMN queue_key TEXT",
        "ALTER TABLE tether_executions ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE tether_executions ADD COLUMN admitted_at INTEGER",
        ("CREATE INDEX tether_executions_by_queue ON tether_executions (queue, status, priority, created_at) "
         "WHERE queue IS NOT NULL"),
        """CREATE TABLE tether_queues (
            name TEXT PRIMARY KEY,
            concurrency INTEGER,
            per_key INTEGER,
            rate_limit INTEGER,
            rate_seconds REAL,
            priority INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
    ],
    [
        # Version 11: schedules. A row per schedule: what it starts, its cron and zone, and the
        # last tick started, which workers move on with a compare-and-set.
        """CREATE TABLE tether_schedules (
            name TEXT PRIMARY KEY,
            definition TEXT NOT NULL,
            paused INTEGER NOT NULL DEFAULT 0,
            last_tick INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
    ],
    [
        # Version 12: LLM rate limits shared by a fleet: one row per limit, its current window's
        # calls and tokens, and until when a provider's 429 blocks it.
        # Times are seconds since the epoch, on the store's clock.
        """CREATE TABLE tether_llm_limits (
            name TEXT PRIMARY KEY,
            window_start REAL NOT NULL,
            requests INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            blocked_until REAL NOT NULL
        )""",
    ],
    [
        # Version 13: searching executions, newest first, each filter served by an index (the
        # thread and the creation time have theirs; an id prefix is a range of the primary key).
        # A runner is searched by its root path, alone (by_root, which path prefixes use too),
        # with its version (by_root_version); a version alone has its own, so none of the
        # three sorts its matches.
        "CREATE INDEX tether_executions_by_status_created ON tether_executions (status, created_at, id)",
        "CREATE INDEX tether_executions_by_root_version ON tether_executions (root_path, version, created_at, id)",
        "CREATE INDEX tether_executions_by_root ON tether_executions (root_path, created_at, id)",
        "CREATE INDEX tether_executions_by_version ON tether_executions (version, created_at, id)",
        # Access tokens: a hash of each secret, never the secret. Not an execution's rows:
        # deleting or pruning executions leaves them. One live token per name; a revoked
        # one keeps its row (and its name may be used again).
        """CREATE TABLE tether_tokens (
            digest TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            scopes TEXT NOT NULL,
            paths TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            revoked_at INTEGER
        )""",
        "CREATE UNIQUE INDEX tether_tokens_live ON tether_tokens (name) WHERE revoked_at IS NULL",
    ],
    [
        # Version 14: pending interrupts by path. A prefix that few of them match is a range
        # of this index (the age index would be walked through all of them); one that many
        # match is still read in age order, where its first page comes early.
        "CREATE INDEX tether_pending_by_path ON tether_pending (path, created_at, execution_id)",
    ],
]

POSTGRES_MIGRATIONS: list[list[str]] = [
    [
        ("CREATE TABLE IF NOT EXISTS tether_schema "
        "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
    ],
    [
        """CREATE TABLE tether_executions (
            id text PRIMARY KEY,
            runner text NOT NULL,
            root_path text NOT NULL,
            fingerprint text NOT NULL,
            status text NOT NULL,
            input json NOT NULL,
            result json,
            error text,
            lease_owner text,
            lease_expires_at timestamptz,
            lease_epoch bigint NOT NULL DEFAULT 0,
            next_seq bigint NOT NULL DEFAULT 1,
            created_at timestamptz NOT NULL,
            updated_at timestamptz NOT NULL
        )""",
        "CREATE INDEX tether_executions_by_status ON tether_executions (status, updated_at)",
        "CREATE INDEX tether_executions_by_created ON tether_executions (created_at, id)",
        """CREATE TABLE tether_journal (
            execution_id text NOT NULL,
            seq bigint NOT NULL,
            path text NOT NULL,
            label text NOT NULL,
            kind text NOT NULL,
            payload json NOT NULL,
            created_at timestamptz NOT NULL,
            PRIMARY KEY (execution_id, seq)
        )""",
        """CREATE TABLE tether_pending (
            execution_id text NOT NULL,
            path text NOT NULL,
            reason text NOT NULL,
            context json NOT NULL,
            seq bigint NOT NULL,
            created_at timestamptz NOT NULL,
            PRIMARY KEY (execution_id, path)
        )""",
        "CREATE INDEX tether_pending_by_age ON tether_pending (created_at, execution_id, path)",
        """CREATE TABLE tether_idempotency (
            execution_id text NOT NULL,
            key text NOT NULL,
            value json NOT NULL,
            created_at timestamptz NOT NULL,
            PRIMARY KEY (execution_id, key)
        )""",
    ],
    [
        "ALTER TABLE tether_executions ADD COLUMN wake_at timestamptz",
        "CREATE INDEX tether_executions_due ON tether_executions (wake_at) WHERE wake_at IS NOT NULL",
        "CREATE INDEX tether_executions_leased ON tether_executions (lease_expires_at) WHERE status = 'running'",
        "ALTER TABLE tether_pending ADD COLUMN deadline timestamptz",
        "ALTER TABLE tether_pending ADD COLUMN default_value json",
        "CREATE INDEX tether_pending_due ON tether_pending (deadline) WHERE deadline IS NOT NULL",
        # Workers LISTEN on tether_work: any write that makes an execution runnable wakes them.
        """CREATE FUNCTION tether_notify_work() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('tether_work', NEW.id);
            RETURN NULL;
        END $$""",
        """CREATE TRIGGER tether_work AFTER INSERT OR UPDATE OF wake_at ON tether_executions
        FOR EACH ROW WHEN (NEW.wake_at IS NOT NULL) EXECUTE FUNCTION tether_notify_work()""",
    ],
    [
        # Version 3 changed how SQLite numbers journal entries. Postgres keeps its counter:
        # the fence's row lock is what orders concurrent transactions there.
    ],
    [
        # Version 4: as for SQLite, step entries carry keys that an older tether would not
        # find (it would run those steps again); it refuses the database instead.
    ],
    [
        # Version 5: as for SQLite, the 'decided' status and the listing by last update.
        "CREATE INDEX tether_executions_by_updated ON tether_executions (updated_at, id)",
    ],
    [
        # Version 6: as for SQLite, the runner's version an execution started on.
        "ALTER TABLE tether_executions ADD COLUMN version text NOT NULL DEFAULT ''",
    ],
    [
        # Version 7: followers of an execution (tether watch, the events API) LISTEN on
        # tether_journal, and say so in tether_followers until their row expires; a journal
        # entry of a followed execution notifies "<seq>:<execution id>". Only those: a NOTIFY
        # makes its transaction take a lock that serializes every commit that notifies.
        """CREATE TABLE tether_followers (
            execution_id text NOT NULL,
            follower text NOT NULL,
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (execution_id, follower)
        )""",
        """CREATE FUNCTION tether_notify_journal() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF EXISTS (SELECT 1 FROM tether_followers
                       WHERE execution_id = NEW.execution_id AND expires_at > now()) THEN
                PERFORM pg_notify('tether_journal', NEW.seq || ':' || NEW.execution_id);
            END IF;
            RETURN NULL;
        END $$""",
        """CREATE TRIGGER tether_journal AFTER INSERT ON tether_journal
        FOR EACH ROW EXECUTE FUNCTION tether_notify_journal()""",
    ],
    [
        # Version 8: as for SQLite, deadlines and cancel requests. A cancel request
        # notifies tether_control with the execution's id, for the process that holds it.
        "ALTER TABLE tether_executions ADD COLUMN deadline timestamptz",
        "ALTER TABLE tether_executions ADD COLUMN cancel json",
        "ALTER TABLE tether_executions ADD COLUMN thread text",
        ("CREATE INDEX tether_executions_by_thread ON tether_executions (thread, created_at, id) "
         "WHERE thread IS NOT NULL"),
    ],
    [
        # Version 9: as for SQLite, the execution's trace context.
        "ALTER TABLE tether_executions ADD COLUMN trace text",
    ],
    [
        # Version 10: as for SQLite, queues.
        "ALTER TABLE tether_executions ADD COLUMN queue text",
        "ALTER TABLE tether_executions ADD COLUMN queue_key text",
        "ALTER TABLE tether_executions ADD COLUMN priority integer NOT NULL DEFAULT 0",
        "ALTER TABLE tether_executions ADD COLUMN admitted_at timestamptz",
        ("CREATE INDEX tether_executions_by_queue ON tether_executions (queue, status, priority, created_at) "
         "WHERE queue IS NOT NULL"),
        """CREATE TABLE tether_queues (
            name text PRIMARY KEY,
            concurrency integer,
            per_key integer,
            rate_limit integer,
            rate_seconds double precision,
            priority boolean NOT NULL,
            updated_at timestamptz NOT NULL
        )""",
    ],
    [
        # Version 11: as for SQLite, schedules.
        """CREATE TABLE tether_schedules (
            name text PRIMARY KEY,
            definition json NOT NULL,
            paused boolean NOT NULL DEFAULT false,
            last_tick timestamptz NOT NULL,
            updated_at timestamptz NOT NULL
        )""",
    ],
    [
        # Version 12: as for SQLite, LLM rate limits.
        """CREATE TABLE tether_llm_limits (
            name text PRIMARY KEY,
            window_start double precision NOT NULL,
            requests integer NOT NULL,
            tokens bigint NOT NULL,
            blocked_until double precision NOT NULL
        )""",
    ],
    [
        # Version 13: as for SQLite, searching executions and access tokens. Prefixes are
        # compared in the "C" collation (byte order, whatever the database's default), so
        # the indexes they use are on that collation: root_path's (a root path's equality
        # is compared in it too, to use them), and one of id besides its primary key's,
        # which has the database's default.
        "CREATE INDEX tether_executions_by_status_created ON tether_executions (status, created_at, id)",
        ('CREATE INDEX tether_executions_by_root_version ON tether_executions '
         '(root_path COLLATE "C", version, created_at, id)'),
        'CREATE INDEX tether_executions_by_root ON tether_executions (root_path COLLATE "C", created_at, id)',
        "CREATE INDEX tether_executions_by_version ON tether_executions (version, created_at, id)",
        'CREATE INDEX tether_executions_by_id_prefix ON tether_executions (id COLLATE "C")',
        """CREATE TABLE tether_tokens (
            digest text PRIMARY KEY,
            name text NOT NULL,
            scopes json NOT NULL,
            paths json NOT NULL,
            created_at timestamptz NOT NULL,
            revoked_at timestamptz
        )""",
        "CREATE UNIQUE INDEX tether_tokens_live ON tether_tokens (name) WHERE revoked_at IS NULL",
    ],
    [
        # Version 14: as for SQLite, pending interrupts by path, in the "C" collation its
        # prefix ranges are compared in.
        'CREATE INDEX tether_pending_by_path ON tether_pending (path COLLATE "C", created_at, execution_id)',
    ],
]
