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
)
from ._errors import (
    ConfigurationError as ConfigurationError,
)
from ._errors import (
    DuplicateInterrupt as DuplicateInterrupt,
)
from ._errors import (
    ExecutionFinished as ExecutionFinished,
)
from ._errors import (
    ExecutionNotFound as ExecutionNotFound,
)
from ._errors import (
    LeaseHeld as LeaseHeld,
)
from ._errors import (
    NoPendingInterrupt as NoPendingInterrupt,
)
from ._errors import (
    SchemaVersionError as SchemaVersionError,
)
from ._errors import (
    SerializationError as SerializationError,
)
from ._errors import (
    StaleLease as StaleLease,
)
from ._errors import (
    StoreCorrupted as StoreCorrupted,
)
from ._errors import (
    StoreError as StoreError,
)
from ._errors import (
    StoreUnavailable as StoreUnavailable,
)
from ._errors import (
    TetherError as TetherError,
)
from ._errors import (
    UsageError as UsageError,
)
from ._memory import MemoryStore as MemoryStore
from ._models import (
    EntryKind as EntryKind,
)
from ._models import (
    Execution as Execution,
)
from ._models import (
    ExecutionStatus as ExecutionStatus,
)
from ._models import (
    IdempotencyRecord as IdempotencyRecord,
)
from ._models import (
    JournalEntry as JournalEntry,
)
from ._models import (
    Lease as Lease,
)
from ._models import (
    NewEntry as NewEntry,
)
from ._models import (
    NewExecution as NewExecution,
)
from ._models import (
    NewInterrupt as NewInterrupt,
)
from ._models import (
    PendingInterrupt as PendingInterrupt,
)
from ._models import (
    StartResult as StartResult,
)
from ._postgres import PostgresStore as PostgresStore
from ._protocol import SCHEMA_VERSION as SCHEMA_VERSION
from ._protocol import Store as Store
from ._sqlite import SQLiteStore as SQLiteStore
from ._url import open_store as open_store

__all__ = (
    "SCHEMA_VERSION",
    "AlreadyResumed",
    "ConfigurationError",
    "DuplicateInterrupt",
    "EntryKind",
    "Execution",
    "ExecutionFinished",
    "ExecutionNotFound",
    "ExecutionStatus",
    "IdempotencyRecord",
    "JournalEntry",
    "Lease",
    "LeaseHeld",
    "MemoryStore",
    "NewEntry",
    "NewExecution",
    "NewInterrupt",
    "NoPendingInterrupt",
    "PendingInterrupt",
    "PostgresStore",
    "SQLiteStore",
    "SchemaVersionError",
    "SerializationError",
    "StaleLease",
    "StartResult",
    "Store",
    "StoreCorrupted",
    "StoreError",
    "StoreUnavailable",
    "TetherError",
    "UsageError",
)

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "."):
        _obj.__module__ = __name__
del _name, _obj
