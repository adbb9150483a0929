"""`tether serve`: the HTTP API and /approvals page on uvicorn (asyncio) or hypercorn (trio)."""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING

import anyio
from tether.stores import ConfigurationError, StoreNotFound, StoreUnavailable, open_store

from ._http import create_app

if TYPE_CHECKING:
    from tether.runtime._executions.runner import Runner

log = logging.getLogger("tether.runtime.ops.http")


def serve_forever(store_url: str, runners: list[Runner], *, host: str, port: int, token: str | None,
                  backend: str) -> None:
    """Serve until interrupted. Off loopback, a token is required.

    Without ``runners`` it still serves, and warns that a decision made here is
    only recorded: a worker, or `tether resume ID --app ...`, carries it out.

    Raises:
        ConfigurationError: A non-loopback ``host`` without a token.
    """
    if token is None and not _loopback(host):
        raise ConfigurationError(
            f"Refusing to serve on {host} without a token: anyone who reaches it could approve. "
            f"Set TETHER_TOKEN (or --token), or bind to 127.0.0.1."
        )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    async def main() -> None:
        # The page never makes or migrates a store. One that is not there yet (the application
        # has not run) is looked for again at each request, which answers 503 until then.
        store = open_store(store_url, create=False)
        try:
            await store.setup()
        except StoreNotFound as missing:
            log.warning("%s The pages and the API answer 503 until it exists.", missing)
        except StoreUnavailable as down:  # a database restarting as this server starts
            log.warning("%s The pages and the API answer 503 until it answers.", down)
        else:
            live = [row.name for row in await store.list_tokens() if row.revoked_at is None]
            if token is None and live:
                # Their scopes hold only on a server with a token: without one, everyone is let in.
                log.warning("%d stored token(s) (%s) limit nothing here: this server has no TETHER_TOKEN, so "
                            "everyone who reaches it may do everything. Set TETHER_TOKEN (or --token) to hold "
                            "callers to their tokens' scopes.", len(live), ", ".join(live[:5]))
        # Without a token, only loopback names: a page whose own name a DNS rebinding points
        # at 127.0.0.1 is then refused, though the browser thinks it same-origin.
        hosts = None if token is not None else sorted({"127.0.0.1", "localhost", "::1", host})
        try:
            app = create_app(store, runners, token=token, allowed_hosts=hosts)
            log.info("serving %s on http://%s:%d/executions (%s)", store_url, host, port, backend)
            if not runners:
                # Said at start: otherwise an approval made here looks as if it set the run going.
                log.warning("no runners here (no --app): decisions are recorded, but no process here "
                            "continues them. Pass --app module:attr to continue them in this server, or run "
                            "`tether worker --app module:attr` on the same store.")
            if backend == "trio":
                from hypercorn.config import Config
                from hypercorn.trio import serve

                config = Config()
                config.bind = [f"{host}:{port}"]
                config.accesslog = "-"
                await serve(app, config)  # type: ignore[arg-type]
            else:
                import uvicorn

                # A follower's event stream (a timeline page left open at a pause) never ends by
                # itself: on shutdown it gets as long as hypercorn gives it, then is closed.
                await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info",
                                                    timeout_graceful_shutdown=3)).serve()
        finally:
            await store.aclose()

    anyio.run(main, backend=backend)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
