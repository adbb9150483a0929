"""The tether actor runtime: mailbox actors under anyio task groups, supervised and journaled.

```python
from tether.runtime import Actor, Runtime

async with Runtime(store) as rt:
    ref = await rt.spawn(AccountActor, "42", durable=True)
    print(await ref.ask(Deposit(amount=5)))
```

Every exception tether raises on purpose is importable from here:

```
TetherError
├── StoreError                 (defined by tether.stores, which raises them)
│   ├── StoreUnavailable       the database cannot be reached or used; __cause__ is the driver error
│   ├── StoreNotFound          no tether store where one was expected (nothing was created)
│   ├── StoreCorrupted         the file or schema is not a tether store, or is damaged
│   ├── SchemaVersionError     the database's schema is not the one this tether writes
│   ├── ExecutionNotFound      no execution with that id
│   ├── ExecutionFinished      the execution is completed, failed, cancelled or timed out
│   ├── NotFailed              a retry of an execution that did not fail
│   ├── LeaseHeld              another live process holds the execution's lease
│   ├── StaleLease             a write fenced out: the lease was taken over
│   ├── AlreadyResumed         the pending interrupt was claimed by someone else
│   ├── NoPendingInterrupt     nothing is pending at that path
│   └── DuplicateInterrupt     a pending interrupt already exists at that path
├── ActorError (.path)         (defined by the kernel, which raises them)
│   ├── ActorNotFound          no actor at that path in the execution's journal (a state query)
│   ├── ActorStopped           the actor was stopped on purpose; it takes no more messages
│   ├── ActorCrashed           the actor's handler raised; __cause__ is the original error
│   └── SupervisionEscalated   children kept crashing past the restart intensity
├── StepTimeout (also TimeoutError)   a node, tool or LLM call ran past its timeout=; .path, .seconds
├── SerializationError (also ValueError)   a value is not JSON
├── ConfigurationError (also ValueError)   a bad URL, option, argument or definition
│   └── MigrationFailed        a migration function raised, or left a misfit; nothing changed
└── UsageError (also RuntimeError)         the API was used out of order
```

Apart from the tree, `Suspension` (a BaseException, so that ``except Exception``
in a tool cannot swallow it) is how ``interrupt()`` and durable timers pause an
actor tree; a runtime never lets one reach its caller.
"""

