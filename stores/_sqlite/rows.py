"""How the SQLite store keeps rows: times as integer microseconds since the epoch, values as JSON text.

Integer microseconds are exact both ways, and compare in SQL as the moments do.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import _json
from .._models import Execution, PendingInterrupt, TokenRow

if TYPE_CHECKING:
    from collections.abc import Sequence


EXEC_COLS = (
    "id, runner, root_path, fingerprint, status, input, result, error, "
    "lease_owner, lease_expires_at, lease_epoch, created_at, updated_at, wake_at, version, deadline, cancel, thread, trace, "
    "queue, queue_key, priority"
)
PENDING_COLS = "execution_id, path, reason, context, seq, created_at, deadline, default_value"
FINAL_SQL = "('completed', 'failed', 'cancelled', 'timed_out')"
TOKEN_COLS = "name, digest, scopes, paths, created_at, revoked_at"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def now_us() -> int:
    """The time now, as the store keeps times."""
    return time.time_ns() // 1000


def to_us(moment: datetime) -> int:
    """A moment as the store keeps it."""
    return (moment - _EPOCH) // _MICROSECOND


def span_us(seconds: float) -> int:
    """A duration in the store's unit."""
    return int(seconds * 1_000_000)


def to_us_or_none(moment: datetime | None) -> int | None:
    """`to_us`, for a column that may be NULL."""
    return None if moment is None else to_us(moment)


def from_us(value: int) -> datetime:
    """A stored time as an aware `datetime` (UTC)."""
    return _EPOCH + timedelta(microseconds=value)


def from_us_or_none(value: int | None) -> datetime | None:
    """`from_us`, for a column that may be NULL."""
    return None if value is None else from_us(value)


def execution_from(row: Sequence[Any]) -> Execution:
    """An execution from a row of `EXEC_COLS`."""
    return Execution(
        execution_id=row[0],
        runner=row[1],
        root_path=row[2],
        fingerprint=row[3],
        status=row[4],
        input=_json.loads(row[5]),
        result=None if row[6] is None else _json.loads(row[6]),
        error=row[7],
        lease_owner=row[8],
        lease_expires_at=from_us_or_none(row[9]),
        lease_epoch=row[10],
        created_at=from_us(row[11]),
        updated_at=from_us(row[12]),
        wake_at=from_us_or_none(row[13]),
        version=row[14],
        deadline=from_us_or_none(row[15]),
        cancel=None if row[16] is None else _json.loads(row[16]),
        thread=row[17],
        trace=row[18],
        queue=row[19],
        queue_key=row[20],
        priority=row[21],
    )


def pending_from(row: Sequence[Any]) -> PendingInterrupt:
    """A pending interrupt from a row of `PENDING_COLS`."""
    return PendingInterrupt(
        execution_id=row[0],
        agent_path=row[1],
        reason=row[2],
        context=_json.loads(row[3]),
        seq=row[4],
        created_at=from_us(row[5]),
        deadline=from_us_or_none(row[6]),
        default=None if row[7] is None else _json.loads(row[7]),
    )


def token_from(row: Sequence[Any]) -> TokenRow:
    """A token from a row of `TOKEN_COLS`."""
    return TokenRow(name=row[0], digest=row[1], scopes=_json.loads(row[2]), paths=_json.loads(row[3]),
                    created_at=from_us(row[4]), revoked_at=from_us_or_none(row[5]))
