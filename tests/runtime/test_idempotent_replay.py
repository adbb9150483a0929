"""An @idempotent call answered from its record gives back what its body took, and finds old records."""

from __future__ import annotations

from typing import Any

from tether.actors import Chain
from tether.runtime import Resume, idempotent, interrupt
from tether.stores import Store

EFFECTS: list[str] = []


@idempotent
def charge(amount: int) -> str:
    if not interrupt("approve", {"amount": amount}).approved:
        return "refused"
    EFFECTS.append(f"charge {amount}")
    return "charged"


def charge_then_confirm(state: dict[str, Any]) -> dict[str, Any]:
    outcome = charge(state["amount"])
    # The same question again, at the same path and with the same context: only its own
    # decision may answer it, not the one the @idempotent body took.
    again = interrupt("approve", {"amount": state["amount"]}).approved
    return {"outcome": outcome, "again": again}


async def test_a_question_asked_twice_gets_each_decision_once(db_store: Store) -> None:
    EFFECTS.clear()
    chain = Chain("twice", [charge_then_confirm], store=db_store)
    assert (await chain.run({"amount": 5}, execution_id="t-1")).status == "paused"
    assert (await chain.resume("t-1", Resume(approved=True))).status == "paused"  # charged, then asks again
    assert EFFECTS == ["charge 5"]
    done = await chain.resume("t-1", Resume(approved=False))  # the second answer is no
    assert done.status == "completed"
    assert done.output == {"amount": 5, "outcome": "charged", "again": False}
    assert EFFECTS == ["charge 5"]


async def test_a_record_kept_under_the_older_key_is_found(db_store: Store) -> None:
    """A run paused by an earlier version (keys with the module's name) is not charged again."""
    EFFECTS.clear()

    @idempotent
    def refund(amount: int) -> str:
        EFFECTS.append(f"refund {amount}")
        return f"refunded {amount}"

    def refund_then_approve(state: dict[str, Any]) -> dict[str, Any]:
        receipt = refund(state["amount"])
        return {"receipt": receipt, "approved": interrupt("approve").approved}

    chain = Chain("older", [refund_then_approve], store=db_store)
    assert (await chain.run({"amount": 7}, execution_id="o-1")).status == "paused"
    assert EFFECTS == ["refund 7"]
    # Move the record to the key an earlier version wrote it under, value and all.
    [(key, value)] = [(k, v) for k, v in await records(db_store, "o-1")]
    older = key.replace(f"|{refund.__qualname__}|", f"|{refund.__module__}.{refund.__qualname__}|")
    assert older != key
    await rewrite(db_store, "o-1", key, older, value["v"])
    done = await chain.resume("o-1", Resume(approved=True))
    assert done.output == {"amount": 7, "receipt": "refunded 7", "approved": True}
    assert EFFECTS == ["refund 7"]  # found under the older key: not refunded twice


async def records(store: Store, execution_id: str) -> list[tuple[str, Any]]:
    """The idempotency records of an execution, read as an operator's SQL would."""
    from tether.stores import PostgresStore, SQLiteStore

    if isinstance(store, SQLiteStore):
        import sqlite3

        with sqlite3.connect(store.path) as db:
            rows = db.execute("SELECT key FROM tether_idempotency WHERE execution_id = ?", (execution_id,))
            keys = [r[0] for r in rows]
    else:
        assert isinstance(store, PostgresStore)
        rows = await store._fetch("SELECT key FROM tether_idempotency WHERE execution_id = $1", execution_id)
        keys = [r["key"] for r in rows]
    found = []
    for key in keys:
        record = await store.get_idempotent(execution_id, key)
        assert record is not None
        found.append((key, record.value))
    return found


async def rewrite(store: Store, execution_id: str, key: str, older: str, value: Any) -> None:
    """Delete the record at ``key`` and write ``value`` (unwrapped, as earlier versions did) at ``older``."""
    from tether.stores import PostgresStore, SQLiteStore

    if isinstance(store, SQLiteStore):
        import sqlite3

        with sqlite3.connect(store.path) as db:
            db.execute("DELETE FROM tether_idempotency WHERE execution_id = ? AND key = ?", (execution_id, key))
    else:
        assert isinstance(store, PostgresStore)
        await store._fetch("DELETE FROM tether_idempotency WHERE execution_id = $1 AND key = $2",
                           execution_id, key, write=True)
    lease = await store.acquire_lease(execution_id, owner="migration", lease_seconds=60)
    await store.put_idempotent(lease, older, value)
    await store.release_lease(lease, status="paused")
