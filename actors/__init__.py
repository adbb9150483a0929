"""Agent-level actors built on `tether.runtime`: `Chain`, `Agent`, `Swarm` and `Supervisor`.

```python
from tether.actors import Agent, Chain, FunctionTool, ScriptedLLM, ToolCall
from tether.runtime import Resume, interrupt

chain = Chain("refund", [validate, approve_refund, charge, notify], store=store)
result = await chain.run({"amount": 50_000}, execution_id="refund-abc")

agent = Agent(name="refund-bot", llm=ScriptedLLM([ToolCall("approve_refund", {"amount": 50_000}),
              "Refund processed."]), tools=[FunctionTool(approve_refund)], store=store)
result = await agent.run("Process a $50k refund.", execution_id="job-1")
```
"""

from ._agent import Agent as Agent
from ._anthropic import AnthropicLLM as AnthropicLLM
from ._chain import Chain as Chain
from ._http import LLMError as LLMError
from ._limits import LLMLimit as LLMLimit
from ._llm import (
    LLM as LLM,
    LLMRequest as LLMRequest,
    ScriptedLLM as ScriptedLLM,
    ScriptExhausted as ScriptExhausted,
    Turn as Turn,
)
from ._loop import MaxDelegationsExceeded as MaxDelegationsExceeded, MaxTurnsExceeded as MaxTurnsExceeded
from ._mcp import MCPTools as MCPTools
from ._messages import (
    AssistantMessage as AssistantMessage,
    Message as Message,
    SystemMessage as SystemMessage,
    ToolCall as ToolCall,
    ToolMessage as ToolMessage,
    ToolSpec as ToolSpec,
    UserMessage as UserMessage,
)
from ._openai import OpenAIChatLLM as OpenAIChatLLM
from ._retry import LLM_RETRY as LLM_RETRY, retriable_llm_error as retriable_llm_error
from ._team import (
    Blackboard as Blackboard,
    MaxHandoffsExceeded as MaxHandoffsExceeded,
    Supervisor as Supervisor,
    Swarm as Swarm,
    Worker as Worker,
)
from ._threads import ThreadBroken as ThreadBroken
from ._tools import FunctionTool as FunctionTool

__all__ = (
    "LLM",
    "LLM_RETRY",
    "Agent",
    "AnthropicLLM",
    "AssistantMessage",
    "Chain",
    "FunctionTool",
    "Blackboard",
    "LLMError",
    "LLMLimit",
    "LLMRequest",
    "MCPTools",
    "MaxDelegationsExceeded",
    "MaxHandoffsExceeded",
    "MaxTurnsExceeded",
    "Message",
    "OpenAIChatLLM",
    "ScriptExhausted",
    "ScriptedLLM",
    "Supervisor",
    "Swarm",
    "SystemMessage",
    "ThreadBroken",
    "ToolCall",
    "ToolMessage",
    "ToolSpec",
    "Turn",
    "UserMessage",
    "Worker",
    "retriable_llm_error",
)

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = __name__
del _name, _obj
