"""Searching executions (filters, newest first, keyset pages) and access tokens, on every store."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from tether.stores import (
    ConfigurationError,
    Execution,
    ExecutionSearch,
    ExecutionStatus,
    MemoryStore,
    NewExecution,
    PostgresStore,
    SQLiteStore,
    Store,
    TokenRow,
)
from tether.stores._protocol import ancestors, prefix_range
from tether.stores._sqlite.store import search_sql

from tests._postgres import admin_sql

OWNER = "proc-a"
T0 = datetime(2020, 1, 1, 12, 0, tzinfo=UTC)  # before any execution made "now"


async def add(store: Store, execution_id: str, *, runner: str = "Chain", root: str = "chain:refund",
              version: str = "", thread: str | None = None, status: ExecutionStatus = "queued") -> None:
    new = NewExecution(execution_id=execution_id, runner=runner, root_path=root, version=version, thread=thread)
    if status == "queued":
        assert (await store.enqueue_execution(new)).created
        return
    started = await store.start_execution(new, owner=OWNER, lease_seconds=60)
    assert started.lease is not None
    if status != "running":
        await store.release_lease(started.lease, status=status, error="Boom" if status == "failed" else None)


async def created_at(store: Store, times: dict[str, datetime]) -> None:
    """Set executions' creation times, which the stores otherwise take from their clock (for ties, and ranges)."""
    if isinstance(store, MemoryStore):
        for execution_id, at in times.items():
            run = store._runs[execution_id]
            run.execution = run.execution.model_copy(update={"created_at": at})
    elif isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as db:
            db.executemany("UPDATE tether_executions SET created_at = ? WHERE id = ?",
                           [((at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1), execution_id)
                            for execution_id, at in times.items()])
        db.close()
    else:
        assert isinstance(store, PostgresStore)
        await anyio.to_thread.run_sync(
            admin_sql, store.dsn,
            f'UPDATE "{store.schema}".tether_executions e SET created_at = v.at '
            "FROM unnest($1::text[], $2::timestamptz[]) AS v(id, at) WHERE e.id = v.id",
            list(times), list(times.values()))


async def ids(store: Store, limit: int = 50, before: Execution | None = None, **search: Any) -> list[str]:
    return [e.execution_id for e in await store.search_executions(ExecutionSearch(**search), limit=limit,
                                                                  before=before)]


# -- order and pages -------------------------------------------------------------


async def test_newest_first_and_pages_neither_repeat_nor_skip_across_equal_times(store: Store) -> None:
    names = [f"p{i:02d}" for i in range(10)]
    for name in names:
        await add(store, name)
    # Ties of created_at that a page boundary cuts through: the id decides among them.
    groups = [names[0:3], names[3:5], names[5:6], names[6:10]]
    await created_at(store, {n: T0 + timedelta(seconds=g) for g, group in enumerate(groups) for n in group})
    newest_first = list(reversed(names))
    assert [e.execution_id for e in await store.search_executions()] == newest_first
    for limit in (1, 2, 3, 4):
        seen: list[str] = []
        before: Execution | None = None
        while page := await store.search_executions(limit=limit, before=before):
            assert len(page) <= limit
            seen += [e.execution_id for e in page]
            before = page[-1]
        assert seen == newest_first, limit


async def test_pages_hold_while_executions_change_and_new_ones_arrive(store: Store) -> None:
    for name in ("a", "b", "c", "d"):
        await add(store, name, status="running")
    await created_at(store, {"a": T0, "b": T0, "c": T0 + timedelta(seconds=1), "d": T0 + timedelta(seconds=1)})
    first = await store.search_executions(limit=2)
    assert [e.execution_id for e in first] == ["d", "c"]
    # A row of the first page is updated, and a newer execution starts: the next page is unmoved.
    lease = await store.acquire_lease("d", owner=OWNER, lease_seconds=60)
    await store.release_lease(lease, status="completed")
    await add(store, "e")
    assert await ids(store, before=first[-1]) == ["b", "a"]
    assert (await ids(store))[0] == "e"


async def test_a_search_returns_whole_rows_and_refuses_a_negative_limit(store: Store) -> None:
    await add(store, "one", runner="SupervisorActor", root="supervisor:planner", version="v1", thread="chat-1",
              status="failed")
    await add(store, "other", runner="SupervisorActor", root="supervisor:triage", version="v1")
    [found] = await store.search_executions(ExecutionSearch(root_path="supervisor:planner"))
    assert found == await store.get_execution("one")
    assert (found.status, found.error, found.thread) == ("failed", "Boom", "chat-1")
    assert await store.search_executions(limit=0) == []
    with pytest.raises(ConfigurationError, match="negative"):
        await store.search_executions(limit=-1)


