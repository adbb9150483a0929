"""Conversations that continue: a thread of runs, each starting where the last completed one ended.

```python
await agent.run("Hi, I am Ada.", execution_id="chat-7-1", thread="chat-7")
await agent.run("What is my name?", execution_id="chat-7-2", thread="chat-7")  # its LLM sees run 1
```

Each run of a thread is an execution of its own, with its own id and its own
idempotency. What it continues is decided once, when it starts: the thread's
last *completed* run (a paused, failed or cancelled one is skipped). The run's
input, stored with the execution in the transaction that creates it, is the
user's text and that run's id (`ThreadStart`), never a copy of its messages::

    {"text": "What is my name?", "after": "chat-7-1"}

The conversation is rebuilt whenever the run's root actor starts its message
(the first time, and after a crash, a pause or a retry): the ``after``
references are followed back to the thread's first run, and each run's own
journal gives its own turns. So a thread's storage is linear in its length (each
run journals only what it added), a recovery continues from the base it started
with even if another run of the thread completed meanwhile, and the earlier runs
of a thread must stay as long as a later one may be continued or recovered.

What a run continues:

- an `Agent` or a `Supervisor`: its own turn loop's conversation, every message
  of it (each user text, each assistant turn, each tool call and result, each
  delegation and the worker's answer); a supervisor's workers start each task
  afresh, as they always do;
- a `Swarm`: the thread's exchange, each earlier run's task and the swarm's
  answer, which every member reads before the task it is given.

The system prompt is not part of what is continued: each run sends its runner's
current one first.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError
from tether.runtime import Runner, TetherError
from tether.stores import ConfigurationError

from ._loop import TurnLoop, _DelegateArguments
from ._messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from ._tools import result_text

if TYPE_CHECKING:
    from datetime import timedelta

    from pydantic import JsonValue
    from tether.runtime import ActorContext, Queue, RunResult
    from tether.stores import Execution, JournalEntry, Store

    from ._agent import Agent

THREAD_NAME_LIMIT = 512
"""The longest thread name, in characters (what every store keeps)."""


class ThreadBroken(TetherError):
    """A thread run cannot rebuild its conversation: a run it continues is gone or is not what it was.

    The earlier runs of a thread are what a later run is rebuilt from: deleting
    one (``Store.delete_execution``) breaks the runs after it. Start a new thread,
    or continue from another run.
    """


class ThreadStart(BaseModel):
    """The input of a thread run, as stored with its execution: the user's text and what it continues.

    ``after`` is the execution id of the run whose conversation comes first (the
    thread's last completed run when this one started), None for a thread's first run.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    text: str
    after: str | None = None


def check_thread(thread: Any) -> str:
    """``thread`` if it can name a conversation, else `ConfigurationError`.

    A name is a non-empty string of at most `THREAD_NAME_LIMIT` characters, with
    no NUL character and no lone surrogate (no store keeps those alike).
    """
    if not isinstance(thread, str) or not thread:
        problem = "must be a non-empty string"
    elif "\x00" in thread:
        problem = "must not contain NUL characters"
    elif len(thread) > THREAD_NAME_LIMIT:
        problem = f"must be at most {THREAD_NAME_LIMIT} characters long"
    else:
        try:
            thread.encode("utf-8")
        except UnicodeEncodeError:
            problem = "must be valid Unicode text (it holds a lone surrogate)"
        else:
            return thread
    raise ConfigurationError(
        f"thread={thread!r}: a thread name {problem}. Name each conversation with an id of your own "
        f"(thread=\"chat-7\", thread=f\"user-{{user_id}}\")."
    )


def user_text(input: Any, who: str) -> JsonValue:
    """The input of an agent-like runner as stored: the user's text, or a thread run's `ThreadStart`.

    Raises:
        ConfigurationError: ``input`` is not a str (``who`` says whose input it was).
    """
    if isinstance(input, ThreadStart):
        return input.model_dump(mode="json")
    if not isinstance(input, str):
        raise ConfigurationError(f"{who}'s input is the user's text, a str; got {type(input).__name__}.")
    return input


def start_of(input: JsonValue) -> ThreadStart:
    """A run's stored input as a `ThreadStart`: plain text is a run that continues nothing."""
    if isinstance(input, str):
        return ThreadStart(text=input)
    try:
        return ThreadStart.model_validate(input)
    except ValidationError:
        # Not the input of an agent-like runner: the text it stood for, as a run of old would read it.
        return ThreadStart(text=str(input))


class Threaded(Runner):
    """A runner whose runs may continue a conversation: ``run(text, execution_id=..., thread=...)``.

    `Agent`, `Swarm` and `Supervisor` are threaded. See this module's docstring for
    what a run continues, and how.
    """

    async def run(self, input: Any = None, *, execution_id: str, timeout: timedelta | float | None = None,
                  thread: str | None = None) -> RunResult:
        """Run to the end or to a pause, here; with ``thread``, as the next run of that conversation.

        The execution id stays the idempotency key: running an id again returns what
        that run came to (or continues it), whatever the thread did since.

        Args:
            input: The user's text.
            execution_id: This run's own id (one per run: ``"chat-7-3"``).
            timeout: A durable deadline on the whole execution (see `Runtime.run`).
            thread: The conversation's name. The run starts from the conversation the
                thread's last completed run ended with, then the user's text; the
                thread's first run starts with the text alone.

        Raises:
            ConfigurationError: ``thread`` is not a valid name; the thread is another
                runner's conversation; ``execution_id`` is an execution of another
                thread, or of none. Nothing was written.
        """
        if thread is not None:
            input = await self._thread_start(input, execution_id, thread)
        return await super().run(input, execution_id=execution_id, timeout=timeout, thread=thread)

    async def start(self, input: Any = None, *, execution_id: str, detach: bool = True,
                    timeout: timedelta | float | None = None, thread: str | None = None,
                    queue: str | Queue | None = None, key: str | None = None,
                    priority: int | None = None) -> RunResult:
        """Start an execution (see `Runner.start`); with ``thread``, as the next run of that conversation.

        What the run continues is decided now, not when a worker takes it up.

        Raises:
            ConfigurationError: As for `run`; nothing was written.
        """
        if thread is not None and detach:  # without detach, start() is run(), which does it
            input = await self._thread_start(input, execution_id, thread)
        return await super().start(input, execution_id=execution_id, detach=detach, timeout=timeout,
                                   thread=thread, queue=queue, key=key, priority=priority)

    async def _thread_start(self, input: Any, execution_id: str, thread: str) -> ThreadStart:
        """The input of a new run of ``thread``: the text, and the run it continues (checked first)."""
        thread = check_thread(thread)
        text = self._input(input)  # the runner's own check of the text, before anything is read
        if not isinstance(text, str):
            raise ConfigurationError(f"thread={thread!r}: the input of a thread run is the user's text, a str.")
        store = self._store()
        await store.setup()
        existing = await store.get_execution(execution_id)
        if existing is not None and existing.thread != thread:
            where = "no thread" if existing.thread is None else f"thread {existing.thread!r}"
            raise ConfigurationError(
                f"Execution {execution_id!r} exists already, as a run of {where}: it cannot be a run of thread "
                f"{thread!r}. Give each run of a thread an id of its own (\"{thread}-4\"), or run this one "
                f"without thread= (or with thread={existing.thread!r}) to get what it came to."
            )
        latest = await store.list_executions(thread=thread, recent=True, limit=1)
        if latest and latest[0].root_path != self.root_path:
            raise ConfigurationError(
                f"Thread {thread!r} is a conversation of {latest[0].root_path}, not of {self.root_path}: a thread "
                f"is continued by the runner that started it. Use another thread name for this one's conversations."
            )
        # An existing id keeps the input it was stored with: this one is then not used.
        done = await store.list_executions(thread=thread, status="completed", recent=True, limit=1)
        return ThreadStart(text=text, after=done[0].execution_id if done else None)


async def opening(context: ActorContext, runner: Runner, agent: Agent, input: JsonValue) -> list[Message]:
    """The conversation an agent-like root actor starts with: the thread's so far, then the user's text.

    Args:
        context: The root actor's context.
        runner: The runner whose execution it is (its store, its root path).
        agent: Whose turn loop continues (the agent itself, or a supervisor's own).
        input: The execution's stored input (text, or a `ThreadStart`).

    Raises:
        ThreadBroken: A run it continues is gone, or is not a completed run of ``runner``.
    """
    start = start_of(input)
    if start.after is None:
        return agent._opening(start.text)
    system: list[Message] = [SystemMessage(content=agent.system_prompt)] if agent.system_prompt else []
    earlier: list[Message] = []
    loop = TurnLoop(context, agent)  # how its turns read their replies: the corrections they sent
    for execution, journal in await _runs(runner._store(), start.after, runner.root_path, journals=True):
        earlier += _conversation(execution, journal, runner.root_path, loop)
    return [*system, *earlier, UserMessage(content=start.text)]


async def exchange(runner: Runner, after: str | None) -> list[Message]:
    """A swarm thread's conversation before run ``after``'s successor: each run's task and the swarm's answer.

    Raises:
        ThreadBroken: A run it continues is gone, or is not a completed run of ``runner``.
    """
    if after is None:
        return []
    messages: list[Message] = []
    for execution, _ in await _runs(runner._store(), after, runner.root_path, journals=False):
        messages += [UserMessage(content=start_of(execution.input).text),
                     AssistantMessage(content=result_text(execution.result))]
    return messages


async def _runs(store: Store, after: str, root_path: str, *,
                journals: bool) -> list[tuple[Execution, list[JournalEntry]]]:
    """The runs a thread run continues, first run first: ``after``, the run it continued, and so on."""
    runs: list[tuple[Execution, list[JournalEntry]]] = []
    seen: set[str] = set()
    wanted: str | None = after
    while wanted is not None:
        if wanted in seen:
            raise ThreadBroken(f"The thread runs before {after!r} continue one another in a circle (at {wanted!r}).")
        seen.add(wanted)
        if journals:
            loaded = await store.load_execution(wanted)
        else:
            row = await store.get_execution(wanted)
            loaded = None if row is None else (row, [])
        if loaded is None:
            raise ThreadBroken(
                f"Run {wanted!r} of the thread is gone (deleted, or pruned on its own), so the conversation "
                f"that run {after!r} ended with cannot be rebuilt. Start a new thread."
            )
        execution = loaded[0]
        if execution.status != "completed" or execution.root_path != root_path:
            raise ThreadBroken(
                f"Run {wanted!r} is {execution.status} at {execution.root_path}, not a completed run of {root_path}: "
                f"its conversation cannot be continued here."
            )
        runs.append(loaded)
        wanted = start_of(execution.input).after
    runs.reverse()
    return runs


_TURN = re.compile(r"turn:(\d+)")


def _conversation(execution: Execution, journal: list[JournalEntry], path: str, loop: TurnLoop) -> list[Message]:
    """What one completed run added to the conversation, rebuilt from its journal as its turn loop built it.

    The loop journals each turn's assistant message (``turn:N``), each tool's
    result (``turn:N/tool:X``) and each worker's answer (``reply:K``). It adds two
    kinds of messages it does not journal, because they follow from what it did:
    the correction of an answer that does not parse as the output type, and the
    error of a delegation whose arguments do not validate. They are derived again.
    """
    turns: list[tuple[AssistantMessage, dict[str, list[ToolMessage]]]] = []
    for entry in journal:
        payload: Any = entry.payload
        if entry.path != path or entry.kind != "entry" or not isinstance(payload, dict) or "step" not in payload:
            continue
        if _TURN.fullmatch(entry.label):
            turns.append((AssistantMessage.model_validate(payload["result"]), {}))
        elif turns and (entry.label.startswith("turn:") or entry.label.startswith("reply:")):
            result = ToolMessage.model_validate(payload["result"])
            turns[-1][1].setdefault(result.tool_call_id, []).append(result)
    messages: list[Message] = [UserMessage(content=start_of(execution.input).text)]
    for number, (reply, results) in enumerate(turns, 1):
        messages.append(reply)
        if reply.tool_calls:
            # In the order of the calls, as the loop appends them (results are journaled as they finish).
            for call in reply.tool_calls:
                recorded = results.get(call.id or "")
                messages.append(recorded.pop(0) if recorded else _unrecorded(call))
        elif number < len(turns):  # an answer the loop did not accept: it said why, and went on
            _, correction = loop._answer(reply)
            if correction is not None:
                messages.append(UserMessage(content=correction))
    return messages


def _unrecorded(call: ToolCall) -> ToolMessage:
    """The result the loop gave a call without journaling one: a delegation with invalid arguments."""
    assert call.id is not None
    try:  # the loop's own check, so that the message is the one it sent
        _DelegateArguments.model_validate(call.arguments)
    except ValidationError as exc:
        content = f"Invalid arguments for {call.name}: {exc.errors()[0]['msg']}"
    else:
        content = f"{call.name} left no result."
    return ToolMessage(tool_call_id=call.id, name=call.name, is_error=True, content=content)
