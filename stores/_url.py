"""`open_store(url)`: one string names any store, for CLIs and configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from ._errors import ConfigurationError
from ._memory import MemoryStore
from ._postgres import PostgresStore
from ._sqlite import SQLiteStore

if TYPE_CHECKING:
    from ._protocol import Store


def open_store(url: str, *, create: bool = True) -> Store:
    """Build the store a URL names. Nothing is opened until first use.

    - ``sqlite:///relative/app.db`` or ``sqlite:////absolute/app.db``, with an optional
      ``?synchronous=NORMAL``;
    - ``postgresql://user@host:5432/db`` (or ``postgres://``), with an optional
      ``?schema=name`` for tether's tables and ``?command_timeout=seconds`` (or
      ``none``) for `PostgresStore`'s bound on one operation (the other
      parameters go to the driver);
    - ``memory://``.

    With ``create=False`` (the operator's read commands) the store creates
    nothing: it opens an existing tether store of this version or raises
    `StoreNotFound` or `SchemaVersionError` (a memory store is always new, and
    ignores it).

    Raises:
        ConfigurationError: The URL names no store tether knows.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("postgresql", "postgres"):
        # tether's own options; every other query parameter is the driver's.
        query = parse_qs(parts.query, keep_blank_values=True)
        schema = query.pop("schema", [None])[-1]
        timeout = query.pop("command_timeout", [None])[-1]
        settings: dict[str, Any] = {"schema": schema, "create": create}
        if timeout is not None:
            settings["command_timeout"] = _seconds(timeout)
        if schema is None and timeout is None:
            return PostgresStore(url, **settings)
        rest = urlencode(query, doseq=True)
        return PostgresStore(urlunsplit(parts._replace(query=rest)), **settings)
    if scheme == "memory":
        return MemoryStore()
    if scheme == "sqlite":
        path = url[len("sqlite://"):].split("?", 1)[0]
        if not path.startswith("/") or path == "/":
            raise ConfigurationError(
                f"{url!r} names no file. Write sqlite:///relative.db or sqlite:////absolute.db."
            )
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        synchronous = options.pop("synchronous", "FULL").upper()
        if options:
            raise ConfigurationError(
                f"Unknown option(s) {sorted(options)} in {url!r}; only 'synchronous' is supported."
            )
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError(f"synchronous={synchronous!r} in {url!r}; use FULL or NORMAL.")
        return SQLiteStore(path[1:], create=create, synchronous=synchronous)  # type: ignore[arg-type]
    raise ConfigurationError(
        f"Cannot open a store from {url!r}: use sqlite:///path.db, postgresql://... or memory://."
    )


def _seconds(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise ConfigurationError(
            f"command_timeout={text!r} in the store's URL is not a number of seconds; write e.g. ?command_timeout=10, "
            f"or ?command_timeout=none for no bound."
        ) from None
