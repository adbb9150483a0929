"""The tether actor runtime.

This release ships the store layer (`tether.stores`); the runtime re-exports the
errors an application catches, so ``from tether.runtime import AlreadyResumed``
keeps working as the kernel grows around it.
"""

from tether.stores import (
    AlreadyResumed as AlreadyResumed,
)
from tether.stores import (
    ConfigurationError as ConfigurationError,
)
from tether.stores import (
    ExecutionFinished as ExecutionFinished,
)
from tether.stores import (
    ExecutionNotFound as ExecutionNotFound,
)
from tether.stores import (
    LeaseHeld as LeaseHeld,
)
from tether.stores import (
    NoPendingInterrupt as NoPendingInterrupt,
)
from tether.stores import (
    SerializationError as SerializationError,
)
from tether.stores import (
    StaleLease as StaleLease,
)
from tether.stores import (
    StoreError as StoreError,
)
from tether.stores import (
    StoreUnavailable as StoreUnavailable,
)
from tether.stores import (
    TetherError as TetherError,
)
from tether.stores import (
    UsageError as UsageError,
)

from ._version import __version__ as __version__

__all__ = (
    "AlreadyResumed",
    "ConfigurationError",
    "ExecutionFinished",
    "ExecutionNotFound",
    "LeaseHeld",
    "NoPendingInterrupt",
    "SerializationError",
    "StaleLease",
    "StoreError",
    "StoreUnavailable",
    "TetherError",
    "UsageError",
    "__version__",
)
