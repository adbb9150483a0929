"""The SQLite store, in rooms of its own.

- `store`: `SQLiteStore`, its SQL, one function per operation.
- `writes`: `WritePolicy` (where a write runs) and `GroupCommit` (which runs it).
- `_aiosqlite`: the only module that relies on aiosqlite's internals, and says which.
- `opening`, `rows`, `errors`, `check`: a file's setup, the row format, error
  translation and damage, and ``tether doctor``'s scan.
"""

from .store import SQLiteStore as SQLiteStore

__all__ = ("SQLiteStore",)
