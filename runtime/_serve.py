"""`tether serve`: the HTTP API and /approvals page on uvicorn (asyncio) or hypercorn (trio)."""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING

import anyio
from tether.stores import ConfigurationError, open_store

from ._http import create_app

if TYPE_CHECKING:
    from ._operator import Resumable


def serve_forever(store_url: str, runners: list[Resumable], *, host: str, port: int, token: str | None,
                  backend: str) -> None:
    """Serve until interrupted. Off loopback, a token is required.

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
        async with open_store(store_url) as store:
            app = create_app(store, runners, token=token)
            logging.getLogger("tether.http").info("serving %s on http://%s:%d/approvals (%s)",
                                                  store_url, host, port, backend)
            if backend == "trio":
                from hypercorn.config import Config
                from hypercorn.trio import serve

                config = Config()
                config.bind = [f"{host}:{port}"]
                config.accesslog = "-"
                await serve(app, config)  # type: ignore[arg-type]
            else:
                import uvicorn

                await uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="info")).serve()

    anyio.run(main, backend=backend)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
