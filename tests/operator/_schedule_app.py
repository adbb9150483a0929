"""A schedule for the fleet test: `tether worker --app tests.operator._schedule_app:runners`."""

from __future__ import annotations

import os
from typing import Any

from tether.actors import Chain
from tether.runtime import Schedule


def report(state: dict[str, Any]) -> dict[str, Any]:
    return {"sent_by": os.getpid()}


ticks = Chain("ticks", [report], lease_seconds=1.0)
every_minute = Schedule("every-minute", cron="* * * * *", runner=ticks, input={"kind": "tick"}, catch_up="all")
runners = [ticks]
