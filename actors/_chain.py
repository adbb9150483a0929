"""`Chain`: a durable graph of node functions over one state.

A chain is the root actor of an execution. Each node completion is a durable
step, journaled as ``node:<name>`` with the node's update (never a copy of the
whole state). Routing is recomputed from the journaled updates, so a recovered
run takes the same branches, skips the nodes that finished, and runs the one a
crash interrupted.

Scheduling, deterministic so that a replay makes the same decisions:

- nodes run in rounds; the nodes of a round run concurrently, and every one of
  them settles (finishes, fails or suspends) before the round ends;
- their updates merge into the state in node-name order;
- then every edge out of those nodes, in the order they were added, whose
  ``when(state)`` is true (or that has no ``when``) is followed; an edge with
  ``max_iterations`` is followed at most that many times per execution, then
  counts as false;
- a node with several incoming edges (a join) waits while a node that is ready
  or waiting could still reach it, then runs once.
"""

from __future__ import annotations

import copy
import inspect
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from pydantic import BaseModel, JsonValue
from tether.runtime import Actor, NodeStarted, RetryPolicy, Runner, Start, call_scope, emit, shielded
from tether.stores import ConfigurationError, JournalEntry, Store

from ._control import settled
from ._steps import attempted, step_retry, step_seconds, within

if TYPE_CHECKING:
    from datetime import timedelta

NodeFn = Callable[[Any], Any]
"""A node: a sync or async function of the state returning a dict of updates (or None)."""


@dataclass(frozen=True, eq=False)  # each edge is its own: counted and compared by identity
class _Edge:
    src: str
    dst: str
    when: Callable[[Any], bool] | None
    max_iterations: int | None


