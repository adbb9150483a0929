from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.conftest import STORE_KINDS, make_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from tether.stores import Store

# The store's own tests also run SQLite at synchronous=NORMAL, whose writes take
# another path (committed on the caller's thread when the connection is idle).


@pytest.fixture(params=[*STORE_KINDS, "sqlite-normal"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with make_store(request.param, tmp_path, request) as opened:
        yield opened


@pytest.fixture(params=["sqlite", "sqlite-normal", "postgres"])
async def db_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with make_store(request.param, tmp_path, request) as opened:
        yield opened
