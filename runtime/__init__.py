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

from ._actor import Actor as Actor
from ._actor import ActorContext as ActorContext
from ._actor import NoState as NoState
from ._errors import (
    ActorCrashed as ActorCrashed,
)
from ._errors import (
    ActorError as ActorError,
)
from ._errors import (
    ActorNotFound as ActorNotFound,
)
from ._errors import (
    ActorStopped as ActorStopped,
)
from ._errors import (
    SupervisionEscalated as SupervisionEscalated,
)
from ._idempotent import idempotency_key as idempotency_key
from ._idempotent import idempotent as idempotent
from ._ref import ActorRef as ActorRef
from ._runtime import Runtime as Runtime
from ._supervision_types import RestartPolicy as RestartPolicy
from ._supervision_types import SupervisionStrategy as SupervisionStrategy
from ._version import __version__ as __version__

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
    "LeaseHeld",
    "NoPendingInterrupt",
    "NoState",
    "RestartPolicy",
    "Runtime",
    "SerializationError",
    "StaleLease",
    "StoreError",
    "StoreUnavailable",
    "SupervisionEscalated",
    "SupervisionStrategy",
    "TetherError",
    "UsageError",
    "__version__",
    "idempotency_key",
    "idempotent",
)
