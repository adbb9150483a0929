"""Agent-level actors built on `tether.runtime`: today the durable `Chain`.

```python
from tether.actors import Chain
from tether.runtime import Resume, interrupt

chain = Chain("refund", [validate, approve_refund, charge, notify], store=store)
result = await chain.run({"amount": 50_000}, execution_id="refund-abc")
```
"""

from ._chain import Chain as Chain

__all__ = ("Chain",)

for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
