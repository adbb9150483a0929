"""The driver loop under both backends: work that arrives while no operation is in flight.

Under trio the driver's asyncio loop only runs when the trio run drives it, so
these check the cases where nobody is awaiting an operation: a timer the driver
set, work another thread hands it, a connection's own callbacks. Cancellation
is covered, for every store, by test_cancellation.py.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import TYPE_CHECKING

import anyio
import pytest
import sniffio
from tether.stores import PostgresStore, UsageError
from tether.stores._bridge import open_driver_loop, threadsafe_caller

from tests.conftest import make_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from tether.stores import Store
    from tether.stores._bridge import DriverLoop, Op


@pytest.fixture
async def driver() -> AsyncIterator[DriverLoop]:
    loop = open_driver_loop()
    try:
        yield loop
    finally:
        await loop.aclose()


async def test_a_timer_the_driver_set_fires_with_no_operation_in_flight(driver: DriverLoop) -> None:
    fired = anyio.Event()
    wake = threadsafe_caller(fired.set)

    async def arm(op: Op) -> None:
        asyncio.get_running_loop().call_later(0.05, wake)

    await driver.run(arm)  # returns at once; the timer is the driver loop's own
    with anyio.fail_after(5):
        await fired.wait()


async def test_work_from_another_thread_runs_with_no_operation_in_flight(driver: DriverLoop) -> None:
    ran = anyio.Event()
    wake = threadsafe_caller(ran.set)

    async def driver_loop(op: Op) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    loop = await driver.run(driver_loop)
    seen: list[str] = []

    def on_the_driver_loop() -> None:
        seen.append(threading.current_thread().name)
        wake()

    threading.Thread(target=lambda: loop.call_soon_threadsafe(on_the_driver_loop)).start()
    with anyio.fail_after(5):
        await ran.wait()
    assert seen == [threading.current_thread().name]  # the driver loop runs in the caller's thread


async def test_an_operation_runs_as_asyncio_code(driver: DriverLoop) -> None:
    async def library(op: Op) -> str:
        await asyncio.sleep(0)
        return sniffio.current_async_library()

    assert await driver.run(library) == "asyncio"
    assert sniffio.current_async_library() in ("asyncio", "trio")  # the caller's is left as it was


async def test_many_operations_at_once_each_get_their_own_result(driver: DriverLoop) -> None:
    results: dict[int, int] = {}

    async def one(n: int) -> None:
        async def op_fn(op: Op) -> int:
            await asyncio.sleep(0.001 * (n % 5))
            return n * n

        results[n] = await driver.run(op_fn)

    async with anyio.create_task_group() as tg:
        for n in range(200):
            tg.start_soon(one, n)
    assert results == {n: n * n for n in range(200)}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_store_belongs_to_the_run_that_opened_it(
        backend: str, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = make_store(kind, tmp_path, request)

    async def used(store: Store) -> None:
        await store.setup()
        async with store.watch_controls("some-run", lambda: None):  # Postgres keeps a LISTEN connection
            await store.list_pending()

    anyio.run(used, store, backend=backend)
    with pytest.raises(UsageError, match="another event loop"):
        anyio.run(store.list_pending, backend=backend)
    anyio.run(store.aclose, backend=backend)  # still closes, from any run, its connections too
    with pytest.raises(UsageError, match="closed"):
        anyio.run(store.list_pending, backend=backend)
    del store
    gc.collect()  # a connection or an event loop left unclosed would warn here, and fail the test
    if kind == "postgres":
        schema = make_store(kind, tmp_path, request)
        assert isinstance(schema, PostgresStore)
        anyio.run(schema.drop_schema, backend=backend)
