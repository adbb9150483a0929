"""The operator surface an application embeds: the HTTP API and the console pages.

`create_app` builds one ASGI app for a store; `create_token` makes a named token
with scopes for it (what `tether tokens create` does). `tether serve` runs it on its own;
an application can serve it with uvicorn (``uvicorn myapp:app``) or mount it
under a path of its own. Two things to get right when mounting:

- Enter the app's lifespan from the host's: the runs it continues after an
  approval live in a task group opened there. Starlette does not run a mounted
  app's lifespan, and without it the server only records decisions (its
  answers then say ``"continuing": false``).
- The pages link and redirect under the mount path, so ``/tether`` here serves
  ``/tether/executions``; a reverse proxy in front must pass the ``Host`` header
  through, since a form posted with another ``Origin`` is refused.

Example:
    ```python
    import os
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.routing import Mount
    from tether.runtime.ops import create_app
    from tether.stores import SQLiteStore

    from myapp.flows import refund  # the runners that continue approved executions here

    store = SQLiteStore("app.db")
    tether_app = create_app(store, [refund], token=os.environ["TETHER_TOKEN"])


    @asynccontextmanager
    async def lifespan(app: Starlette):
        async with store, tether_app.router.lifespan_context(tether_app):
            yield


    app = Starlette(lifespan=lifespan, routes=[Mount("/tether", app=tether_app)])
    ```

Request bodies are limited to 1 MiB (``max_body_bytes=``); execution ids go in
URLs percent-encoded whole (``urllib.parse.quote(id, safe="")``).
"""

from __future__ import annotations

from ._access import SCOPES as SCOPES, create_token as create_token
from ._http import create_app as create_app

__all__ = ("SCOPES", "create_app", "create_token")
