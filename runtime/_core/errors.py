"""Errors of the actor runtime, under the same root as the store's (`tether.stores`).

```
TetherError
├── ActorError  (.path)
│   ├── ActorNotFound       no actor at that path in the execution's journal (.execution_id, .actors)
│   ├── ActorStopped        the actor was stopped on purpose; it takes no more messages
│   ├── ActorCrashed        the actor's handler raised; __cause__ is the original error
│   └── SupervisionEscalated  children kept crashing past the restart intensity
└── StepTimeout (.path, .seconds; also TimeoutError)  a step ran past its timeout= and was cancelled
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.stores import TetherError

if TYPE_CHECKING:
    from collections.abc import Iterable

_SHOWN = 10
"""How many actor paths an `ActorNotFound` message lists before it says how many more there are."""


class ActorError(TetherError):
    """Something went wrong with the actor at ``path``."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(message)


class ActorNotFound(ActorError):
    """The execution's journal has no actor at ``path``.

    Attributes:
        execution_id: The execution asked about.
        actors: The actor paths its journal has, sorted.
    """

    def __init__(self, execution_id: str, path: str, actors: Iterable[str]) -> None:
        self.execution_id = execution_id
        self.actors = tuple(sorted(actors))
        shown = ", ".join(repr(actor) for actor in self.actors[:_SHOWN]) or "none yet"
        more = f" (and {len(self.actors) - _SHOWN} more)" if len(self.actors) > _SHOWN else ""
        # A node's or a tool's path names a call made by an actor, not an actor: point at that actor.
        owners = [actor for actor in self.actors if path.startswith(actor + "/")]
        inside = f" {path!r} is a call made by {max(owners, key=len)!r}, not an actor." if owners else ""
        super().__init__(
            path,
            f"Execution {execution_id!r} has no actor {path!r} in its journal.{inside} "
            f"Its actors: {shown}{more}. Give one of those paths "
            f"(`tether history {execution_id}` shows the path of every boundary).",
        )


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


class StepTimeout(TetherError, TimeoutError):
    """A step (a chain node, a tool call, an LLM call) ran past its ``timeout=`` and was cancelled.

    Raised where the step was awaited, so it takes the path any error of that step
    takes: a chain node's fails the execution, a tool's goes back to the LLM as the
    tool's error result, an LLM call's fails the run. Also a `TimeoutError`, as
    anyio's ``fail_after`` raises, for code that catches the builtin.

    Attributes:
        path: The step's call path (``chain:refund/node:charge``, ``agent:bot/tool:lookup``,
            ``agent:bot/turn:3`` for an LLM call).
        seconds: The timeout it overran.
    """

    def __init__(self, path: str, seconds: float, *, setting: str = "timeout") -> None:
        self.path = path
        self.seconds = seconds
        super().__init__(
            f"Step {path!r} did not finish within its {setting}={seconds:g}s and was cancelled. "
            f"Raise {setting}= if it needs longer, or make the step faster."
        )
