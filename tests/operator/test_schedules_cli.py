"""`tether schedules`: list, pause, resume and trigger, on SQLite and Postgres."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import anyio
from tether.stores import ScheduleRow, open_store

from .conftest import Tether

SEEDED = datetime.now(UTC) - timedelta(hours=1)


def seed(url: str) -> None:
    async def main() -> None:
        async with open_store(url) as store:
            await store.declare_schedule(ScheduleRow(name="digest", cron="0 9 * * MON-FRI", tz="Europe/Paris",
                                                     runner="Chain[report]", root_path="chain:report",
                                                     input={"kind": "daily"}, last_tick=SEEDED))

    anyio.run(main)


def listed(tether: Tether) -> dict[str, object]:
    code, out, err = tether("schedules", "--json")
    assert code == 0, err
    [row] = json.loads(out)
    return row  # type: ignore[no-any-return]


def test_list_pause_resume_and_trigger(tether: Tether, url: str) -> None:
    seed(url)
    code, out, _ = tether("schedules")
    assert code == 0 and "digest" in out and "0 9 * * MON-FRI" in out and "Europe/Paris" in out and "active" in out
    row = listed(tether)
    assert row["paused"] is False and str(row["next_tick"]).endswith(("09:00:00+01:00", "09:00:00+02:00"))

    code, out, _ = tether("schedules", "pause", "digest")
    assert code == 0 and "paused" in out
    assert listed(tether)["paused"] is True and listed(tether)["next_tick"] is None
    code, out, _ = tether("schedules", "resume", "digest")
    assert code == 0 and "counting from now" in out
    resumed = listed(tether)
    assert resumed["paused"] is False
    assert datetime.fromisoformat(str(resumed["last_tick"])) > SEEDED  # what came while paused is skipped

    code, out, _ = tether("schedules", "trigger", "digest")
    assert code == 0 and "Started digest@manual-" in out
    code, out, _ = tether("executions", "--json")
    assert code == 0
    [execution] = json.loads(out)
    assert execution["execution_id"].startswith("digest@manual-") and execution["status"] == "queued"

    code, _, err = tether("schedules", "pause", "nightly")
    assert code == 1 and "No schedule 'nightly'" in err
