"""`Runtime`: owns the task group that every actor of an application runs in."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Self

import anyio
from tether.stores import Store, UsageError

from ._journal import PROCESS_OWNER
from ._supervision import Group, Settings
from ._supervision_types import RestartPolicy, SupervisionStrategy

if TYPE_CHECKING:
    from types import TracebackType

    from ._actor import ActorFactory
    from ._ref import ActorRef


class Runtime:
    """The root of an actor tree, embedded in an application's own lifetime.

    Constructing a runtime starts nothing. ``async with Runtime(store) as rt:``
    opens its task group; leaving the block stops every actor, children before
    parents, last started first. It works the same under asyncio and trio.

    Args:
        store: Where durable actors journal. Not needed if no actor is durable.
            The runtime opens it but leaves closing it to its owner.
        mailbox_size: How many messages a mailbox holds before ``send`` waits.
        lease_seconds: How long a durable actor's lease lasts without renewal;
            another process can take the actor over that long after this one dies.
        snapshot_every: A durable actor snapshots its state every this many messages.
        max_restarts, within: Restart intensity of the top-level actors.

    Example:
        ```python
        async with Runtime(SQLiteStore("bank.db")) as rt:
            account = await rt.spawn(AccountActor, "42", durable=True)
            await account.send(Deposit(amount=100))
        ```
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        mailbox_size: int = 1000,
        lease_seconds: float = 30.0,
        snapshot_every: int = 100,
        max_restarts: int = 3,
        within: float = 5.0,
    ) -> None:
        self.store = store
        # Each runtime is its own lease owner, so two runtimes in one process exclude each other.
        owner = f"{PROCESS_OWNER}/{uuid.uuid4().hex[:8]}"
        self._settings = Settings(store, mailbox_size, lease_seconds, snapshot_every, owner)
        self._max_restarts = max_restarts
        self._within = within
        self._stack: AsyncExitStack | None = None
        self._root: Group | None = None
        self._used = False

    async def __aenter__(self) -> Self:
        if self._used:
            raise UsageError("A Runtime can be entered once. Create a new Runtime to run again.")
        self._used = True
        if self.store is not None:
            await self.store.setup()
        stack = AsyncExitStack()
        try:
            tg = await stack.enter_async_context(anyio.create_task_group())
            root = Group(tg, "", SupervisionStrategy.ONE_FOR_ONE, self._max_restarts, self._within,
                         self._settings)
        except BaseException:
            await stack.aclose()
            raise
        self._stack, self._root = stack, root
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, root = self._stack, self._root
        assert stack is not None
        assert root is not None
        self._root = None
        try:
            with anyio.CancelScope(shield=True):
                await root.stop_all()
        finally:
            root.close()
            root._tg.cancel_scope.cancel()
            suppressed = await stack.__aexit__(exc_type, exc, tb)
        return suppressed

    async def spawn(
        self,
        factory: ActorFactory,
        name: str,
        *,
        durable: bool = False,
        execution_id: str | None = None,
        restart: RestartPolicy = "permanent",
        shutdown_timeout: float = 5.0,
    ) -> ActorRef:
        """Start a top-level actor and return its ref once it is ready.

        Args:
            factory: The Actor subclass (or a zero-argument callable returning an actor).
            name: Its name; the path is ``<kind>:<name>``.
            durable: Journal every message boundary in the store, restore from it on
                restart and in later processes, and hold a lease so that only one
                process runs it.
            execution_id: The durable actor's execution id (default: its path).
            restart: When it is restarted after it stops (see `RestartPolicy`).
            shutdown_timeout: Seconds it gets to finish its message when stopped.

        Raises:
            LeaseHeld: A durable actor that another live process runs.
            UsageError: The runtime is not running.
        """
        if self._root is None:
            raise UsageError(
                "Cannot spawn: the runtime is not running. Spawn inside 'async with Runtime(...) as rt:'."
            )
        return await self._root.start_child(factory, name, restart=restart, shutdown_timeout=shutdown_timeout,
                                            durable=durable, execution_id=execution_id)
