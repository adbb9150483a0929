"""Runs a chain with telemetry off three ways and prints what was imported and measured, as JSON.

1. nothing set up; 2. ``TETHER_TELEMETRY=off`` beside an OTLP endpoint; 3. OpenTelemetry
imported by the application but no provider set. Usage: python _off_child.py DB_PATH
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from tether.actors import Chain
from tether.runtime._core import telemetry
from tether.stores import SQLiteStore


def loaded() -> list[str]:
    return sorted(name for name in sys.modules if name.startswith("opentelemetry"))


async def once(execution_id: str) -> str:
    async with SQLiteStore(sys.argv[1]) as store:
        result = await Chain("plain", [lambda state: {"ok": True}], store=store).run({}, execution_id=execution_id)
        return result.status


seen = {}
for backend in ("asyncio", "trio"):
    seen[f"plain-{backend}"] = [anyio.run(once, f"a-{backend}", backend=backend), loaded()]
os.environ.update(TETHER_TELEMETRY="off", OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
for backend in ("asyncio", "trio"):
    seen[f"switched-off-{backend}"] = [anyio.run(once, f"b-{backend}", backend=backend), loaded()]
del os.environ["TETHER_TELEMETRY"], os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
import opentelemetry.trace  # noqa: F401 - an application that imports the API and sets nothing up

for backend in ("asyncio", "trio"):
    status = anyio.run(once, f"c-{backend}", backend=backend)
    seen[f"no-provider-{backend}"] = [status, telemetry.active is None]
print(json.dumps(seen))
