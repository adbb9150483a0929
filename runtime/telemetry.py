"""OpenTelemetry traces and metrics of executions, and the hooks an LLM adapter reports through.

Telemetry turns itself on in a process where OpenTelemetry is set up (a tracer
or meter provider installed, or ``OTEL_*`` variables naming an exporter), and
costs nothing where it is not: no OpenTelemetry module is even imported.

```python
from tether.runtime import telemetry

telemetry.enable(record_content=True)  # also prompts and tool arguments, cut at 1000 characters
```

See docs/telemetry.md for what is emitted.
"""

from ._core.telemetry import (
    disable,
    enable,
    llm_call,
    llm_reply,
    llm_usage,
    tokens_used,
)

__all__ = ["disable", "enable", "llm_call", "llm_reply", "llm_usage", "tokens_used"]
