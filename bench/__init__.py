"""tether's benchmarks, each against its peers in the same run (docs/benchmarks.md)."""

import os

# tether is measured as it runs in a process of its own. fastaiagent, imported for its own
# runs, sets an OpenTelemetry SDK provider up for the whole process, and tether reports its
# spans to a provider it finds (docs/telemetry.md): that would time fastaiagent's exporter
# inside tether's steps. bench.telemetry, which measures telemetry, turns it on itself.
os.environ.setdefault("TETHER_TELEMETRY", "off")
