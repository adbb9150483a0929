"""Test your own workflows: crashes, approvals and time, in milliseconds, on both anyio backends.

```python
from tether.runtime.testing import Clock, Effects, crash_at, crash_sweep, run_due

async def test_refund_survives_a_crash(tether_store):
    chain = refund_chain(tether_store)
    with Effects() as effects:
        async with crash_at("node:charge"):          # dies right after charge is journaled
            await chain.run({"amount": 120}, execution_id="r-1")
        result = await chain.resume("r-1")           # recovery, as in a new process
    assert result.status == "completed"
    effects.assert_exactly_once(send_money)
```

The pytest plugin (fixtures ``tether_store``, ``tether_clock``, ``tether_effects``)
is off until a project turns it on: ``tether_testing = true`` under
``[tool.pytest.ini_options]``, or ``pytest --tether``. See docs/testing.md.
"""

from ._child import ChildCrash as ChildCrash, crash_in_child as crash_in_child
from ._crash import Crashed as Crashed, CrashPoint as CrashPoint, crash_at as crash_at
from ._effects import Effects as Effects
from ._sweep import SweepReport as SweepReport, SweepRun as SweepRun, crash_sweep as crash_sweep
from ._time import Clock as Clock, run_due as run_due

__all__ = (
    "ChildCrash",
    "Clock",
    "CrashPoint",
    "Crashed",
    "Effects",
    "SweepReport",
    "SweepRun",
    "crash_at",
    "crash_in_child",
    "crash_sweep",
    "run_due",
)
