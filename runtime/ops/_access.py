"""Who may do what on the operator server: access tokens and their scopes.

A token has a name, a random secret shown once when it is made, and scopes:

- ``read``: list and show executions, pending interrupts, their state and events;
- ``approve``: decide pending interrupts, optionally only under some path prefixes;
- ``operate``: cancel, retry, fork, and send messages;
- ``admin``: all of the above, under every path.

Every scope includes ``read``. The store keeps only the SHA-256 of a secret, so a
copy of the database lets nobody in; a secret is 256 random bits, so a plain hash
is as strong as a slow one. The server's own ``TETHER_TOKEN`` is an admin token
named ``admin`` that no store holds.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, get_args

from tether.stores import ConfigurationError, TokenRow

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from tether.stores import Store

Scope = Literal["read", "approve", "operate", "admin"]
SCOPES: tuple[Scope, ...] = get_args(Scope)
PREFIX = "tether_"
"""The start of every secret, so a leaked one is recognisable in logs and by secret scanners."""


@dataclass(frozen=True)
class Principal:
    """Whoever a request came from: a token's name and what it may do."""

    name: str
    scopes: frozenset[str]
    paths: tuple[str, ...] = ()
    """The prefixes ``approve`` is limited to; empty: every path."""
    anonymous: bool = False
    """A server without a token: everyone on its loopback may do everything."""
    server: bool = False
    """The server's own token (``TETHER_TOKEN``), which no store holds."""

    def lacks(self, scope: Scope, path: str | None = None) -> str | None:
        """Why this principal may not do ``scope`` (at ``path``), or None when it may."""
        if "admin" in self.scopes or (scope == "read" and self.scopes):
            return None
        if scope not in self.scopes:
            return (f"The token {self.name!r} has the scopes {', '.join(sorted(self.scopes))}; this needs "
                    f"{scope!r}. Nothing was done: ask an admin for a token with it (tether tokens create).")
        if scope == "approve" and path is not None and self.paths and not under(path, self.paths):
            return (f"The token {self.name!r} may approve only under {', '.join(self.paths)}, not at {path}. "
                    f"Nothing was claimed.")
        return None

    def may(self, scope: Scope, path: str | None = None) -> bool:
        return self.lacks(scope, path) is None


ANYONE = Principal("", frozenset({"admin"}), anonymous=True)
SERVER = Principal("admin", frozenset({"admin"}), server=True)


def under(path: str, prefixes: Iterable[str]) -> bool:
    """Whether ``path`` is one of ``prefixes`` or lies below one, by whole segments.

    ``supervisor:planner`` and ``supervisor:planner/`` both cover
    ``supervisor:planner/worker:a``, but not ``supervisor:planner2``.
    """
    for prefix in prefixes:
        stem = prefix.rstrip("/")
        if path == stem or path.startswith(stem + "/"):
            return True
    return False


def digest(secret: str) -> str:
    """What the store keeps of a secret, and looks a presented one up by."""
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_scopes(scopes: Sequence[str], paths: Sequence[str]) -> tuple[list[str], list[str]]:
    """Checked scopes and path prefixes for a new token.

    Raises:
        ConfigurationError: An unknown scope, none at all, an empty prefix, or prefixes without ``approve``.
    """
    unknown = [scope for scope in scopes if scope not in SCOPES]
    if unknown or not scopes:
        raise ConfigurationError(f"Scopes are {', '.join(SCOPES)}; got {', '.join(map(repr, scopes)) or 'none'}. "
                                 f"Give at least one, like --scope read --scope approve.")
    if any(not prefix.strip("/") for prefix in paths):
        raise ConfigurationError("A --path is an agent path prefix like supervisor:planner/, not empty.")
    if paths and "approve" not in scopes:
        raise ConfigurationError("--path limits what a token may approve: give it with --scope approve.")
    if paths and "admin" in scopes:
        raise ConfigurationError("An admin token approves everywhere: --path does not apply to --scope admin.")
    return sorted(set(scopes), key=SCOPES.index), list(dict.fromkeys(paths))


async def create_token(store: Store, name: str, scopes: Sequence[str], paths: Sequence[str] = ()) -> str:
    """Make a token and return its secret: the only time anyone sees it.

    Raises:
        ConfigurationError: Bad scopes or paths, or a live token of that name exists.
    """
    checked, prefixes = parse_scopes(scopes, paths)
    if name == "admin":
        raise ConfigurationError("'admin' is the name of the server's TETHER_TOKEN: pick another name.")
    secret = PREFIX + secrets.token_urlsafe(32)
    await store.create_token(TokenRow(name=name, digest=digest(secret), scopes=checked, paths=prefixes,
                                      created_at=datetime.now(UTC)))
    return secret


async def authenticate(store: Store, secret: str, admin_token: str | None) -> Principal | None:
    """The principal a presented secret stands for, or None (unknown or revoked: looked up every time)."""
    if admin_token is not None and hmac.compare_digest(secret.encode(), admin_token.encode()):
        return SERVER
    if not secret.startswith(PREFIX):
        return None
    return await principal_of(store, digest(secret))


async def principal_of(store: Store, token_digest: str) -> Principal | None:
    """The live token with this digest, as a principal; None once it is revoked."""
    row = await store.find_token(token_digest)
    if row is None:
        return None
    return Principal(row.name, frozenset(row.scopes), tuple(row.paths))
