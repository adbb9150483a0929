"""Command-line options the store benchmarks share: which stores, which backend, which Postgres."""

from __future__ import annotations

import argparse

KINDS = ("sqlite", "postgres")


def add_store_options(parser: argparse.ArgumentParser, database: str) -> None:
    """``--stores``, ``--backend`` and ``--postgres`` (an admin DSN; ``database`` is made there and dropped)."""
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help=f"admin DSN; the database {database} is created there and dropped at the end")


def chosen_stores(parser: argparse.ArgumentParser, stores: str) -> list[str]:
    """The store kinds ``--stores`` names, in its order; a parser error for anything else."""
    kinds = [k.strip() for k in stores.split(",") if k.strip()]
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--stores {stores!r}: give sqlite, postgres or both")
    return kinds