# -- filters ---------------------------------------------------------------------

ROWS: list[tuple[str, str, str, str, str | None, ExecutionStatus]] = [
    # id, runner (its root actor's class), root path, version, thread, status; created a minute
    # apart, in this order. The supervisors share a class: only the root path tells them apart.
    ("e1", "Chain", "chain:refund", "", None, "completed"),
    ("e2", "Chain", "chain:refund", "v2", "chat-7", "failed"),
    ("e3", "SupervisorActor", "supervisor:planner", "v1", "chat-7", "running"),
    ("e4", "SupervisorActor", "supervisor:planner", "v2", None, "queued"),
    ("e5", "SupervisorActor", "supervisor:planner2", "v1", None, "completed"),
    ("e6", "SupervisorActor", "Supervisor:planner", "v1", None, "queued"),
    ("e7", "SupervisorActor", "supervisor:planner/worker:a", "v1", None, "queued"),
    ("e8", "Chain", "chain:refund", "", "chat-8", "queued"),
]


def minute(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


async def seeded(store: Store) -> None:
    for execution_id, runner, root, version, thread, status in ROWS:
        await add(store, execution_id, runner=runner, root=root, version=version, thread=thread, status=status)
    await created_at(store, {row[0]: minute(n) for n, row in enumerate(ROWS, start=1)})


CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({}, ["e8", "e7", "e6", "e5", "e4", "e3", "e2", "e1"]),
    ({"status": "queued"}, ["e8", "e7", "e6", "e4"]),
    ({"status": "completed"}, ["e5", "e1"]),
    ({"status": "failed"}, ["e2"]),
    ({"status": "paused"}, []),
    # The whole root path, case and all: not a prefix of it (planner2, planner/worker:a), nor its class.
    ({"root_path": "chain:refund"}, ["e8", "e2", "e1"]),
    ({"root_path": "Chain:refund"}, []),
    ({"root_path": "chain:ref"}, []),
    ({"root_path": "supervisor:planner"}, ["e4", "e3"]),
    ({"root_path": "Supervisor:planner"}, ["e6"]),
    ({"root_path": "supervisor:planner/worker:a"}, ["e7"]),
    ({"root_path": "supervisor:planner/"}, []),
    ({"root_path": "supervisor"}, []),
    ({"root_path": "SupervisorActor"}, []),
    ({"root_path": ""}, []),
    ({"version": "v1"}, ["e7", "e6", "e5", "e3"]),
    ({"version": ""}, ["e8", "e1"]),
    ({"version": "V1"}, []),
    ({"root_path": "chain:refund", "version": ""}, ["e8", "e1"]),
    ({"root_path": "supervisor:planner", "version": "v2"}, ["e4"]),
    ({"root_path": "supervisor:planner", "version": "v1"}, ["e3"]),
    ({"root_path": "chain:refund", "version": "v1"}, []),
    ({"thread": "chat-7"}, ["e3", "e2"]),
    ({"since": minute(4)}, ["e8", "e7", "e6", "e5", "e4"]),  # at or after
    ({"until": minute(4)}, ["e3", "e2", "e1"]),  # before
    ({"since": minute(3), "until": minute(6)}, ["e5", "e4", "e3"]),
    ({"id_prefix": ""}, ["e8", "e7", "e6", "e5", "e4", "e3", "e2", "e1"]),
    ({"id_prefix": "e3"}, ["e3"]),
    # Starts with it (planner2 too: a prefix, not a path), or is a root the prefix lies under.
    ({"path_prefix": ""}, ["e8", "e7", "e6", "e5", "e4", "e3", "e2", "e1"]),
    ({"path_prefix": "supervisor"}, ["e7", "e5", "e4", "e3"]),
    ({"path_prefix": "supervisor:planner"}, ["e7", "e5", "e4", "e3"]),
    ({"path_prefix": "supervisor:planner/"}, ["e7", "e4", "e3"]),
    ({"path_prefix": "supervisor:planner/worker"}, ["e7", "e4", "e3"]),
    ({"path_prefix": "supervisor:planner/worker:a"}, ["e7", "e4", "e3"]),
    ({"path_prefix": "supervisor:planner/worker:a/tool:x"}, ["e7", "e4", "e3"]),
    ({"path_prefix": "supervisor:planner/worker:b"}, ["e4", "e3"]),
    ({"path_prefix": "Supervisor:"}, ["e6"]),
    ({"path_prefix": "SUPERVISOR:planner"}, []),
    ({"path_prefix": "chain:refund/node:a"}, ["e8", "e2", "e1"]),
    ({"path_prefix": "chain:refunds/node:a"}, []),
    # Filters together: each narrows the others.
    ({"status": "queued", "root_path": "supervisor:planner", "path_prefix": "supervisor:planner/"}, ["e4"]),
    ({"root_path": "supervisor:planner/worker:a", "path_prefix": "supervisor:planner/"}, ["e7"]),
    ({"root_path": "chain:refund", "version": "", "since": minute(2)}, ["e8"]),
    ({"root_path": "chain:refund", "status": "queued"}, ["e8"]),
    ({"thread": "chat-7", "status": "running"}, ["e3"]),
    ({"status": "queued", "until": minute(7), "path_prefix": "supervisor:planner"}, ["e4"]),
]