from tether.stores import (
    AlreadyResumed as AlreadyResumed,
    ConfigurationError as ConfigurationError,
    DuplicateInterrupt as DuplicateInterrupt,
    ExecutionFinished as ExecutionFinished,
    ExecutionNotFound as ExecutionNotFound,
    LeaseHeld as LeaseHeld,
    NoPendingInterrupt as NoPendingInterrupt,
    NotFailed as NotFailed,
    PendingInterrupt as PendingInterrupt,
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

from ._core.actor import Actor as Actor, ActorContext as ActorContext, NoState as NoState
from ._core.errors import (
    ActorCrashed as ActorCrashed,
    ActorError as ActorError,
    ActorNotFound as ActorNotFound,
    ActorStopped as ActorStopped,
    StepTimeout as StepTimeout,
    SupervisionEscalated as SupervisionEscalated,
)
from ._core.events import (
    Checkpoint as Checkpoint,
    Delegation as Delegation,
    Dropped as Dropped,
    Event as Event,
    ExecutionCancelled as ExecutionCancelled,
    ExecutionCompleted as ExecutionCompleted,
    ExecutionFailed as ExecutionFailed,
    ExecutionPaused as ExecutionPaused,
    ExecutionResumed as ExecutionResumed,
    ExecutionStarted as ExecutionStarted,
    ExecutionTimedOut as ExecutionTimedOut,
    Handoff as Handoff,
    Interrupted as Interrupted,
    LLMTurn as LLMTurn,
    MessageAccepted as MessageAccepted,
    MessageHandled as MessageHandled,
    NodeFinished as NodeFinished,
    NodeStarted as NodeStarted,
    Reply as Reply,
    Sleeping as Sleeping,
    TokenDelta as TokenDelta,
    ToolCalled as ToolCalled,
    ToolResult as ToolResult,
    emit as emit,
    following as following,
    read_event as read_event,
)
from ._core.execution import RunResult as RunResult, Start as Start
from ._core.idempotent import (
    current_store as current_store,
    idempotency_key as idempotency_key,
    idempotent as idempotent,
)
from ._core.interrupt import (
    Resume as Resume,
    Suspension as Suspension,
    call_scope as call_scope,
    interrupt as interrupt,
)
from ._core.messages import wait_for as wait_for
from ._core.patching import patched as patched
from ._core.policies import RestartPolicy as RestartPolicy, SupervisionStrategy as SupervisionStrategy
from ._core.ref import ActorRef as ActorRef
from ._core.retry import RetryPolicy as RetryPolicy
from ._core.shielding import shielded as shielded
from ._core.timers import sleep as sleep, sleep_until as sleep_until
from ._core.version import __version__ as __version__
from ._executions.blocking import BlockingRuntime as BlockingRuntime, blocking as blocking
from ._executions.control import cancel as cancel, send_message as send_message
from ._executions.history import Boundary as Boundary, fork as fork, history as history
from ._executions.migration import (
    Migrated as Migrated,
    Migration as Migration,
    MigrationFailed as MigrationFailed,
    migrate as migrate,
)
from ._executions.query import ActorState as ActorState, query as query
from ._executions.queues import Queue as Queue, Rate as Rate
from ._executions.retention import Retention as Retention
from ._executions.runner import Runner as Runner
from ._executions.runtime import Runtime as Runtime
from ._executions.schedules import Schedule as Schedule
from ._executions.service import Executions as Executions
from ._executions.stream import EventStream as EventStream, events as events
from ._executions.worker import ExecutionWorker as ExecutionWorker, serve_executions as serve_executions

__all__ = (
    "Actor",
    "ActorContext",
    "ActorCrashed",
    "ActorError",
    "ActorNotFound",
    "ActorRef",
    "ActorState",
    "ActorStopped",
    "AlreadyResumed",
    "BlockingRuntime",
    "Boundary",
    "Checkpoint",
    "ConfigurationError",
    "Delegation",
    "Dropped",
    "DuplicateInterrupt",
    "Event",
    "EventStream",
    "ExecutionCancelled",
    "ExecutionCompleted",
    "ExecutionFailed",
    "ExecutionFinished",
    "ExecutionNotFound",
    "ExecutionPaused",
    "ExecutionResumed",
    "ExecutionStarted",
    "ExecutionTimedOut",
    "ExecutionWorker",
    "Queue",
    "Rate",
    "Retention",
    "Schedule",
    "Executions",
    "Handoff",
    "Interrupted",
    "LLMTurn",
    "LeaseHeld",
    "MessageAccepted",
    "MessageHandled",
    "Migrated",
    "Migration",
    "MigrationFailed",
    "NoPendingInterrupt",
    "NoState",
    "NotFailed",
    "NodeFinished",
    "NodeStarted",
    "PendingInterrupt",
    "Reply",
    "RestartPolicy",
    "Resume",
    "RetryPolicy",
    "RunResult",
    "Runner",
    "Runtime",
    "SchemaVersionError",
    "SerializationError",
    "Sleeping",
    "StaleLease",
    "Start",
    "StepTimeout",
    "StoreCorrupted",
    "StoreError",
    "StoreNotFound",
    "StoreUnavailable",
    "SupervisionEscalated",
    "SupervisionStrategy",
    "Suspension",
    "TetherError",
    "TokenDelta",
    "ToolCalled",
    "ToolResult",
    "UsageError",
    "blocking",
    "call_scope",
    "cancel",
    "emit",
    "events",
    "following",
    "fork",
    "history",
    "current_store",
    "idempotency_key",
    "idempotent",
    "interrupt",
    "migrate",
    "patched",
    "query",
    "read_event",
    "send_message",
    "serve_executions",
    "shielded",
    "sleep",
    "sleep_until",
    "wait_for",
    "__version__",
)

# Public names say where users import them from (in reprs, in docs, and in the decision
# types a journal names), not which private module of this release defines them.
for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _name, _obj
