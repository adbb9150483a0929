"""`tether tokens create | list | revoke` on SQLite and Postgres, under both backends."""

from __future__ import annotations

import json

import anyio
from tether.runtime.ops._access import authenticate
from tether.stores import open_store

from .conftest import Tether


def principal(url: str, secret: str) -> tuple[str, list[str], list[str]] | None:
    async def main() -> tuple[str, list[str], list[str]] | None:
        async with open_store(url) as store:
            found = await authenticate(store, secret, admin_token=None)
            return None if found is None else (found.name, sorted(found.scopes), list(found.paths))

    return anyio.run(main)


def test_create_list_revoke(tether: Tether, url: str) -> None:
    assert tether("migrate")[0] == 0
    code, out, err = tether("tokens", "create", "support", "--scope", "approve", "--scope", "read",
                            "--path", "supervisor:planner/")
    assert code == 0, err
    secret = out.strip()
    assert secret.startswith("tether_") and "\n" not in secret  # alone on stdout, for $(...)
    assert "support" in err and "shown only now" in err
    assert principal(url, secret) == ("support", ["approve", "read"], ["supervisor:planner/"])

    code, out, _ = tether("tokens", "list")
    assert code == 0 and "support" in out and "supervisor:planner/" in out and "live" in out
    assert secret not in out
    code, out, _ = tether("tokens", "list", "--json")
    [row] = json.loads(out)
    assert row["name"] == "support" and row["scopes"] == ["read", "approve"] and "digest" not in row

    code, _, err = tether("tokens", "create", "support", "--scope", "read")
    assert code == 1 and "exists" in err and "tether tokens revoke support" in err
    assert principal(url, secret) is not None  # the refused create changed nothing

    assert tether("tokens", "revoke", "support")[0] == 0
    assert principal(url, secret) is None
    code, _, err = tether("tokens", "revoke", "support")
    assert code == 1 and "No live token 'support'" in err
    code, out, _ = tether("tokens", "list")
    assert "revoked" in out
    code, out, _ = tether("tokens", "create", "support", "--scope", "operate")
    assert code == 0 and principal(url, out.strip()) == ("support", ["operate"], [])


def test_bad_scopes_and_paths_are_refused(tether: Tether, url: str) -> None:
    assert tether("migrate")[0] == 0
    for args, says in ((["--scope", "read", "--path", "a:b"], "--scope approve"),
                       (["--scope", "admin", "--scope", "approve", "--path", "a:b"], "admin"),
                       (["--scope", "approve", "--path", "/"], "not empty"),
                       (["--scope", "root"], "is not one of")):
        code, out, err = tether("tokens", "create", "x", *args)
        assert code != 0 and says in err, (args, err)
        assert out == ""
    code, _, err = tether("tokens", "create", "admin", "--scope", "read")
    assert code == 1 and "TETHER_TOKEN" in err
    code, out, _ = tether("tokens", "list", "--json")
    assert json.loads(out) == []


def test_a_server_without_a_token_warns_that_stored_tokens_limit_nothing(tether: Tether, url: str,
                                                                          backend: str) -> None:
    from .test_browser import serving

    assert tether("migrate")[0] == 0
    assert tether("tokens", "create", "support", "--scope", "read")[0] == 0
    with serving(url, backend) as open_server:
        said = "".join(open_server.log)
    assert "stored token(s) (support) limit nothing here" in said and "TETHER_TOKEN" in said
    with serving(url, backend, "--token", "t") as guarded:
        assert "limit nothing" not in "".join(guarded.log)
