"""Find or start a PostgreSQL server for the test run, and give the run its own database.

Order: ``TETHER_TEST_POSTGRES_DSN``; a server answering on 127.0.0.1:5432; a
throwaway server from the ``pgserver`` wheel. If none can be had the run fails
with a message saying how to provide one: a Postgres test is never skipped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import tempfile
import threading
import time
import uuid
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import asyncpg

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_LOCAL = "postgresql://postgres@127.0.0.1:5432/postgres"
_HELP = (
    "No PostgreSQL server for the tests. Set TETHER_TEST_POSTGRES_DSN to an admin DSN, "
    "start one on 127.0.0.1:5432, or `pip install pgserver` (in the test extra) so the "
    "tests can start a throwaway one."
)


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def admin_dsn() -> Iterator[str]:
    """Yield a DSN with the right to create databases."""
    if dsn := os.environ.get("TETHER_TEST_POSTGRES_DSN"):
        yield dsn
        return
    if not os.environ.get("TETHER_TEST_FORCE_PGSERVER") and _answers("127.0.0.1", 5432):
        yield _LOCAL
        return
    with tempfile.TemporaryDirectory(prefix="tether-pg-") as data:
        with warnings.catch_warnings():
            # platformdirs warns, on import, when XDG_RUNTIME_DIR is unset (root in CI).
            warnings.simplefilter("ignore")
            try:
                import pgserver
            except ImportError as exc:
                raise RuntimeError(_HELP) from exc
            server: Any = pgserver.get_server(data, cleanup_mode="stop")
        try:
            yield server.get_uri()
        finally:
            server.cleanup()


def _pgserver() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, on import, about XDG_RUNTIME_DIR
        import pgserver
    return pgserver


@contextmanager
def restartable_server() -> Iterator[tuple[str, Callable[[float], None]]]:
    """A Postgres server of the caller's own (pgserver), and a function that stops it for a time.

    ``restart(down_for)`` stops the server, waits ``down_for`` seconds (the outage's
    length is the fault itself) and starts it again on the same data. The data lives
    in a directory of its own, not under pytest's tmp_path: as root, pgserver runs the
    server as another user, who cannot enter pytest's 0700 /tmp/pytest-of-root.
    """
    pgserver = _pgserver()
    with tempfile.TemporaryDirectory(prefix="tether-pg-") as holder:
        data = os.path.join(holder, "pgdata")
        servers = [pgserver.get_server(data, cleanup_mode="stop")]

        def restart(down_for: float) -> None:
            servers[-1].cleanup()
            time.sleep(down_for)  # the outage itself
            servers.append(pgserver.get_server(data, cleanup_mode="stop"))

        try:
            yield servers[0].get_uri(), restart
        finally:
            servers[-1].cleanup()


def with_database(dsn: str, name: str) -> str:
    """The same server and credentials, another database."""
    base, _, query = dsn.partition("?")
    head, _, _ = base.rpartition("/")
    return f"{head}/{name}" + (f"?{query}" if query else "")


@contextmanager
def test_database() -> Iterator[str]:
    """Create a database for this run, yield its DSN, drop it afterwards."""
    with admin_dsn() as admin:
        name = f"tether_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"

        try:
            admin_sql(admin, f'CREATE DATABASE "{name}"')
        except (OSError, asyncpg.PostgresError) as exc:
            raise RuntimeError(f"{_HELP} (tried {admin}: {exc})") from exc
        try:
            yield with_database(admin, name)
        finally:
            admin_sql(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def admin_sql(dsn: str, sql: str, *args: Any) -> list[Any]:
    """Run one statement on a fresh connection, from any thread or event loop."""

    async def run() -> list[Any]:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            return list(await conn.fetch(sql, *args))
        finally:
            await conn.close()

    # A thread of its own, so a test already inside an event loop can call it.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


@contextmanager
def holding_lock(dsn: str, schema: str, *statements: str) -> Iterator[threading.Event]:
    """Run ``statements`` in a transaction on another connection and keep it open.

    Yields an event; set it to commit and let the blocked statements go.
    """
    ready, release = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    async def hold() -> None:
        conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
        try:
            async with conn.transaction():
                for statement in statements:
                    await conn.execute(statement)
                ready.set()
                await asyncio.to_thread(release.wait)
        finally:
            await conn.close()

    def run() -> None:
        try:
            asyncio.run(hold())
        except BaseException as exc:
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=run)
    thread.start()
    ready.wait(30)
    try:
        if failure:
            raise failure[0]
        yield release
    finally:
        release.set()
        thread.join(30)


def backends_waiting_on_locks(dsn: str) -> int:
    """How many sessions of this database wait for a lock right now."""
    rows = admin_sql(
        dsn,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'",
    )
    return int(rows[0][0])


def admin_script(dsn: str, script: str) -> None:
    """Run several statements (one simple query) on a fresh connection, from any thread or event loop."""

    async def run() -> None:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            await conn.execute(script)
        finally:
            await conn.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()
