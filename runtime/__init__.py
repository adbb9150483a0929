"""The tether actor runtime: mailbox actors under anyio task groups, supervised and journaled.

```python
from tether.runtime import Actor, Runtime

async with Runtime(store) as rt:
    ref = await rt.spawn(AccountActor, "42", durable=True)
    print(await ref.ask(Deposit(amount=5)))
```
"""

from tether.stores import (
    AlreadyResumed as AlreadyResumed,
    ConfigurationError as ConfigurationError,
    ExecutionFinished as ExecutionFinished,
    ExecutionNotFound as ExecutionNotFound,
    LeaseHeld as LeaseHeld,
    NoPendingInterrupt as NoPendingInterrupt,
    PendingInterrupt as PendingInterrupt,
    SerializationError as SerializationError,
    StaleLease as StaleLease,
    StoreError as StoreError,
    StoreNotFound as StoreNotFound,
    StoreUnavailable as StoreUnavailable,
    TetherError as TetherError,
    UsageError as UsageError,
)

from ._actor import Actor as Actor, ActorContext as ActorContext, NoState as NoState
from ._errors import (
    ActorCrashed as ActorCrashed,
    ActorError as ActorError,
    ActorNotFound as ActorNotFound,
    ActorStopped as ActorStopped,
    SupervisionEscalated as SupervisionEscalated,
)
from ._execution import RunResult as RunResult, Start as Start
from ._idempotent import idempotency_key as idempotency_key, idempotent as idempotent
from ._interrupt import (
    Resume as Resume,
    Suspension as Suspension,
    call_scope as call_scope,
    interrupt as interrupt,
)
from ._ref import ActorRef as ActorRef
from ._runtime import Runtime as Runtime
from ._supervision_types import RestartPolicy as RestartPolicy, SupervisionStrategy as SupervisionStrategy
from ._timers import sleep as sleep, sleep_until as sleep_until
from ._version import __version__ as __version__
from ._worker import ExecutionWorker as ExecutionWorker, serve_executions as serve_executions

__all__ = (
    "Actor",
    "ActorContext",
    "ActorCrashed",
    "ActorError",
    "ActorNotFound",
    "ActorRef",
    "ActorStopped",
    "AlreadyResumed",
    "ConfigurationError",
    "ExecutionFinished",
    "ExecutionNotFound",
    "ExecutionWorker",
    "LeaseHeld",
    "NoPendingInterrupt",
    "NoState",
    "PendingInterrupt",
    "RestartPolicy",
    "Resume",
    "RunResult",
    "Runtime",
    "SerializationError",
    "StaleLease",
    "Start",
    "StoreError",
    "StoreNotFound",
    "StoreUnavailable",
    "SupervisionEscalated",
    "SupervisionStrategy",
    "Suspension",
    "TetherError",
    "UsageError",
    "__version__",
    "call_scope",
    "idempotency_key",
    "idempotent",
    "interrupt",
    "serve_executions",
    "sleep",
    "sleep_until",
)