@pytest.mark.parametrize(("search", "expected"), CASES, ids=[str(case[0]) for case in CASES])
async def test_each_filter_alone_and_together(store: Store, search: dict[str, Any], expected: list[str]) -> None:
    await seeded(store)
    assert await ids(store, **search) == expected


async def test_filters_are_anded_each_one_can_exclude_the_match(store: Store) -> None:
    await seeded(store)
    everything: dict[str, Any] = {
        "status": "running", "root_path": "supervisor:planner", "version": "v1", "thread": "chat-7", "since": minute(3),
        "until": minute(4), "path_prefix": "supervisor:planner/worker:z", "id_prefix": "e3",
    }
    assert await ids(store, **everything) == ["e3"]
    wrong = {"status": "queued", "root_path": "supervisor:planner2", "version": "v2", "thread": "chat-8", "since": minute(4),
             "until": minute(3), "path_prefix": "chain:", "id_prefix": "e4"}
    for field, value in wrong.items():
        assert await ids(store, **{**everything, field: value}) == [], field


async def test_a_filtered_search_pages_within_its_matches(store: Store) -> None:
    await seeded(store)
    # Each search's matches lie apart, among rows it skips; pages of one and of two.
    for search, expected in ((ExecutionSearch(root_path="chain:refund"), ["e8", "e2", "e1"]),
                             (ExecutionSearch(root_path="chain:refund", version=""), ["e8", "e1"]),
                             (ExecutionSearch(version="v1"), ["e7", "e6", "e5", "e3"])):
        for limit in (1, 2):
            seen: list[str] = []
            before: Execution | None = None
            while page := await store.search_executions(search, limit=limit, before=before):
                assert len(page) <= limit
                seen += [e.execution_id for e in page]
                before = page[-1]
            assert seen == expected, (search, limit)


TRICKY_IDS = ["job%1", "job_1", "jobx1", "job/1", "job?1", "job\\1", "job-ü", "jöb-1", "JOB-1", "jo",
              "a", "a\U0010ffff", "a\U0010ffffz", "b", "\ud7ffx", "\ue000", "日本-1", "日本語-2"]


@pytest.mark.parametrize(("prefix", "expected"), [
    ("job%", {"job%1"}),  # no LIKE: % and _ are themselves
    ("job_", {"job_1"}),
    ("job/", {"job/1"}),
    ("job?", {"job?1"}),
    ("job\\", {"job\\1"}),
    ("job", {"job%1", "job_1", "jobx1", "job/1", "job?1", "job\\1", "job-ü"}),  # case-sensitive
    ("JOB", {"JOB-1"}),
    ("jö", {"jöb-1"}),
    ("jo", {"job%1", "job_1", "jobx1", "job/1", "job?1", "job\\1", "job-ü", "jo"}),  # the whole id too
    ("job-ü", {"job-ü"}),
    ("日本", {"日本-1", "日本語-2"}),
    ("日本語", {"日本語-2"}),
    ("a", {"a", "a\U0010ffff", "a\U0010ffffz"}),  # the upper bound misses no character after the prefix
    ("a\U0010ffff", {"a\U0010ffff", "a\U0010ffffz"}),
    ("\ud7ff", {"\ud7ffx"}),  # the bound steps over the surrogates, to U+E000, which it leaves out
    ("nothing", set()),
])
async def test_an_id_prefix_matches_exactly(store: Store, prefix: str, expected: set[str]) -> None:
    for execution_id in TRICKY_IDS:
        await add(store, execution_id)
    found = await ids(store, id_prefix=prefix)
    assert len(found) == len(set(found))
    assert set(found) == expected


