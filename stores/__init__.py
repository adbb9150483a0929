"""Persistence for tether: the `Store` contract and its SQLite, Postgres and memory stores.

```python
from tether.stores import SQLiteStore

async with SQLiteStore("app.db") as store:
    for pending in await store.list_pending():
        print(pending.agent_path, pending.reason)
```
"""

from ._errors import (
    AlreadyResumed as AlreadyResumed,
    ConfigurationError as ConfigurationError,
    DuplicateInterrupt as DuplicateInterrupt,
    ExecutionFinished as ExecutionFinished,
    ExecutionNotFound as ExecutionNotFound,
    LeaseHeld as LeaseHeld,
    NoPendingInterrupt as NoPendingInterrupt,
    NotFailed as NotFailed,
    SchemaVersionError as SchemaVersionError,
    SerializationError as SerializationError,
    StaleLease as StaleLease,
    StoreCorrupted as StoreCorrupted,
    StoreError as StoreError,
    StoreNotFound as StoreNotFound,
    StoreUnavailable as StoreUnavailable,
    TetherError as TetherError,
    UsageError as UsageError,
)
from ._memory import MemoryStore as MemoryStore
from ._models import (
    MAX_PRIORITY as MAX_PRIORITY,
    CatchUp as CatchUp,
    EntryKind as EntryKind,
    Execution as Execution,
    ExecutionSearch as ExecutionSearch,
    ExecutionStatus as ExecutionStatus,
    IdempotencyRecord as IdempotencyRecord,
    JournalEntry as JournalEntry,
    Json as Json,
    Lease as Lease,
    NewEntry as NewEntry,
    NewExecution as NewExecution,
    NewInterrupt as NewInterrupt,
    PendingInterrupt as PendingInterrupt,
    QueueLimits as QueueLimits,
    QueueStats as QueueStats,
    ScheduleRow as ScheduleRow,
    StartResult as StartResult,
    ThreadSummary as ThreadSummary,
    TokenRow as TokenRow,
)
from ._postgres import PostgresStore as PostgresStore
from ._protocol import SCHEMA_VERSION as SCHEMA_VERSION, Listener as Listener, Store as Store
from ._sqlite import SQLiteStore as SQLiteStore
from ._url import open_store as open_store
from ._watch import JournalWatch as JournalWatch

__all__ = (
    "MAX_PRIORITY",
    "SCHEMA_VERSION",
    "AlreadyResumed",
    "CatchUp",
    "ConfigurationError",
    "DuplicateInterrupt",
    "EntryKind",
    "Execution",
    "ExecutionSearch",
    "ExecutionFinished",
    "ExecutionNotFound",
    "ExecutionStatus",
    "IdempotencyRecord",
    "JournalEntry",
    "JournalWatch",
    "Json",
    "Lease",
    "LeaseHeld",
    "Listener",
    "MemoryStore",
    "NewEntry",
    "NewExecution",
    "NewInterrupt",
    "NoPendingInterrupt",
    "NotFailed",
    "PendingInterrupt",
    "PostgresStore",
    "QueueLimits",
    "QueueStats",
    "ScheduleRow",
    "SQLiteStore",
    "SchemaVersionError",
    "SerializationError",
    "StaleLease",
    "StartResult",
    "Store",
    "StoreCorrupted",
    "StoreNotFound",
    "StoreError",
    "StoreUnavailable",
    "TetherError",
    "ThreadSummary",
    "TokenRow",
    "UsageError",
)

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj
