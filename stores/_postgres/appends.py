"""Group commit for Postgres appends: boundaries that arrive while one is being written share the next statement.

Executions run side by side in one process each write their boundaries with
an append. Sent one statement each, every append pays its own round trip,
parse, transaction and commit, and on a small machine the server's and the
driver's CPU runs out long before the disk does. Here, while one append's
statement is in flight, the appends that arrive queue up; when it returns,
the first of them writes the whole queue in one statement (one transaction,
one WAL flush) and hands the next queue to the first append that arrived
meanwhile. An append that arrives alone is written alone, by the statement it
would use anyway.

Each append in a batch is fenced by its own lease, as alone: a stale one
writes nothing and is told so, the others commit. If the batch's statement
is refused as a whole by the server (a deadlock with another process's batch,
say), nothing of it committed and each of its appends is written again alone,
so only a failing one fails. If the connection fails instead (reset, timed
out), the batch may have committed with its answer lost: then every append of
it fails with the connection's error, and none is written again. Every caller is
answered after the COMMIT that holds its entries: nothing is acknowledged
before it is durable.

Everything here runs on the driver's asyncio loop, as an operation's inner
task (`stores._bridge`). An append is past its point of no return once a
statement takes it; until then a cancelled caller leaves the queue and has
written nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._bridge import Op

Rows = list[tuple[str, str, str, str]]
"""An append's entries as (path, label, kind, payload JSON)."""
Written = list[Any]
"""What the statement returned for one append: a record with ``seq`` and ``created_at`` per entry; none if fenced."""

# One append: its execution's entries, numbered from the execution's next_seq.
ALONE = """WITH bump AS (
        UPDATE tether_executions SET next_seq = next_seq + $4
        WHERE id = $1 AND lease_epoch = $2 AND lease_owner = $3 RETURNING next_seq - $4 AS first
    )
    INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at)
    SELECT $1, bump.first + e.ord - 1, e.path, e.label, e.kind, e.payload::json, now()
    FROM bump, unnest($5::text[], $6::text[], $7::text[], $8::text[])
        WITH ORDINALITY AS e(path, label, kind, payload, ord)
    RETURNING seq, created_at"""

# Several appends (items 1..k), in one statement. Two appends under one lease (parallel
# branches) take consecutive ranges in item order; an append whose fence fails has no bump
# row, so none of its entries are inserted, and the others are.
BATCH = """WITH item AS (
        SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::int[])
            WITH ORDINALITY AS i(id, epoch, owner, n, item)
    ), placed AS (
        SELECT item, id, epoch, owner, n,
            sum(n) OVER (PARTITION BY id, epoch, owner ORDER BY item) - n AS before,
            sum(n) OVER (PARTITION BY id, epoch, owner) AS total
        FROM item
    ), bump AS (
        UPDATE tether_executions e SET next_seq = e.next_seq + t.total
        FROM (SELECT DISTINCT id, epoch, owner, total FROM placed) t
        WHERE e.id = t.id AND e.lease_epoch = t.epoch AND e.lease_owner = t.owner
        RETURNING e.id, t.epoch, t.owner, e.next_seq - t.total AS first
    ), inserted AS (
        INSERT INTO tether_journal (execution_id, seq, path, label, kind, payload, created_at)
        SELECT p.id, b.first + p.before + x.pos - 1, x.path, x.label, x.kind, x.payload::json, now()
        FROM unnest($5::int[], $6::int[], $7::text[], $8::text[], $9::text[], $10::text[])
                AS x(item, pos, path, label, kind, payload)
            JOIN placed p ON p.item = x.item
            JOIN bump b ON b.id = p.id AND b.epoch = p.epoch AND b.owner = p.owner
        RETURNING execution_id, seq, created_at
    )
    SELECT p.item, inserted.seq, inserted.created_at
    FROM inserted
        JOIN bump b ON b.id = inserted.execution_id
        JOIN placed p ON p.id = b.id AND p.epoch = b.epoch AND p.owner = b.owner
            AND inserted.seq BETWEEN b.first + p.before AND b.first + p.before + p.n - 1"""

Fetch = Callable[..., Awaitable[list[Any]]]
"""``fetch(sql, *args)``: one statement on a pooled connection, its records."""


@dataclass(eq=False)
class _Append:
    op: Op
    execution_id: str
    epoch: int
    owner: str
    rows: Rows
    answer: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


_LEAD = object()
"""What a queued append is answered with when it is its turn to write the queue."""