def test_prefix_ranges_and_ancestors() -> None:
    assert prefix_range("ab") == ("ab", "ac")
    assert prefix_range("a\U0010ffff\U0010ffff") == ("a\U0010ffff\U0010ffff", "b")
    assert prefix_range("\U0010ffff") == ("\U0010ffff", None)
    assert prefix_range("x\ud7ff") == ("x\ud7ff", "x\ue000")
    assert ancestors("a:x/b:y/c:z") == ["a:x", "a:x/b:y"]
    assert ancestors("supervisor:planner/") == ["supervisor:planner"]
    assert ancestors("a:x") == []
    assert ancestors("/a//b") == ["/a", "/a/"]


async def test_every_sqlite_filter_is_served_by_an_index(tmp_path: Any) -> None:
    async with SQLiteStore(tmp_path / "plans.db") as store:
        await store.count_pending()
    before = Execution(execution_id="x", runner="r", root_path="p", fingerprint="", status="queued", input=None,
                       created_at=T0, updated_at=T0)
    expected = {
        "tether_executions_by_created": [ExecutionSearch(), ExecutionSearch(since=T0), ExecutionSearch(until=T0)],
        "tether_executions_by_status_created": [ExecutionSearch(status="failed")],
        "tether_executions_by_root_version": [ExecutionSearch(root_path="a:x", version="v")],
        "tether_executions_by_version": [ExecutionSearch(version="v")],
        "tether_executions_by_thread": [ExecutionSearch(thread="t")],
        "tether_executions_by_root": [ExecutionSearch(root_path="a:x"), ExecutionSearch(path_prefix="a:x"),
                                      ExecutionSearch(path_prefix="a:x/b:y")],
        "sqlite_autoindex_tether_executions_1": [ExecutionSearch(id_prefix="ab")],  # the primary key
    }
    with sqlite3.connect(tmp_path / "plans.db") as db:
        for index, searches in expected.items():
            for search in searches:
                for page in (None, before):
                    sql, params = search_sql(search, 50, page)
                    plan = " | ".join(row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params))
                    assert f"USING INDEX {index} " in plan or plan.endswith(f"USING INDEX {index}"), plan
                    assert "SCAN tether_executions |" not in plan and not plan.endswith("SCAN tether_executions")
                    # Equalities and times read their index in order: a page stops at its limit.
                    # A prefix is a range of the index, which is not in creation order.
                    if not (search.path_prefix or search.id_prefix):
                        assert "TEMP B-TREE" not in plan, plan
    db.close()


# -- tokens ----------------------------------------------------------------------


def token(name: str, digest: str, at: datetime = T0, **fields: Any) -> TokenRow:
    return TokenRow(name=name, digest=digest, scopes=fields.pop("scopes", ["read"]), created_at=at, **fields)


async def test_tokens_are_kept_found_by_digest_and_listed_by_name(store: Store) -> None:
    ops = token("ops", "d-ops", T0 + timedelta(microseconds=123456), scopes=["read", "approve"],
                paths=["supervisor:planner/", "chain:refund"])
    ci = token("ci", "d-ci", T0 + timedelta(hours=1), scopes=["admin"])
    await store.create_token(ops)
    await store.create_token(ci)
    assert await store.find_token("d-ops") == ops
    assert await store.find_token("d-ci") == ci
    assert await store.find_token("d-none") is None
    assert await store.find_token("D-OPS") is None
    assert await store.list_tokens() == [ci, ops]
    found = await store.find_token("d-ops")
    assert found is not None
    found.scopes.append("admin")  # a reader's copy: the store's row is not changed through it
    assert await store.find_token("d-ops") == ops


async def test_a_live_name_is_refused_and_nothing_changes(store: Store) -> None:
    first = token("ops", "d-1")
    await store.create_token(first)
    message = "A token named 'ops' exists: revoke it first (tether tokens revoke ops) or pick another name."
    with pytest.raises(ConfigurationError) as refused:
        await store.create_token(token("ops", "d-2", T0 + timedelta(seconds=1), scopes=["admin"]))
    assert str(refused.value) == message
    assert await store.find_token("d-2") is None
    assert await store.list_tokens() == [first]


