"""The HTTP API and the /approvals page, as one ASGI app an application can mount.

    GET  /api/pending                     pending interrupts (?path_prefix=)
    GET  /api/executions/{id}             an execution, its pending interrupts, its journal
                                          (?wait=S: once the run this server continues settles)
    POST /api/executions/{id}/resume      body: the decision (JSON object); ?path= and ?seq= pick one
    GET  /approvals                       the page: pending interrupts with Approve / Reject
    GET  /executions/{id}                 the page: one execution's timeline

A resume answers 202 as soon as the decision is claimed (journaled, exactly
once); the run then continues in a task of the server when it has the runner,
else in whichever process recovers it. 409 when someone else decided first,
422 for a decision that does not validate, 404 for an unknown execution.

Security: with a ``token``, every API call needs ``Authorization: Bearer
<token>`` and the pages a login; `tether serve` refuses to listen off loopback
without one. Forms carry a CSRF token (double submit), API posts must be JSON
(a cross-site page cannot send that without a preflight), and every value on a
page is escaped.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from contextlib import asynccontextmanager
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import anyio
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from tether.stores import (
    AlreadyResumed,
    ConfigurationError,
    ExecutionFinished,
    ExecutionNotFound,
    LeaseHeld,
    NoPendingInterrupt,
    StaleLease,
)

from . import _pages
from ._interrupt import Resume
from ._operator import Operator, Resumable

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from starlette.requests import Request
    from tether.stores import Store

log = logging.getLogger("tether.http")
CSRF_COOKIE = "tether_csrf"
SESSION_COOKIE = "tether_session"


def create_app(
    store: Store,
    runners: list[Resumable] | tuple[Resumable, ...] = (),
    *,
    token: str | None = None,
    secure_cookies: bool = False,
) -> Starlette:
    """The ASGI app for ``store``; ``runners`` continue approved executions in the server.

    Args:
        store: Where the executions are (opened on first use; closing it is the caller's job).
        runners: The runners this server continues executions with once decided.
        token: Required from every caller when set (bearer for the API, a login for the pages).
        secure_cookies: Mark cookies ``Secure`` (serve over HTTPS).

    Example:
        ```python
        app = create_app(SQLiteStore("app.db"), [refund_chain], token=os.environ["TETHER_TOKEN"])
        # uvicorn module:app, or mount it: Mount("/tether", app=app)
        ```
    """
    operator = Operator(store, runners)
    session = hmac.new(token.encode(), b"tether-session", hashlib.sha256).hexdigest() if token else None
    tasks: list[anyio.abc.TaskGroup] = []
    settled: dict[str, anyio.Event] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tasks.append(tg)
            yield
            # Runs still going when the server stops are journaled up to their last
            # boundary: a later recovery continues them.
            tg.cancel_scope.cancel()

    def api(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if token is not None:
                given = request.headers.get("authorization", "")
                if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                    return _problem(401, "Send Authorization: Bearer <token> (the server's TETHER_TOKEN).")
            try:
                return await handler(request)
            except ExecutionNotFound as exc:
                return _problem(404, str(exc))
        return guarded

    def page(handler: Callable[[Request, str], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if session is not None and not hmac.compare_digest(request.cookies.get(SESSION_COOKIE, ""), session):
                return RedirectResponse("/login", status_code=303)
            csrf = request.cookies.get(CSRF_COOKIE) or secrets.token_hex(16)
            response = await handler(request, csrf)
            if request.cookies.get(CSRF_COOKIE) != csrf:
                response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", secure=secure_cookies)
            return response
        return guarded

    async def form_with_csrf(request: Request) -> dict[str, str] | None:
        form = await request.form()
        given = str(form.get("csrf", ""))
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not cookie or not hmac.compare_digest(given.encode(), cookie.encode()):
            return None
        return {k: str(v) for k, v in form.items()}

    async def decide(execution_id: str, value: dict[str, Any], path: str | None, seq: int | None) -> bool:
        """Claim, then continue in the background when this server has the runner."""
        execution = await store.get_execution(execution_id)
        if execution is None:
            raise ExecutionNotFound(execution_id)
        runner = operator.runner_for(execution)  # refuses a changed definition before claiming
        await operator.decide(execution_id, value, path=path, seq=seq)
        if runner is None or not tasks:
            return False
        settled[execution_id] = anyio.Event()
        tasks[0].start_soon(carry_on, execution_id)
        return True

    async def carry_on(execution_id: str) -> None:
        try:
            result = await operator.carry_on(execution_id)
            log.info("execution %s continued: %s", execution_id, result.status)
        except Exception:
            log.exception("execution %s could not continue here; a recovery will carry it on", execution_id)
        finally:
            settled[execution_id].set()

    # -- the API -----------------------------------------------------------------------

    @api
    async def list_pending(request: Request) -> Response:
        rows = await operator.pending(request.query_params.get("path_prefix"))
        return JSONResponse([row.model_dump(mode="json") for row in rows])

    @api
    async def get_execution(request: Request) -> Response:
        execution_id = request.path_params["execution_id"]
        if "wait" in request.query_params and execution_id in settled:
            # A long poll: answer once the run this server continues has paused or ended.
            try:
                seconds = min(float(request.query_params["wait"]), 60.0)
            except ValueError:
                return _problem(400, "wait= takes a number of seconds (at most 60).")
            with anyio.move_on_after(seconds):
                await settled[execution_id].wait()
        view = await operator.show(execution_id)
        return JSONResponse({
            "execution": view.execution.model_dump(mode="json"),
            "pending": [row.model_dump(mode="json") for row in view.pending],
            "journal": [entry.model_dump(mode="json") for entry in view.entries],
        })

    @api
    async def resume(request: Request) -> Response:
        execution_id = request.path_params["execution_id"]
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _problem(415, "Send the decision as a JSON object with Content-Type: application/json.")
        try:
            value = json.loads(await request.body())
            seq = int(request.query_params["seq"]) if "seq" in request.query_params else None
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
            return _problem(400, f"The body is not JSON ({exc}); nothing was claimed.")
        if not isinstance(value, dict):
            return _problem(422, 'The decision must be a JSON object, like {"approved": true}; nothing was claimed.')
        try:
            continuing = await decide(execution_id, value, request.query_params.get("path"), seq)
        except ValidationError as exc:
            return _problem(422, f"Not a valid decision; nothing was claimed: {exc}")
        except AlreadyResumed as exc:
            return _problem(409, str(exc))
        except (NoPendingInterrupt, ExecutionFinished, LeaseHeld, StaleLease, ConfigurationError) as exc:
            return _problem(409, str(exc))
        return JSONResponse({"execution_id": execution_id, "status": "accepted", "continuing": continuing},
                            status_code=202)

    # -- the pages ---------------------------------------------------------------------

    @page
    async def approvals_page(request: Request, csrf: str) -> Response:
        rows = await operator.pending(request.query_params.get("path_prefix"))
        return HTMLResponse(_pages.approvals(rows, csrf, flash=request.query_params.get("flash", ""),
                                             error=request.query_params.get("error", "")))

    async def approvals_decide(request: Request) -> Response:
        if session is not None and not hmac.compare_digest(request.cookies.get(SESSION_COOKIE, ""), session):
            return RedirectResponse("/login", status_code=303)
        form = await form_with_csrf(request)
        if form is None:
            return _problem(403, "The form's CSRF token is missing or wrong: reload /approvals and try again.")
        execution_id = form.get("execution_id", "")
        approved = form.get("decision") == "approve"
        value = Resume(approved=approved,
                       metadata={"approver": form.get("approver", ""), "note": form.get("note", "")})
        try:
            seq = int(form["seq"]) if form.get("seq") else None
            await decide(execution_id, value.model_dump(mode="json"), form.get("path") or None, seq)
        except (AlreadyResumed, NoPendingInterrupt, ExecutionFinished, ExecutionNotFound, LeaseHeld,
                ConfigurationError, ValidationError, ValueError) as exc:
            return RedirectResponse("/approvals?" + urlencode({"error": str(exc)}), status_code=303)
        verdict = "approved" if approved else "rejected"
        return RedirectResponse("/approvals?" + urlencode({"flash": f"{execution_id}: {verdict}."}),
                                status_code=303)

    @page
    async def execution_page(request: Request, csrf: str) -> Response:
        try:
            view = await operator.show(request.path_params["execution_id"])
        except ExecutionNotFound as exc:
            return HTMLResponse(_pages.page("Not found - tether", f"<p class=error>{escape(str(exc))}</p>"), 404)
        return HTMLResponse(_pages.timeline(view))

    async def login_page(request: Request) -> Response:
        csrf = request.cookies.get(CSRF_COOKIE) or secrets.token_hex(16)
        response = HTMLResponse(_pages.login(csrf))
        response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", secure=secure_cookies)
        return response

    async def login(request: Request) -> Response:
        form = await form_with_csrf(request)
        if form is None:
            return _problem(403, "The form's CSRF token is missing or wrong: reload /login and try again.")
        if token is None or session is None:
            return RedirectResponse("/approvals", status_code=303)
        if not hmac.compare_digest(form.get("token", "").encode(), token.encode()):
            return HTMLResponse(_pages.login(request.cookies.get(CSRF_COOKIE, ""), error="Wrong token."), 401)
        response = RedirectResponse("/approvals", status_code=303)
        response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict", secure=secure_cookies)
        return response

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def home(request: Request) -> Response:
        return RedirectResponse("/approvals", status_code=303)

    app = Starlette(lifespan=lifespan, routes=[
        Route("/", home),
        Route("/healthz", health),
        Route("/api/pending", list_pending),
        Route("/api/executions/{execution_id}", get_execution),
        Route("/api/executions/{execution_id}/resume", resume, methods=["POST"]),
        Route("/approvals", approvals_page),
        Route("/approvals/decide", approvals_decide, methods=["POST"]),
        Route("/executions/{execution_id}", execution_page),
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
    ])
    # For an embedding application (and tests): the event of each execution this server
    # is continuing, set once that run has paused, finished or failed here.
    app.state.settled = settled
    return app


def _problem(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)
