"""Errors of the actor runtime, under the same root as the store's (`tether.stores`).

```
TetherError
└── ActorError  (.path)
    ├── ActorStopped        the actor was stopped on purpose; it takes no more messages
    ├── ActorCrashed        the actor's handler raised; __cause__ is the original error
    └── SupervisionEscalated  children kept crashing past the restart intensity
```
"""

from __future__ import annotations

from tether.stores import TetherError


class ActorError(TetherError):
    """Something went wrong with the actor at ``path``."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(message)


class ActorStopped(ActorError):
    """The actor was stopped on purpose and takes no more messages."""

    def __init__(self, path: str) -> None:
        super().__init__(
            path, f"Actor {path!r} is stopped and takes no more messages. Spawn it again to use it."
        )


class ActorCrashed(ActorError):
    """The actor's handler raised while handling this message; see ``__cause__``."""

    def __init__(self, path: str, error: BaseException) -> None:
        super().__init__(
            path, f"Actor {path!r} crashed handling the message: {type(error).__name__}: {error}"
        )
        self.__cause__: BaseException | None = error  # however it is raised, the handler's error comes with it


class SupervisionEscalated(ActorError):
    """Children crashed more often than the restart intensity allows."""

    def __init__(self, path: str, restarts: int, within: float) -> None:
        self.restarts = restarts
        self.within = within
        super().__init__(
            path,
            f"The children of {path!r} crashed more than {restarts} times within {within}s, so "
            f"they were stopped and the failure passed to the parent. Fix the crash, or raise "
            f"max_restarts if it is transient.",
        )
