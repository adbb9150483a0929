"""The HTTP API and the console pages, as one ASGI app an application can mount.

    GET  /api/executions                  executions, newest first (filters as the page's; ?before= pages)
    GET  /api/pending                     pending interrupts (?path_prefix=)
    GET  /api/executions/{id}             an execution, its pending interrupts, its journal
                                          (?wait=S: once the run this server continues settles)
    GET  /api/executions/{id}/state       an actor's state as of its last boundary (?path=; default
                                          the root); read only, no lease
    POST /api/executions/{id}/resume      body: the decision (JSON object); ?path= and ?seq= pick one
    POST /api/executions/{id}/cancel      body (optional): {"reason": "..."}; ?wait=S for a running one
    POST /api/executions/{id}/retry       a failed one continues from its last good boundary
    POST /api/executions/{id}/fork        body: {"at": seq or label, "as": "new id"}
    POST /api/executions/{id}/messages    body: the message (JSON object); ?path= the receiving actor
    GET  /api/executions/{id}/events      its events as server-sent events, from Last-Event-ID
                                          (or ?after=); ?until=paused ends at a pause
    GET  /api/openapi.json                this API as an OpenAPI 3.1 document (no token needed)
    GET  /executions, /executions/{id}, /approvals    the console (see `_console`)

An execution id may hold any character: percent-encode it whole in a URL
(``quote(id, safe="")``, so ``a/b?c`` is ``a%2Fb%3Fc``); the pages' links do.

A resume answers 202 as soon as the decision is claimed (journaled, exactly
once); the run then continues in a task of the server when it has the runner,
else in whichever process recovers it (the answer's ``detail`` says which).
409 when someone else decided first, 422 for a decision that does not
validate, 404 for an unknown execution (or actor, for a state), 413 for a body
over ``max_body_bytes`` (1 MiB by default; it is refused before it is read, or
as soon as it grows past it).

Who may do what: with a ``token``, every API call needs ``Authorization:
Bearer <secret>``, the server's token (an admin) or one made with `tether
tokens create` (scopes read, approve under path prefixes, operate, admin),
and the pages a login with either. A call outside its token's scopes is a 403
whose body names the scope it lacks; nothing is done or claimed. Each
decision and operation journals the name of the token that made it.
`tether serve` refuses to listen off loopback without a token.

A browser gets a random session id (an HttpOnly, SameSite=Strict cookie); a
form's CSRF token is that id signed with the server's secret, and a form posted
from another origin (another port of 127.0.0.1 too) is refused, so a page that
can set cookies for the host still cannot forge a decision. API posts must be
JSON (a cross-site page cannot send that without a preflight), and every value
on a page is escaped.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import math
import secrets
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from tether.runtime._core.errors import ActorNotFound
from tether.runtime._executions.query import query
from tether.stores import (
    AlreadyResumed,
    ConfigurationError,
    ExecutionFinished,
    ExecutionNotFound,
    LeaseHeld,
    NoPendingInterrupt,
    NotFailed,
    SerializationError,
    StaleLease,
    StoreNotFound,
    StoreUnavailable,
)

from . import _openapi, _pages, _sse
from ._console import PAGE_SIZE, console_routes, search_of
from ._operator import Operator
from ._routing import EXECUTION_ID
from ._serving import Serving, nobody_continues, too_many
from ._session import Sessions, problem

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from starlette.requests import Request
    from starlette.types import ASGIApp, Message, Receive, Scope, Send
    from tether.runtime._executions.runner import Runner
    from tether.stores import Store

    from ._access import Principal, Scope as TokenScope

log = logging.getLogger("tether.runtime.ops.http")
MAX_BODY_BYTES = 1 << 20
"""The default limit on a request body (1 MiB): a decision is a small JSON object or form."""
WAIT_CAP = 60.0
"""The longest a ``?wait=`` long poll waits, in seconds."""
CANCEL_WAIT = 10.0
"""Seconds a cancel request waits, by default, for a running execution to stop before it answers 202."""
STORE_RETRY_AFTER = 5
"""The ``Retry-After`` (seconds) of a 503 while there is no store, or it cannot be reached."""


def create_app(
    store: Store,
    runners: Sequence[Runner] = (),
    *,
    token: str | None = None,
    secure_cookies: bool = False,
    max_body_bytes: int = MAX_BODY_BYTES,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The ASGI app for ``store``; ``runners`` continue approved executions in the server.

    Args:
        store: Where the executions are (opened on first use; closing it is the caller's job).
        runners: The runners this server continues executions with once decided.
        token: The admin token. When set, every caller must present it or a token
            made with `tether tokens create` (bearer for the API, a login for the
            pages), and is held to that token's scopes. The forms' signing secret
            derives from it, so servers sharing a token accept each other's pages;
            without one, each app signs with a random secret of its own, and every
            caller may do everything.
        secure_cookies: Mark cookies ``Secure`` (serve over HTTPS).
        max_body_bytes: The largest request body accepted; a larger one gets 413 unread.
        allowed_hosts: The host names requests may be addressed to (their ``Host``
            header); others get 400. ``tether serve`` without a token allows only
            loopback names, so that a page whose name a DNS rebinding points at
            127.0.0.1 cannot reach it. None: no check (the embedding server's job).

    Raises:
        ConfigurationError: ``max_body_bytes`` is below 1.

    Example:
        ```python
        app = create_app(SQLiteStore("app.db"), [refund_chain], token=os.environ["TETHER_TOKEN"])
        # uvicorn module:app, or mount it as tether.runtime.ops shows
        ```
    """
    if max_body_bytes < 1:
        raise ConfigurationError(f"max_body_bytes={max_body_bytes}: give the largest body to accept, "
                                 f"in bytes (the default is {MAX_BODY_BYTES}).")
    operator = Operator(store, runners)
    # Derived from the token, logins and open pages survive a restart and work on every
    # replica; without a token there is no login to keep, and a reload fixes a stale page.
    secret = (hmac.new(token.encode(), b"tether-forms", hashlib.sha256).digest() if token
              else secrets.token_bytes(32))
    serving = Serving(operator, token, Sessions(secret, secure=secure_cookies))
    settled = serving.settled

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            serving.tasks.append(tg)
            yield
            # Runs still going when the server stops are journaled up to their last
            # boundary: a later recovery continues them.
            tg.cancel_scope.cancel()

    def api(scope: TokenScope) -> Callable[[Callable[[Request, Principal], Awaitable[Response]]],
                                           Callable[[Request], Awaitable[Response]]]:
        """An API route that needs ``scope``: 401 without a valid token, 403 outside its scopes."""
        def wrap(handler: Callable[[Request, Principal], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
            async def guarded(request: Request) -> Response:
                wait = serving.retry_after(request)
                if wait:
                    slowed = problem(429, too_many(wait))
                    slowed.headers["retry-after"] = str(wait)
                    return slowed
                principal = await serving.caller(request)
                if principal is None:
                    return problem(401, "Send Authorization: Bearer <token>: the server's TETHER_TOKEN, or one "
                                        "made with `tether tokens create` (a revoked one no longer works).")
                refused = serving.refuse(principal, scope)
                if refused is not None:
                    return refused
                nul = next((name for name, value in [*request.path_params.items(), *request.query_params.items()]
                            if "\x00" in str(value)), None)
                if nul is not None:
                    return problem(400, f"{nul} holds a NUL character, which no id, path or filter holds; "
                                        f"nothing was done.")
                origin = request.headers.get("origin")
                if request.method == "POST" and origin is not None and \
                        urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
                    # A browser on another site (a "simple" POST needs no preflight): never an operator's tool.
                    return problem(403, f"This API call came from a page at {origin}; nothing was done. Call the "
                                        f"API from a program, or act from this server's own pages.")
                try:
                    return await handler(request, principal)
                except ExecutionNotFound as exc:
                    return problem(404, str(exc))
            return guarded
        return wrap

    # -- the API -----------------------------------------------------------------------

    @api("read")
    async def list_executions(request: Request, principal: Principal) -> Response:
        try:
            search, cursor = search_of(request.query_params)
        except ConfigurationError as exc:
            return problem(400, str(exc))
        given = request.query_params.get("limit", str(PAGE_SIZE))
        if not (given.isascii() and given.isdigit()) or not 1 <= int(given) <= 1000:
            return problem(400, f"limit={given!r}: give a whole number from 1 to 1000 (executions per page).")
        limit = int(given)
        rows = await operator.store.search_executions(search, limit=limit + 1, before=cursor)
        more = _pages.cursor_of(rows[limit - 1]) if len(rows) > limit else None
        return JSONResponse({"executions": [row.model_dump(mode="json") for row in rows[:limit]], "before": more})

    @api("read")
    async def list_pending(request: Request, principal: Principal) -> Response:
        rows = await operator.pending(request.query_params.get("path_prefix"))
        return JSONResponse([row.model_dump(mode="json") for row in rows])

    @api("read")
    async def get_execution(request: Request, principal: Principal) -> Response:
        execution_id = request.path_params["execution_id"]
        wait = request.query_params.get("wait")
        if wait is not None:
            seconds = _seconds(wait)
            if seconds is None:
                return problem(400, f"wait={wait!r} is not a number of seconds: give a finite number from 0 "
                                    f"up, like wait=30 (at most {WAIT_CAP:g} are waited).")
            if execution_id in settled:
                # A long poll: answer once the run this server continues has paused or ended.
                with anyio.move_on_after(min(seconds, WAIT_CAP)):
                    await settled[execution_id].wait()
        view = await operator.show(execution_id)
        return JSONResponse(view.as_json())

    @api("read")
    async def get_state(request: Request, principal: Principal) -> Response:
        execution_id = request.path_params["execution_id"]
        try:
            found = await query(operator.store, execution_id, request.query_params.get("path") or None)
        except ActorNotFound as exc:
            return problem(404, str(exc))
        except ExecutionNotFound:
            # An id may itself end in "/state": an execution of that whole id is shown.
            if await operator.store.get_execution(execution_id + "/state") is None:
                raise
            request.path_params["execution_id"] = execution_id + "/state"
            return await get_execution(request)
        return JSONResponse(found.model_dump(mode="json"))

    async def follow_or_show(request: Request, principal: Principal, who: Callable[[Request], Awaitable[Principal | None]]
                             ) -> Response:
        execution_id = request.path_params["execution_id"]
        found = await operator.store.get_execution(execution_id) is not None
        # An id may itself end in "/events": an execution of that whole id is shown, not followed.
        if not found and await operator.store.get_execution(execution_id + "/events") is not None:
            request.path_params["execution_id"] = execution_id + "/events"
            return await (get_execution if request.url.path.startswith(_base(request) + "/api/")
                          else execution_page)(request)

        async def allowed() -> bool:  # a stored token may be revoked while the stream is open
            return await who(request) is not None
        try:
            after, until = _sse.resume_point(request), _sse.until_of(request)
        except ConfigurationError as exc:
            return problem(400, str(exc))
        if not found:
            raise ExecutionNotFound(execution_id)
        stored = not (principal.anonymous or principal.server)
        return await _sse.event_response(operator.store, execution_id, after=after, until=until,
                                         allowed=allowed if stored else None)

    @api("read")
    async def api_events(request: Request, principal: Principal) -> Response:
        return await follow_or_show(request, principal, serving.caller)

    @api("approve")
    async def resume(request: Request, principal: Principal) -> Response:
        execution_id = request.path_params["execution_id"]
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return problem(415, "Send the decision as a JSON object with Content-Type: application/json.")
        try:
            seq = int(request.query_params["seq"]) if "seq" in request.query_params else None
        except ValueError:
            return problem(400, f"seq={request.query_params['seq']!r} is not a whole number: give the seq of "
                                f"the pending interrupt (from /api/pending); nothing was claimed.")
        try:
            value = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return problem(400, f"The body is not JSON ({exc}); nothing was claimed.")
        if not isinstance(value, dict):
            return problem(422, 'The decision must be a JSON object, like {"approved": true}; nothing was claimed.')
        path = request.query_params.get("path")
        bound = await _bound(principal, execution_id, path, seq)
        if isinstance(bound, Response):
            return bound
        path, seq = bound
        try:
            continuing = await serving.decide(execution_id, value, path, seq,
                                              serving.by("api", principal, _approver(value)))
        except ValidationError as exc:
            return problem(422, f"Not a valid decision; nothing was claimed: {exc}")
        except AlreadyResumed as exc:
            return problem(409, str(exc))
        except (NoPendingInterrupt, ExecutionFinished, LeaseHeld, StaleLease, ConfigurationError) as exc:
            return problem(409, str(exc))
        detail = ("Decision recorded; this server continues the run." if continuing
                  else f"Decision recorded; {nobody_continues(execution_id)}.")
        return JSONResponse({"execution_id": execution_id, "status": "accepted", "continuing": continuing,
                             "detail": detail}, status_code=202)

    async def _bound(principal: Principal, execution_id: str, path: str | None, seq: int | None
                     ) -> Response | tuple[str | None, int | None]:
        """The call a decision may claim: the 403 when the token may not decide there.

        A token limited to path prefixes claims exactly the call it was checked
        against: without ``?path=``, the execution's one pending call, its path and
        seq pinned, so a suspension made meanwhile elsewhere in the tree is not taken.
        """
        if not principal.paths or "admin" in principal.scopes:
            return path, seq
        if path is not None:
            return serving.refuse(principal, "approve", path) or (path, seq)
        rows = await operator.store.list_pending(execution_id=execution_id)
        if len(rows) != 1:
            return problem(409, f"{len(rows)} calls of {execution_id!r} wait for a decision: give ?path= (and "
                                f"?seq=) of the one to decide; nothing was claimed.")
        return serving.refuse(principal, "approve", rows[0].agent_path) or (rows[0].agent_path, rows[0].seq)

    @api("operate")
    async def cancel_execution(request: Request, principal: Principal) -> Response:
        execution_id = request.path_params["execution_id"]
        body = await request.body()
        try:
            fields = json.loads(body) if body.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return problem(400, f"The body is not JSON ({exc}); nothing was cancelled.")
        reason = fields.get("reason", "") if isinstance(fields, dict) else None
        if not isinstance(reason, str):
            return problem(422, 'Give the cancel as a JSON object with an optional "reason" string, like '
                                '{"reason": "customer withdrew"}; nothing was cancelled.')
        wait = _seconds(request.query_params.get("wait", str(CANCEL_WAIT)))
        if wait is None:
            return problem(400, f"wait={request.query_params['wait']!r} is not a number of seconds: give a "
                                f"finite number from 0 up (at most {WAIT_CAP:g} are waited).")
        try:
            result = await operator.cancel(execution_id, reason=reason, by=serving.by("api", principal),
                                           wait=min(wait, WAIT_CAP))
        except ValidationError as exc:
            return problem(422, f"Not a valid reason; nothing was cancelled: {exc}")
        except SerializationError as exc:  # a NUL character, say, which Postgres cannot keep
            return problem(400, f"The store cannot keep this reason; nothing was cancelled: {exc}")
        if result.status in ("completed", "failed", "timed_out"):
            return problem(409, f"Execution {execution_id!r} had already {result.status.replace('_', ' ')}; a "
                                f"finished execution stays as it ended.")
        # 202: recorded, and the process that runs it stops it at its next await.
        return JSONResponse(result.model_dump(mode="json"), status_code=200 if result.status == "cancelled" else 202)

    @api("operate")
    async def post_message(request: Request, principal: Principal) -> Response:
        execution_id = request.path_params["execution_id"]
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return problem(415, "Send the message as a JSON object with Content-Type: application/json.")
        try:
            message = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return problem(400, f"The body is not JSON ({exc}); nothing was sent.")
        if not isinstance(message, dict):
            return problem(422, 'The message must be a JSON object, like {"approved": true}; nothing was sent.')
        try:
            entry = await operator.send_message(execution_id, message, path=request.query_params.get("path"),
                                                by=serving.by("api", principal))
        except ValidationError as exc:
            return problem(422, f"Not what the receiving actor waits for; nothing was sent: {exc}")
        except ActorNotFound as exc:
            return problem(404, str(exc))
        except (ExecutionFinished, ConfigurationError) as exc:
            return problem(409, str(exc))
        return JSONResponse({"execution_id": execution_id, "path": entry.path, "seq": entry.seq,
                             "status": "accepted"}, status_code=202)

    @api("operate")
    async def retry_execution(request: Request, principal: Principal) -> Response:
        execution_id = request.path_params["execution_id"]
        try:
            result = await operator.retry(execution_id, by=serving.by("api", principal))
        except NotFailed as exc:
            return problem(409, str(exc))
        continuing = await serving.continue_if_ours(execution_id)
        detail = ("Retrying; this server continues the run." if continuing
                  else f"Retrying; {nobody_continues(execution_id)}.")
        return JSONResponse({**result.model_dump(mode="json"), "continuing": continuing, "detail": detail},
                            status_code=202)

    @api("operate")
    async def fork_execution(request: Request, principal: Principal) -> Response:
        execution_id = request.path_params["execution_id"]
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return problem(415, 'Send the fork as a JSON object with Content-Type: application/json, like '
                                '{"at": 3, "as": "new-id"}.')
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return problem(400, f"The body is not JSON ({exc}); nothing was forked.")
        at, new_id = (body.get("at"), body.get("as")) if isinstance(body, dict) else (None, None)
        if not isinstance(at, int | str) or isinstance(at, bool) or not isinstance(new_id, str) or not new_id:
            return problem(422, 'Give "at" (a seq from the history, or a label such as "node:b") and "as" '
                                '(the fork\'s new execution id); nothing was forked.')
        assert isinstance(body, dict)
        effects = body.get("effects", "again")
        if effects not in ("again", "reuse"):
            return problem(422, f'"effects" is "again" (the fork\'s side effects are its own) or "reuse", not '
                                f'{effects!r}; nothing was forked.')
        changes = {"update": body["update"]} if "update" in body else {}
        if changes:
            # An update rewrites what a boundary recorded, a decision too: only an admin may.
            refused = serving.refuse(principal, "admin")
            if refused is not None:
                return refused
        try:
            await operator.fork(execution_id, at=at, new_execution_id=new_id, effects=effects,
                                by=serving.by("api", principal), **changes)
        except ValidationError as exc:
            return problem(422, f"Not a valid decision for that boundary; nothing was forked: {exc}")
        except (ConfigurationError, LeaseHeld) as exc:
            return problem(409, str(exc))
        continuing = await serving.continue_if_ours(new_id)
        detail = ("Forked; this server runs the fork." if continuing
                  else f"Forked, not run; {nobody_continues(new_id)}.")
        return JSONResponse({"execution_id": new_id, "forked_from": execution_id, "at": at,
                             "continuing": continuing, "detail": detail}, status_code=201)

    # -- the pages' own stream, and the rest ---------------------------------------------

    pages = console_routes(serving)
    execution_page = pages[-1].endpoint

    async def page_events(request: Request) -> Response:
        # The live page's own stream: EventSource sends the login cookie, not a bearer token.
        principal = await serving.visitor(request)
        if principal is None:
            return problem(401, "Log in at /login to follow this execution.")
        refused = serving.refuse(principal, "read")
        if refused is not None:
            return refused
        try:
            return await follow_or_show(request, principal, serving.visitor)
        except ExecutionNotFound as exc:
            return problem(404, str(exc))

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    api_document = _openapi.document()

    async def openapi(request: Request) -> Response:
        return JSONResponse(api_document)

    async def home(request: Request) -> Response:
        return RedirectResponse(_base(request) + "/executions", status_code=303)

    # An id is the whole rest of the path (it may hold "/"): the resume route takes the last
    # "/resume" off, so an id that itself ends in "/resume" still works.
    async def no_store(request: Request, exc: Exception) -> Response:
        # Served before the application made its store (the page never makes one), or while
        # the store cannot be reached (a database restarting): say so, and when to ask again.
        retry = {"Retry-After": str(STORE_RETRY_AFTER)}
        if request.url.path.startswith(_base(request) + "/api/"):
            answer = problem(503, str(exc))
            answer.headers.update(retry)
            return answer
        return HTMLResponse(_pages.message("No store", str(exc)), 503, headers=retry)

    middleware = [Middleware(_Framing), Middleware(_BodyLimit, max_bytes=max_body_bytes)]
    if allowed_hosts is not None:
        middleware.insert(0, Middleware(_HostCheck, allowed=tuple(allowed_hosts)))
    app = Starlette(lifespan=lifespan, middleware=middleware,
                    exception_handlers={StoreNotFound: no_store, StoreUnavailable: no_store}, routes=[
        Route("/", home),
        Route("/healthz", health),
        Route("/api/openapi.json", openapi),
        Route("/api/pending", list_pending),
        Route("/api/executions", list_executions),
        Route(f"/api/executions/{EXECUTION_ID}/resume", resume, methods=["POST"]),
        Route(f"/api/executions/{EXECUTION_ID}/fork", fork_execution, methods=["POST"]),
        Route(f"/api/executions/{EXECUTION_ID}/cancel", cancel_execution, methods=["POST"]),
        Route(f"/api/executions/{EXECUTION_ID}/retry", retry_execution, methods=["POST"]),
        Route(f"/api/executions/{EXECUTION_ID}/messages", post_message, methods=["POST"]),
        Route(f"/api/executions/{EXECUTION_ID}/events", api_events),
        Route(f"/api/executions/{EXECUTION_ID}/state", get_state),
        Route(f"/api/executions/{EXECUTION_ID}", get_execution),
        Route(f"/executions/{EXECUTION_ID}/events", page_events),
        *pages,
    ])
    # For an embedding application (and tests): the event of each execution this server
    # is continuing, set once that run has paused, finished or failed here.
    app.state.settled = settled
    return app


def _policy() -> bytes:
    """The pages' Content-Security-Policy: this server's own script file, its one style block, nothing inline else.

    An escaping mistake on a page then cannot run script: no inline script or
    handler runs, no other origin is loaded from, fetched from or posted to.
    """
    style = base64.b64encode(hashlib.sha256(_pages.STYLE.encode()).digest()).decode()
    return (f"default-src 'none'; script-src 'self'; style-src 'sha256-{style}'; connect-src 'self'; "
            f"img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'").encode()


class _Framing:
    """Headers on every answer: a strict content policy, no framing by other pages, no type sniffing.

    SameSite cookies do not tell ports apart, so a page on another port of the host
    could frame the console, logged in, and have its buttons clicked (clickjacking).
    """

    HEADERS = ((b"x-frame-options", b"DENY"), (b"content-security-policy", _policy()),
               (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"same-origin"))

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


class _HostCheck:
    """Answer 400 to a request addressed to a host name not in ``allowed`` (DNS rebinding)."""

    def __init__(self, app: ASGIApp, allowed: tuple[str, ...]) -> None:
        self.app = app
        self.allowed = {name.lower().strip("[]") for name in allowed}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Headers(scope=scope).get("host", "")
            name = urlsplit(f"//{host}").hostname or ""
            if name not in self.allowed:
                response = PlainTextResponse(
                    f"This server answers requests for {', '.join(sorted(self.allowed))}, not {host!r}. "
                    f"Open it by one of those names, or serve it with a token to allow others.", 400)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _BodyTooLarge(Exception):
    """Raised from ``receive`` once a body grows past the limit; `_BodyLimit` answers 413 for it."""


class _BodyLimit:
    """Refuse a request body over ``max_bytes`` with 413, unread when its Content-Length says so.

    Around the routes, so JSON and forms alike are covered; the 413 closes the
    connection, so the rest of a chunked body is never read.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        received = 0
        started = False

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, tracked)
        except _BodyTooLarge:
            if started:  # too late for a 413: the server logs it and drops the connection
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problem(413, f"The request body is over this server's limit of {self.max_bytes} bytes; "
                                 f"nothing was claimed. A decision is a small JSON object: send less "
                                 f"(or raise create_app's max_body_bytes=).")
        response.headers["connection"] = "close"
        await response(scope, receive, send)


def _approver(value: dict[str, Any]) -> str | None:
    """The approver a decision names in its metadata, if any."""
    metadata = value.get("metadata")
    approver = metadata.get("approver") if isinstance(metadata, dict) else None
    return approver if isinstance(approver, str) and approver else None


def _base(request: Request) -> str:
    """Where the app is mounted ("" at the root): every link and redirect starts with it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def _seconds(text: str) -> float | None:
    """``text`` as a finite number of seconds >= 0, or None."""
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
