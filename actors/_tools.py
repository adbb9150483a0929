"""`FunctionTool`: a Python function an LLM may call, its arguments checked by pydantic."""

from __future__ import annotations

import inspect
import json
import re
from typing import TYPE_CHECKING, Any, get_type_hints

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import to_jsonable_python
from tether.stores import ConfigurationError

from ._messages import ToolSpec
from ._steps import attempted, step_retry, step_seconds, within

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta

    from tether.runtime import RetryPolicy


_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ToolArgumentsError(Exception):
    """The LLM's arguments for a tool do not fit its signature; told to the LLM, not raised."""


class FunctionTool:
    """A sync or async function offered to an LLM as a tool.

    The JSON schema of its arguments comes from the type hints, its description
    from the docstring. Arguments are validated before the call: arguments that
    do not fit go back to the LLM as the tool's result, so it can try again.
    A sync function runs in a worker thread (``interrupt()`` and ``@idempotent``
    work there too).

    Args:
        fn: The function; its parameters are the tool's arguments.
        name: The tool's name (default: the function's).
        description: What the LLM is told it does (default: the docstring).
        timeout: Seconds (or a ``timedelta``) one call of an async tool may take. A call
            that overruns is cancelled at its next ``await``, and the LLM gets a
            `StepTimeout` as the tool's error result (journaled like any result, so a
            resume does not call it again); the LLM may then try again or answer. Sync
            tools run in a worker thread, which cannot be stopped, so they refuse it:
            make the tool async, or give its blocking call a timeout of its own.
        shielded: Run each call inside `tether.runtime.shielded`: a cancel of the
            execution, its deadline, or a process shutting down waits until the call
            has finished and its result is journaled, then takes effect. For a tool that
            must not stop half-way (a payment and its receipt). A shielded tool cannot
            have a timeout.
        retry: Call the tool again when it fails with an error this `RetryPolicy`
            retries, sync or async, after a durable backoff (journaled: a crash during
            the wait neither resets nor repeats an attempt). Each attempt gets the
            whole ``timeout``. Once the attempts are used up, the LLM gets the last
            error as the tool's result, as without a policy. Default: no retries.

    Raises:
        ConfigurationError: The name is not valid, the signature has parameters an
            LLM cannot name, ``timeout`` is not positive, is given to a sync
            function, or is given with ``shielded=True``, or ``retry`` is not a `RetryPolicy`.

    Example:
        ```python
        def approve_refund(amount: int) -> dict:
            \"\"\"Approve a refund of `amount` dollars.\"\"\"
            ...

        tool = FunctionTool(approve_refund)
        tool.spec.parameters["properties"]  # {'amount': {'title': 'Amount', 'type': 'integer'}}

        FunctionTool(search_flights, timeout=20)   # async def: cancelled after 20 s
        FunctionTool(charge_card, shielded=True)   # a cancel waits for the charge to finish
        FunctionTool(lookup_order, retry=RetryPolicy(retry_on=ConnectionError))  # 3 attempts
        ```
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        description: str | None = None,
        *,
        timeout: float | timedelta | None = None,
        shielded: bool = False,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.fn = fn
        self.name: str = name or str(getattr(fn, "__name__", ""))
        if not _NAME.fullmatch(self.name):
            # The chat-completions rule; it also keeps call paths (tool:x, tool:x[1], tool:x#2) unambiguous.
            raise ConfigurationError(
                f"Tool name {self.name!r} is not 1-64 letters, digits, '_' or '-'. Pass name= to FunctionTool."
            )
        self.arguments: type[BaseModel] = _arguments_model(fn, self.name)
        self.spec: ToolSpec = ToolSpec(
            name=self.name,
            description=description if description is not None else inspect.getdoc(fn) or "",
            parameters=self.arguments.model_json_schema(),
        )
        self._is_async = inspect.iscoroutinefunction(fn)
        self.timeout: float | None = step_seconds(timeout, f"tool {self.name!r}", is_async=self._is_async,
                                                  shielded=shielded)
        """Seconds one call may take (``None``: no limit)."""
        self.shielded: bool = shielded
        """Whether a cancel waits for a call to finish and be journaled."""
        self.retry: RetryPolicy | None = step_retry(retry, f"tool {self.name!r}")
        """How a failed call is tried again (``None``: it is not)."""

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"

    def validate(self, arguments: dict[str, Any] | str) -> dict[str, Any]:
        """The keyword arguments to call with, or `ToolArgumentsError` saying what is wrong."""
        if isinstance(arguments, str):
            raise ToolArgumentsError(f"The arguments for {self.name} are not a JSON object: {arguments!r}")
        try:
            model = self.arguments.model_validate(arguments)
        except ValidationError as exc:
            raise ToolArgumentsError(f"Invalid arguments for {self.name}: {_short(exc)}") from exc
        return {field: getattr(model, field) for field in type(model).model_fields}

    async def call(self, arguments: dict[str, Any], *, path: str | None = None) -> Any:
        """Run the function with validated arguments and return its result, retried as ``retry`` says.

        Raises:
            StepTimeout: The call ran past ``timeout`` (named ``path``, default the tool's name).
        """
        if self._is_async:
            return await attempted(self.retry, path, within, self.timeout, path or f"tool:{self.name}",
                                   lambda: self.fn(**arguments))
        return await attempted(self.retry, path, anyio.to_thread.run_sync, lambda: self.fn(**arguments))


def result_text(result: Any) -> str:
    """A tool's result as the text an LLM reads: strings as they are, anything else as JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(to_jsonable_python(result), ensure_ascii=False)


def _arguments_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    try:
        signature = inspect.signature(fn)
        hints = get_type_hints(fn)
    except (TypeError, ValueError, NameError) as exc:
        raise ConfigurationError(f"Cannot read the signature of tool {name!r}: {exc}") from exc
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigurationError(
                f"Tool {name!r} has a parameter {param.name!r} an LLM cannot name ({param.kind.description}); "
                f"give tools ordinary named parameters."
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def _short(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
