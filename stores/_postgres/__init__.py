"""The Postgres store: `store` (`PostgresStore`, one statement per write) and `pool` (its connections)."""

from .store import PostgresListener as PostgresListener, PostgresStore as PostgresStore

__all__ = ("PostgresListener", "PostgresStore")
