"""The tether actor runtime.

This release ships the store layer (`tether.stores`); the runtime re-exports the
errors an application catches, so ``from tether.runtime import AlreadyResumed``
keeps working as the kernel grows around it.
"""

from tether.stores import (
    AlreadyResumed as AlreadyResumed,
    ConfigurationError as ConfigurationError,
    ExecutionFinished as ExecutionFinished,
    ExecutionNotFound as ExecutionNotFound,
    LeaseHeld as LeaseHeld,
    NoPendingInterrupt as NoPendingInterrupt,
    SerializationError as SerializationError,
    StaleLease as StaleLease,
    StoreError as StoreError,
    StoreUnavailable as StoreUnavailable,
    TetherError as TetherError,
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