async def test_a_revoked_token_is_not_found_and_its_name_may_be_used_again(store: Store) -> None:
    old = token("ops", "d-old")
    await store.create_token(old)
    await store.create_token(token("ci", "d-ci"))
    revoked_at = T0 + timedelta(days=1, microseconds=7)
    assert await store.revoke_token("ops", at=revoked_at)
    assert await store.find_token("d-old") is None
    assert await store.find_token("d-ci") is not None  # only that one
    assert not await store.revoke_token("ops", at=revoked_at)  # no live one left
    assert not await store.revoke_token("nobody", at=revoked_at)
    new = token("ops", "d-new", T0 + timedelta(days=2))
    await store.create_token(new)
    assert await store.find_token("d-new") == new
    assert [(t.name, t.digest, t.revoked_at) for t in await store.list_tokens()] == [
        ("ci", "d-ci", None), ("ops", "d-old", revoked_at), ("ops", "d-new", None)]
    assert await store.revoke_token("ops", at=revoked_at + timedelta(days=2))
    assert await store.find_token("d-new") is None
    assert await store.find_token("d-old") is None


async def test_a_digest_already_kept_is_refused_even_when_revoked(store: Store) -> None:
    await store.create_token(token("old", "d-1"))
    await store.revoke_token("old", at=T0)
    with pytest.raises(ConfigurationError, match="digest exists"):
        await store.create_token(token("new", "d-1"))
    assert await store.find_token("d-1") is None  # the revoked token is not brought back
    assert [t.name for t in await store.list_tokens()] == ["old"]


async def test_concurrent_creates_of_one_name_make_one_token(store: Store) -> None:
    outcomes: list[str] = []

    async def create(digest: str) -> None:
        try:
            await store.create_token(token("race", digest))
        except ConfigurationError:
            outcomes.append("refused")
        else:
            outcomes.append(digest)

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(create, f"d-{i}")
    [made] = [outcome for outcome in outcomes if outcome != "refused"]
    assert outcomes.count("refused") == 5
    assert [t.digest for t in await store.list_tokens()] == [made]


async def test_tokens_outlive_the_executions_pruned_or_deleted(store: Store) -> None:
    kept = token("ops", "d-ops")
    await store.create_token(kept)
    await add(store, "done", status="completed")
    await add(store, "gone", status="completed")
    assert await store.delete_execution("gone")
    assert await store.prune(older_than=datetime.now(UTC) + timedelta(days=1)) == 1
    assert await store.list_tokens() == [kept]
    assert await store.find_token("d-ops") == kept


async def test_sqlite_check_reads_the_tokens(tmp_path: Any) -> None:
    path = tmp_path / "tokens.db"
    async with SQLiteStore(path) as store:
        await store.create_token(token("ops", "d-ops"))
        assert await store.check() == []
    with sqlite3.connect(path) as db:
        db.execute("UPDATE tether_tokens SET paths = '[not json' WHERE digest = 'd-ops'")
    db.close()
    async with SQLiteStore(path) as store:
        [problem] = await store.check()
    assert problem.startswith("tether_tokens row ('d-ops'): paths is not JSON")


async def test_an_id_prefix_with_many_matches_still_pages_them_all(store: Store) -> None:
    # Past a thousand ids under a prefix, Postgres reads by creation time rather than by id: same rows.
    for n in range(1003):
        await add(store, f"bulk-{n:04d}")
    await add(store, "bulk", root="chain:other")
    await add(store, "bulj-9")
    every = await ids(store, limit=2000, id_prefix="bulk-")
    assert len(every) == 1003 and set(every) == {f"bulk-{n:04d}" for n in range(1003)}
    assert await ids(store, limit=2000, id_prefix="bulk-100") == ["bulk-1002", "bulk-1001", "bulk-1000"]
    first = await store.search_executions(ExecutionSearch(id_prefix="bulk-"), limit=600)
    rest = await store.search_executions(ExecutionSearch(id_prefix="bulk-"), limit=600, before=first[-1])
    assert len(first) == 600 and len(rest) == 403
    assert {e.execution_id for e in first} | {e.execution_id for e in rest} == set(every)
    assert await ids(store, limit=2000, id_prefix="bulk", root_path="chain:other") == ["bulk"]