class Chain(Runner):
    """A durable graph of nodes; a list of nodes is a line.

    Args:
        name: The chain's name; its path is ``chain:<name>``.
        nodes: Node functions to add in order, joined into a line (`add_node` adds one
            with a ``timeout=``, ``shielded=True`` or ``retry=``).
        store: Where its executions are journaled (``tether serve`` and the CLI
            give their own to the runners they load).
        state: A pydantic model for the state; nodes then receive it typed.
        entry: The first node (default: the first added).
        lease_seconds: How long a crashed run's lease outlives its process.
        version: The version runs start on (``"2"``); a run continues on the version it
            started on when that is loaded (docs/versions.md). Default: none.

    Example:
        ```python
        chain = Chain("refund", [validate, approve_refund, charge, notify], store=SQLiteStore("app.db"))
        result = await chain.run({"amount": 50_000}, execution_id="refund-abc")
        result = await chain.resume("refund-abc", Resume(approved=True))
        ```
    """

    def __init__(
        self,
        name: str,
        nodes: Sequence[NodeFn] = (),
        *,
        store: Store | None = None,
        state: type[BaseModel] | None = None,
        entry: str | None = None,
        lease_seconds: float = 30.0,
        version: str | None = None,
    ) -> None:
        self.name: str = self._named("chain", name)
        self.store = store
        self.state_model = state
        self.lease_seconds = lease_seconds
        self.version = self._versioned(version)
        self._entry = entry
        self._nodes: dict[str, NodeFn] = {}
        self._async: dict[str, bool] = {}  # per node: called on the loop, or in a worker thread
        self._timeouts: dict[str, float] = {}  # the nodes that have a timeout, in seconds
        self._shielded: set[str] = set()
        self._retries: dict[str, RetryPolicy] = {}  # the nodes that are retried, and how
        self._edges: list[_Edge] = []
        self._edge_keys: set[tuple[str, str, object, int | None]] = set()  # to refuse an identical edge
        previous = None
        for fn in nodes:
            current = self.add_node(fn)
            if previous is not None:
                self.add_edge(previous, current)
            previous = current
        self._actor = type(f"Chain[{name}]", (_ChainActor,), {"kind": "chain", "chain": self})

    def add_node(
        self,
        fn: NodeFn,
        name: str | None = None,
        *,
        timeout: float | timedelta | None = None,
        shielded: bool = False,
        retry: RetryPolicy | None = None,
    ) -> str:
        """Add a node; its name defaults to the function's. Returns the name.

        Args:
            fn: The node: a sync or async function of the state returning a dict of updates (or None).
            name: The node's name, unique in the chain; its path is ``chain:<chain>/node:<name>``.
            timeout: Seconds (or a ``timedelta``) one run of an async node may take. A node
                that overruns is cancelled at its next ``await`` and fails the execution with
                `StepTimeout`. Each run gets the whole timeout: a node that pauses
                (``interrupt()``) and runs again on resume starts afresh. Sync nodes run in a
                worker thread, which cannot be stopped, so they refuse it: make the node
                async, or give its blocking call a timeout of its own.
            shielded: Run the node inside `tether.runtime.shielded`: a cancel of the execution,
                its deadline, or a process shutting down waits until the node has finished
                and its update is journaled, then takes effect. For a node that must not stop
                half-way (a transfer and its record). A shielded node cannot have a timeout.
            retry: Run the node again when it fails with an error this `RetryPolicy`
                retries, sync or async, after a durable backoff: each failure and the time
                of the next attempt are journaled, and the run waits with no lease held,
                so a crash during the wait neither resets nor repeats an attempt. Each
                attempt gets the whole ``timeout``. A pause (``interrupt()``) is never
                retried. Once the attempts are used up the node's last error fails the
                execution, as without a policy. Default: no retries.

        Raises:
            ConfigurationError: The name is taken or not a valid name; ``timeout`` is not
                positive, is given to a sync node, or is given with ``shielded=True``;
                ``retry`` is not a `RetryPolicy`.

        Example:
            ```python
            chain = Chain("refund", [validate], store=store)
            chain.add_node(fetch_quote, timeout=30,     # async: cancelled after 30 s,
                           retry=RetryPolicy(max_attempts=5, initial=2))  # then tried again, 4 times at most
            chain.add_node(charge, shielded=True)       # a cancel waits for it
            chain.add_edge("validate", "fetch_quote")
            chain.add_edge("fetch_quote", "charge")
            ```
        """
        node = name or getattr(fn, "__name__", None)
        if node in self._nodes:
            raise ConfigurationError(
                f"Cannot add node {node!r} to chain {self.name!r}: node names must be unique, and it "
                f"has one of that name. Pass name= to add the same function twice."
            )
        node = self._named("node", node)  # type: ignore[arg-type]
        is_async = inspect.iscoroutinefunction(fn)
        step = f"node {node!r} of chain {self.name!r}"
        seconds = step_seconds(timeout, step, is_async=is_async, shielded=shielded)
        policy = step_retry(retry, step)
        self._nodes[node] = fn
        self._async[node] = is_async
        if seconds is not None:
            self._timeouts[node] = seconds
        if shielded:
            self._shielded.add(node)
        if policy is not None:
            self._retries[node] = policy
        return node

    def add_edge(
        self,
        src: str,
        dst: str,
        when: Callable[[Any], bool] | None = None,
        max_iterations: int | None = None,
    ) -> None:
        """Follow ``src -> dst`` after ``src`` runs, when ``when(state)`` is true.

        An edge that closes a cycle needs ``max_iterations``: it is followed at most
        that many times per execution, then counts as false.
        """
        for node in (src, dst):
            if node not in self._nodes:
                raise ConfigurationError(f"Chain {self.name!r} has no node {node!r}; add_node() it first.")
        if max_iterations is not None and max_iterations < 0:
            raise ConfigurationError(f"max_iterations={max_iterations} must be 0 or more.")
        key = (src, dst, when, max_iterations)  # a function compares by identity
        if key in self._edge_keys:
            raise ConfigurationError(
                f"Chain {self.name!r} already has the edge {src} -> {dst} with this condition and bound. "
                f"Add it once (a second copy would be followed as another edge)."
            )
        self._edge_keys.add(key)
        self._edges.append(_Edge(src, dst, when, max_iterations))

    def shape(self) -> dict[str, Any]:
        return {f"node:{node}": None for node in self._nodes}  # below a node: what its function calls

    def misfit(self, journal: Sequence[JournalEntry]) -> str | None:
        """As `Runner.misfit`, and the route: the nodes the run went through must still lead to one another.

        From the entry, following this graph's edges through the nodes the journal
        holds only, every one of them must be reached: else replaying would run a
        node the run never ran before one it did (a reordered line, say). Edge
        conditions are code, so every edge counts as one that may be taken.
        """
        problem = super().misfit(journal)
        if problem is not None:
            return problem
        held: set[str] = set()
        mine = f"{self.root_path}/node:"
        for entry in journal:
            if entry.path == self.root_path and entry.label.startswith("node:"):
                held.add(entry.label.removeprefix("node:"))
            elif entry.kind == "suspended" and isinstance(entry.payload, dict):
                waiting = str(entry.payload.get("path", ""))
                if waiting.startswith(mine):
                    held.add(waiting.removeprefix(mine).partition("/")[0].partition("#")[0])
        if not held:
            return None
        reached, frontier = set(), [self.entry] if self.entry in held else []
        while frontier:
            node = frontier.pop()
            if node not in reached:
                reached.add(node)
                frontier += [e.dst for e in self._edges if e.src == node and e.dst in held]
        unreached = sorted(held - reached)
        if unreached:
            return (f"its journal ran node {unreached[0]!r}, which this graph no longer reaches from "
                    f"{self.entry!r} through the nodes the run went through (the route before it changed)")
        return None

    def definition(self) -> Any:
        return {"entry": self.entry if self._nodes else None, "nodes": list(self._nodes),
                "edges": [[e.src, e.dst, e.max_iterations, e.when is not None] for e in self._edges]}

    @property
    def entry(self) -> str:
        """The first node."""
        if self._entry is not None:
            return self._entry
        if not self._nodes:
            raise ConfigurationError(f"Chain {self.name!r} has no nodes.")
        return next(iter(self._nodes))

    def check(self) -> None:
        """Refuse a graph whose cycles are unbounded; `run` calls it."""
        if self.entry not in self._nodes:
            raise ConfigurationError(f"Chain {self.name!r}: entry {self.entry!r} is not a node.")
        # A cycle made only of unbounded edges would run forever. Depth first, without
        # recursion (a line of thousands of nodes is a deep walk).
        graph: dict[str, list[str]] = {node: [] for node in self._nodes}
        for edge in self._edges:
            if edge.max_iterations is None:
                graph[edge.src].append(edge.dst)
        done: set[str] = set()
        for start in self._nodes:
            if start in done:
                continue
            trail = [start]  # the path being walked; on it, every node is still open
            on_trail = {start}
            pending = [iter(graph[start])]
            while pending:
                nxt = next(pending[-1], None)
                if nxt is None:
                    pending.pop()
                    on_trail.discard(node := trail.pop())
                    done.add(node)
                elif nxt in on_trail:
                    cycle = " -> ".join([*trail[trail.index(nxt):], nxt])
                    raise ConfigurationError(
                        f"Chain {self.name!r} has a cycle without a bound: {cycle}. Give the edge that "
                        f"closes it max_iterations (add_edge(src, dst, max_iterations=3))."
                    )
                elif nxt not in done:
                    trail.append(nxt)
                    on_trail.add(nxt)
                    pending.append(iter(graph[nxt]))

    def _input(self, input: Any) -> JsonValue:
        data = input.model_dump(mode="json") if isinstance(input, BaseModel) else input
        if self.state_model is not None:
            data = self.state_model.model_validate(data or {}).model_dump(mode="json")
        return data

    # -- scheduling (runs inside the chain's actor) ----------------------------------

    def _reach(self) -> dict[str, set[str]]:
        """For each node, every node reachable from it."""
        out: dict[str, set[str]] = {n: set() for n in self._nodes}
        for edge in self._edges:
            out[edge.src].add(edge.dst)
        reach: dict[str, set[str]] = {}
        for start in self._nodes:
            seen: set[str] = set()
            stack = list(out[start])
            while stack:
                node = stack.pop()
                if node not in seen:
                    seen.add(node)
                    stack.extend(out[node])
            reach[start] = seen
        return reach