class Appends:
    """The group-commit queue of one store's appends (see the module's docstring)."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._queue: list[_Append] = []
        self._writing = False
        self.batches = 0
        """Statements that wrote more than one append (for tests and benchmarks)."""

    async def write(self, op: Op, execution_id: str, epoch: int, owner: str, rows: Rows) -> Written:
        """Write one append's entries under its lease; its records, or none if the lease is stale."""
        me = _Append(op, execution_id, epoch, owner, rows)
        if not self._writing:
            self._writing = True
            return await self._lead(me, [me])
        self._queue.append(me)
        try:
            answer = await me.answer
        except asyncio.CancelledError:
            # Cancelled while queued (a taken append is not cancelled: its op is committing).
            # It leaves the queue unwritten; a turn to write that came with the cancel goes on.
            if me in self._queue:
                self._queue.remove(me)
            if me.answer.done() and not me.answer.cancelled() and me.answer.result() is _LEAD:
                self._hand_on()
            raise
        if answer is _LEAD:
            # Appends cancelled since they queued are left out: their answer was cancelled with them.
            batch, self._queue = [item for item in self._queue if not item.answer.cancelled()], []
            return await self._lead(me, batch)
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]

    def _hand_on(self) -> None:
        """The queue's first append writes it next; with nothing queued, the next append goes alone."""
        self._queue = [item for item in self._queue if not item.answer.cancelled()]
        if self._queue:
            self._queue[0].answer.set_result(_LEAD)  # it takes the queue as it is then
        else:
            self._writing = False

    async def _lead(self, me: _Append, batch: list[_Append]) -> Written:
        """Write ``batch`` (holding ``me``), answer the others, and hand what queued meanwhile on."""
        for item in batch:
            item.op.commit()
        try:
            answers = await self._written(batch)
        except BaseException as exc:  # noqa: BLE001 - nothing may leave a queued caller waiting forever
            answers = dict.fromkeys(batch, exc)
        finally:
            self._hand_on()
        for item in batch:
            if item is not me and not item.answer.done():
                item.answer.set_result(answers[item])
        mine = answers[me]
        if isinstance(mine, BaseException):
            raise mine
        return mine

    async def _written(self, batch: list[_Append]) -> dict[_Append, Written | BaseException]:
        if len(batch) == 1:
            [item] = batch
            return {item: await self._alone(item)}
        try:
            records = await self._fetch(BATCH, *_batch_args(batch))
        except Exception as exc:
            if not _refused(exc):
                # The connection failed (reset, timed out): the batch may have committed with
                # its answer lost, and written again it would be written twice. Every append
                # of it is told; a recovery reads from the journal what it holds.
                raise
            # The server refused the statement (a deadlock with another process's batch, a
            # payload it rejects), so none of it committed: each append alone commits or fails alone.
            out: dict[_Append, Written | BaseException] = {}
            for item in batch:
                try:
                    out[item] = await self._alone(item)
                except Exception as exc:  # noqa: BLE001 - its caller is told, the others go on
                    out[item] = exc
            return out
        self.batches += 1
        written: dict[_Append, Written] = {item: [] for item in batch}
        for record in records:
            written[batch[record["item"] - 1]].append(record)
        return dict(written)

    async def _alone(self, item: _Append) -> Written:
        columns = [list(column) for column in zip(*item.rows, strict=True)]
        return await self._fetch(ALONE, item.execution_id, item.epoch, item.owner, len(item.rows), *columns)


def _refused(exc: BaseException) -> bool:
    """Whether the server answered the statement with an error (so its transaction rolled back)."""
    import asyncpg

    cause = exc.__cause__ if exc.__cause__ is not None else exc
    # Class 08 (connection exception) and 57 (operator intervention: the backend was shut
    # down or terminated) do not say whether a commit happened first.
    return (isinstance(cause, asyncpg.PostgresError) and not isinstance(cause, asyncpg.PostgresConnectionError)
            and not str(getattr(cause, "sqlstate", "") or "").startswith(("08", "57")))


def _batch_args(batch: list[_Append]) -> list[list[Any]]:
    ids, epochs, owners, counts = [], [], [], []
    entry_item, entry_pos, paths, labels, kinds, payloads = [], [], [], [], [], []
    for number, item in enumerate(batch, start=1):
        ids.append(item.execution_id)
        epochs.append(item.epoch)
        owners.append(item.owner)
        counts.append(len(item.rows))
        for pos, (path, label, kind, payload) in enumerate(item.rows, start=1):
            entry_item.append(number)
            entry_pos.append(pos)
            paths.append(path)
            labels.append(label)
            kinds.append(kind)
            payloads.append(payload)
    return [ids, epochs, owners, counts, entry_item, entry_pos, paths, labels, kinds, payloads]
