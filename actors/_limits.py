"""A rate limit around an LLM, shared by every execution and process that calls the same model.

```python
llm = LLMLimit(OpenAIChatLLM("gpt-4o"), requests=500, tokens=200_000, per=timedelta(minutes=1))
```

Before each call, the limit counts it in the execution's own store, in the
current window of ``per`` (windows start at multiples of it on the store's
clock), with every other process that uses the same limit name (by default
the adapter's provider and model): a call that does not fit waits for the next
window. The tokens a reply reports (`tether.runtime.telemetry.llm_usage`,
which `OpenAIChatLLM` and `AnthropicLLM` call) are counted after it, so a
window that used its tokens admits no more calls. A 429 that still comes back
blocks the limit for everyone, for its ``Retry-After`` (else one ``per``), and
the call fails as it would have: an ``llm_retry=`` policy tries it again, after
the block. Outside an execution (no store to share), calls are not limited.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self

import anyio
from tether.runtime import current_store
from tether.runtime.telemetry import tokens_used
from tether.stores import ConfigurationError

from ._http import LLMError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._llm import LLM
    from ._messages import AssistantMessage, Message, ToolSpec


class LLMLimit:
    """An `LLM` that calls ``llm`` within ``requests`` calls and ``tokens`` tokens per ``per``, fleet-wide.

    Args:
        llm: The adapter it limits.
        requests: Calls per period, at most (None: no limit on calls).
        tokens: Tokens per period, at most, as the replies report them (None: no limit).
        per: The period (default: a minute).
        name: What it is counted under; default ``"<provider>:<model>"`` of ``llm``.
            Processes that give the same name share the count.

    Raises:
        ConfigurationError: Neither limit, a limit below 1, or a period that is not a positive timedelta.
    """

    def __init__(self, llm: LLM, *, requests: int | None = None, tokens: int | None = None,
                 per: timedelta = timedelta(minutes=1), name: str | None = None) -> None:
        if requests is None and tokens is None:
            raise ConfigurationError("LLMLimit needs requests=, tokens= or both: the most per period.")
        for setting, value in (("requests", requests), ("tokens", tokens)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"LLMLimit({setting}={value!r}): give a whole number, 1 or more.")
        seconds = per.total_seconds() if isinstance(per, timedelta) else float("nan")
        if not (seconds > 0 and math.isfinite(seconds)):
            raise ConfigurationError(f"LLMLimit(per={per!r}): give a positive timedelta, e.g. timedelta(minutes=1).")
        self.llm = llm
        self.requests, self.tokens, self.per = requests, tokens, per
        self.provider: str = getattr(llm, "provider", None) or type(llm).__name__
        self.model: str = str(getattr(llm, "model", type(llm).__name__))
        self.name = name or f"{self.provider}:{self.model}"

    def __repr__(self) -> str:
        return f"LLMLimit({self.llm!r}, requests={self.requests}, tokens={self.tokens}, per={self.per!r})"

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> AssistantMessage:
        store = current_store()
        if store is None:
            return await self.llm.complete(messages, tools)
        period = self.per.total_seconds()
        while True:
            wait = await store.take_llm_quota(self.name, requests=self.requests, tokens=self.tokens,
                                              per_seconds=period)
            if not wait:
                break
            await anyio.sleep(wait)  # the window is full, or a 429 blocks it: until the next one, or the block ends
        with tokens_used() as used:
            try:
                reply = await self.llm.complete(messages, tools)
            except LLMError as exc:
                if exc.status == 429:
                    with anyio.CancelScope(shield=True):
                        await store.block_llm(self.name, exc.retry_after or period)
                raise
            finally:
                if sum(used):
                    with anyio.CancelScope(shield=True):
                        await store.add_llm_tokens(self.name, sum(used), per_seconds=period)
        return reply

    async def __aenter__(self) -> Self:
        enter = getattr(self.llm, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        leave = getattr(self.llm, "__aexit__", None)
        if leave is not None:
            await leave(*exc_info)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)  # the adapter's own settings (base_url, stream...) read through