class _ChainActor(Actor[BaseModel]):
    """Runs one execution of its chain: rounds of node steps until nothing is ready."""

    kind = "chain"
    chain: Chain

    async def receive(self, message: Start) -> Any:
        chain = self.chain
        # Its own copy: a node that changes a nested value in place must not reach the input's owner.
        state: dict[str, Any] = copy.deepcopy(message.input) if isinstance(message.input, dict) else {}
        indegree = Counter(edge.dst for edge in chain._edges)
        # Reachability is only asked about joins; a graph without any needs none of it.
        reach = chain._reach() if any(n > 1 for n in indegree.values()) else {}
        out_edges: dict[str, list[_Edge]] = {}
        for edge in chain._edges:  # in the order they were added
            out_edges.setdefault(edge.src, []).append(edge)
        followed: Counter[_Edge] = Counter()
        ready: list[str] = [chain.entry]
        waiting: set[str] = set()
        while ready or waiting:
            if not ready:
                ready, waiting = sorted(waiting), set()
            round_nodes = sorted(set(ready))
            ready = []
            # A lone node with no way on is the run's last: nothing that could fail, or act,
            # runs between its step and the boundary that ends the message, which records it.
            last = (len(round_nodes) == 1 and not waiting and not out_edges.get(round_nodes[0])
                    and chain.state_model is None and round_nodes[0] not in chain._shielded)
            updates = await self._run_round(round_nodes, state, last=last)
            for node in round_nodes:
                state.update(updates[node] or {})
            # A typed state is validated after every round (an update that breaks the model fails
            # the run there); a dict is only copied, when an edge's condition needs to look at it.
            view = self._view(state) if chain.state_model is not None else None
            targets: list[str] = []
            for node in round_nodes:
                for edge in out_edges.get(node, ()):
                    if edge.max_iterations is not None and followed[edge] >= edge.max_iterations:
                        continue
                    if edge.when is not None and view is None:
                        view = self._view(state)
                    if edge.when is None or edge.when(view):
                        if edge.max_iterations is not None:  # only bounded edges are counted
                            followed[edge] += 1
                        targets.append(edge.dst)
            for target in dict.fromkeys(targets):
                (waiting.add if indegree[target] > 1 else ready.append)(target)
            for join in sorted(waiting):
                others = [*ready, *(w for w in waiting if w != join)]
                if not any(join in reach[other] for other in others):
                    waiting.discard(join)
                    ready.append(join)
        self.context.finish(state)

    async def _run_round(self, nodes: list[str], state: dict[str, Any], *, last: bool = False) -> dict[str, Any]:
        results: dict[str, Any] = {}
        failures: list[BaseException] = []

        async def run_node(node: str) -> None:
            # Every branch settles before anything is raised: a sibling cancelled half-way
            # would only suspend, or fail, one resume later.
            try:
                with call_scope(f"node:{node}") as segment:
                    path = f"{self.context.path}/{segment}"
                    # The state stays as it is until the round ends; the node gets its own copy.
                    # A shielded node's shield covers its run and the record of its update.
                    with shielded() if node in self.chain._shielded else nullcontext():
                        results[node] = await self.context.step(f"node:{node}", self._call, node, state, path,
                                                                last=last)
            except BaseException as exc:
                if not settled(exc):
                    raise  # a cancellation: not this branch's outcome
                failures.append(exc)  # failures and pauses alike, raised in the group below

        if len(nodes) == 1:  # a line: no branch to run beside it
            await run_node(nodes[0])
        else:
            async with anyio.create_task_group() as tg:
                for node in nodes:
                    tg.start_soon(run_node, node)
        if failures:
            raise BaseExceptionGroup(f"chain {self.chain.name!r}: nodes {nodes}", failures)
        return results

    def _view(self, state: dict[str, Any]) -> Any:
        model = self.chain.state_model
        return model.model_validate(state) if model is not None else dict(state)

    async def _call(self, node: str, state: dict[str, Any], path: str) -> Any:
        chain = self.chain
        fn, timeout = chain._nodes[node], chain._timeouts.get(node)

        async def attempt() -> Any:
            view = self._view(state)  # each attempt its own copy: a failed one may have changed its own
            emit(NodeStarted, node=node)
            if chain._async[node]:
                return await within(timeout, path, fn, view)
            return await anyio.to_thread.run_sync(fn, view)

        update = await attempted(chain._retries.get(node), path, attempt)
        if update is None:
            return {}
        if isinstance(update, BaseModel):
            return update.model_dump(mode="json", exclude_unset=True)
        if not isinstance(update, dict):
            raise ConfigurationError(
                f"Node {node!r} of chain {self.chain.name!r} returned {type(update).__name__}; "
                f"a node returns a dict of updates (or None)."
            )
        return update
