"""The console's pages: executions, one execution, approvals, and the forms that act from them.

    GET  /executions                 newest first; filters status, runner, version, path, thread, since,
                                     until, id (a prefix); ``before`` pages on
    GET  /executions/{id}            its actors, pending decisions, timeline (live), ``?at=SEQ`` a state
    POST /executions/{id}/cancel     (operate) the forms of that page
    POST /executions/{id}/retry
    POST /executions/{id}/fork
    GET  /approvals                  pending interrupts grouped by the actor waiting (``?path_prefix=``)
    POST /approvals/decide           (approve) one decision
    POST /approvals/bulk             (approve) the selected ones: first a confirmation, then the decisions
    GET  /login, POST /login, POST /logout

Every form carries a CSRF token signed for the browser's session, and what a
form did is shown once on the next page, from a signed cookie.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from tether.runtime._core.interrupt import Resume
from tether.runtime._executions.history import boundaries
from tether.stores import (
    AlreadyResumed,
    ConfigurationError,
    Execution,
    ExecutionFinished,
    ExecutionNotFound,
    ExecutionSearch,
    LeaseHeld,
    NoPendingInterrupt,
    NotFailed,
)

from . import _pages
from ._access import digest
from ._routing import EXECUTION_ID
from ._serving import nobody_continues, too_many

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from starlette.requests import Request
    from tether.stores import PendingInterrupt

    from ._access import Principal, Scope
    from ._serving import Serving

PAGE_SIZE = 50
"""Executions listed per page."""
APPROVALS_SHOWN = 200
"""The pending calls one approvals page shows, oldest first: a longer queue is narrowed by a path prefix."""
BULK_MAX = 200
"""The most pending calls one bulk approval decides."""
REFUSED = (AlreadyResumed, NoPendingInterrupt, ExecutionFinished, ExecutionNotFound, LeaseHeld,
           ConfigurationError, ValidationError, ValueError)
"""What a decision from a page may meet: each is shown to the operator, nothing is claimed."""


def console_routes(serving: Serving) -> list[Route]:
    """The routes of the pages, sharing ``serving`` with the API."""
    sessions = serving.sessions
    operator = serving.operator

    def base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def html_page(scope: Scope) -> Callable[[Callable[[Request, _pages.Chrome], Awaitable[Response]]],
                                            Callable[[Request], Awaitable[Response]]]:
        """A page that needs ``scope``: a login first when nobody is logged in, a 403 page outside it."""
        def wrap(handler: Callable[[Request, _pages.Chrome], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
            async def guarded(request: Request) -> Response:
                principal = await serving.visitor(request)
                if principal is None:
                    return RedirectResponse(base(request) + "/login", status_code=303)
                sid = sessions.sid(request)
                text, error = sessions.take_flash(request) or ("", False)
                chrome = _pages.Chrome(principal, sessions.csrf(sid), base(request),
                                       flash="" if error else text, error=text if error else "")
                why = principal.lacks(scope)
                answer = (HTMLResponse(_pages.message("Not allowed", why, chrome), 403) if why is not None
                          else await handler(request, chrome))
                sessions.forget_flash(request, answer)
                sessions.keep(request, answer, sid)
                return answer
            return guarded
        return wrap

    def form_post(scope: Scope) -> Callable[[Callable[[Request, Principal, dict[str, list[str]]],
                                                      Awaitable[Response]]], Callable[[Request], Awaitable[Response]]]:
        """A form's target: logged in, a genuine CSRF token, and ``scope``; else nothing is done."""
        def wrap(handler: Callable[[Request, Principal, dict[str, list[str]]], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
            async def guarded(request: Request) -> Response:
                principal = await serving.visitor(request)
                if principal is None:
                    return RedirectResponse(base(request) + "/login", status_code=303)
                form = await sessions.form(request, base(request) + "/approvals")
                if isinstance(form, Response):
                    return form
                refused = serving.refuse(principal, scope)
                return refused if refused is not None else await handler(request, principal, form)
            return guarded
        return wrap

    def back_to(request: Request, where: str, text: str, *, error: bool = False) -> Response:
        response = RedirectResponse(where, status_code=303)
        sessions.flash(request, response, text, error=error)
        return response

    # -- executions -------------------------------------------------------------------

    @html_page("read")
    async def executions_page(request: Request, chrome: _pages.Chrome) -> Response:
        try:
            search, cursor = search_of(request.query_params)
        except ConfigurationError as exc:
            return HTMLResponse(_pages.message("Bad filter", str(exc), chrome), 400)
        rows = await operator.store.search_executions(search, limit=PAGE_SIZE + 1, before=cursor)
        more = _pages.next_page(search, rows[PAGE_SIZE - 1]) if len(rows) > PAGE_SIZE else None
        return HTMLResponse(_pages.executions(rows[:PAGE_SIZE], search, chrome, more=more, first=cursor is None))

    @html_page("read")
    async def execution_page(request: Request, chrome: _pages.Chrome) -> Response:
        try:
            view = await operator.show(request.path_params["execution_id"])
        except ExecutionNotFound as exc:
            return HTMLResponse(_pages.message("Not found", str(exc), chrome), 404)
        at = request.query_params.get("at", "")
        return HTMLResponse(_pages.execution(view, boundaries(view.entries), chrome,
                                             at=int(at) if at.isascii() and at.isdigit() else None))

    @form_post("operate")
    async def cancel(request: Request, principal: Principal, form: dict[str, list[str]]) -> Response:
        execution_id = request.path_params["execution_id"]
        here = _pages.execution_href(execution_id, base(request))
        try:
            result = await operator.cancel(execution_id, reason=_one(form, "reason"), by=serving.by("page", principal),
                                           wait=5)
        except (ExecutionNotFound, ValidationError) as exc:
            return back_to(request, here, str(exc), error=True)
        if result.status in ("completed", "failed", "timed_out"):
            return back_to(request, here, f"It had already {result.status.replace('_', ' ')}.", error=True)
        return back_to(request, here, "Cancelled." if result.status == "cancelled" else
                       "Cancel recorded: the process running it stops it at its next step.")

    @form_post("operate")
    async def retry(request: Request, principal: Principal, form: dict[str, list[str]]) -> Response:
        execution_id = request.path_params["execution_id"]
        here = _pages.execution_href(execution_id, base(request))
        try:
            await operator.retry(execution_id, by=serving.by("page", principal))
        except (NotFailed, ExecutionNotFound) as exc:
            return back_to(request, here, str(exc), error=True)
        continuing = await serving.continue_if_ours(execution_id)
        return back_to(request, here, "Retrying here." if continuing else f"Retrying; {nobody_continues(execution_id)}.")

    @form_post("operate")
    async def fork(request: Request, principal: Principal, form: dict[str, list[str]]) -> Response:
        execution_id = request.path_params["execution_id"]
        here = _pages.execution_href(execution_id, base(request))
        at, new_id = _one(form, "at"), _one(form, "as").strip()
        if not (at.isascii() and at.isdigit()) or not new_id:
            return back_to(request, here, "Pick a boundary and give the fork a new id; nothing was forked.", error=True)
        try:
            await operator.fork(execution_id, at=int(at), new_execution_id=new_id, by=serving.by("page", principal))
        except (ConfigurationError, LeaseHeld, ExecutionNotFound, ValidationError) as exc:
            return back_to(request, here, str(exc), error=True)
        continuing = await serving.continue_if_ours(new_id)
        return back_to(request, _pages.execution_href(new_id, base(request)),
                       f"Forked from {execution_id} at #{at}" +
                       ("; this server runs it." if continuing else f"; {nobody_continues(new_id)}."))

    # -- approvals --------------------------------------------------------------------

    @html_page("read")
    async def approvals_page(request: Request, chrome: _pages.Chrome) -> Response:
        prefix = request.query_params.get("path_prefix", "")
        rows = await operator.pending(prefix or None, limit=APPROVALS_SHOWN + 1)
        more, rows = len(rows) > APPROVALS_SHOWN, rows[:APPROVALS_SHOWN]
        inputs: dict[str, Any] = {}
        for row in rows:
            if row.execution_id not in inputs:
                found = await operator.store.get_execution(row.execution_id)
                inputs[row.execution_id] = None if found is None else found.input
        return HTMLResponse(_pages.approvals(rows, inputs, chrome, prefix=prefix, more=more))

    async def decide_one(principal: Principal, row: tuple[str, str, int | None], approved: bool,
                         approver: str, note: str) -> bool:
        """Claim one decision (the scope checked at its path first); whether this server continues it."""
        execution_id, path, seq = row
        if not principal.may("approve", path or None) or (not path and principal.paths):
            raise ConfigurationError(principal.lacks("approve", path) or "Give the path of the pending call.")
        value = Resume(approved=approved, metadata={"approver": approver, "note": note}).model_dump(mode="json")
        return await serving.decide(execution_id, value, path or None, seq, serving.by("page", principal, approver))

    @form_post("approve")
    async def approvals_decide(request: Request, principal: Principal, form: dict[str, list[str]]) -> Response:
        back = _back(form, base(request))
        execution_id, path = _one(form, "execution_id"), _one(form, "path")
        if not principal.may("approve", path or None):
            return serving.refuse(principal, "approve", path) or Response(status_code=403)
        verdict = _one(form, "decision")
        if verdict not in ("approve", "reject"):  # fails closed: no verdict is not a rejection
            return back_to(request, back, "Press Approve or Reject; nothing was decided.", error=True)
        approved = verdict == "approve"
        try:
            seq = int(_one(form, "seq")) if _one(form, "seq") else None
            continuing = await decide_one(principal, (execution_id, path, seq), approved, _one(form, "approver"),
                                          _one(form, "note"))
        except REFUSED as exc:
            return back_to(request, back, str(exc), error=True)
        verdict = "approved" if approved else "rejected"
        return back_to(request, back, f"{execution_id}: {verdict}." if continuing else
                       f"{execution_id}: {verdict} and recorded; {nobody_continues(execution_id)}.")

    @form_post("approve")
    async def approvals_bulk(request: Request, principal: Principal, form: dict[str, list[str]]) -> Response:
        back = base(request) + "/approvals"
        picks = [_pick(text) for text in form.get("pick", [])][:BULK_MAX]
        chosen = [pick for pick in picks if pick is not None]
        if not chosen:
            return back_to(request, back, "Select the pending calls to approve first.", error=True)
        outside = [path for _, path, _ in chosen if not principal.may("approve", path)]
        if outside:
            return serving.refuse(principal, "approve", outside[0]) or Response(status_code=403)
        if _one(form, "confirm") != "yes":
            rows = await _still_pending(serving, chosen)
            chrome = _pages.Chrome(principal, sessions.csrf(sessions.sid(request)), base(request))
            return HTMLResponse(_pages.confirm_bulk(rows, chrome))
        approver, note = _one(form, "approver"), _one(form, "note")
        done, problems = 0, []
        for pick in chosen:
            try:
                await decide_one(principal, pick, True, approver, note)
                done += 1
            except REFUSED as exc:
                problems.append(f"{pick[0]}: {exc}")
        text = f"Approved {done} of {len(chosen)}." + (" Not approved: " + " | ".join(problems) if problems else "")
        return back_to(request, back, text, error=bool(problems))

    # -- login ------------------------------------------------------------------------

    async def login_page(request: Request) -> Response:
        sid = sessions.sid(request)
        response = HTMLResponse(_pages.login(sessions.csrf(sid), base=base(request)))
        sessions.keep(request, response, sid)
        return response

    async def login(request: Request) -> Response:
        form = await sessions.form(request, base(request) + "/login")
        if isinstance(form, Response):
            return form
        wait = serving.retry_after(request)
        if wait:
            csrf = sessions.csrf(sessions.sid(request))
            return HTMLResponse(_pages.login(csrf, base=base(request), error=too_many(wait)), 429,
                                headers={"retry-after": str(wait)})
        principal = await serving.signed_in(request, _one(form, "token"))
        if principal is None:
            csrf = sessions.csrf(sessions.sid(request))
            return HTMLResponse(_pages.login(csrf, base=base(request), error="Wrong or revoked token."), 401)
        response = RedirectResponse(base(request) + "/executions", status_code=303)
        # The server's own token logs in as "admin" (a digest is hex: never that word); a stored
        # one by its digest, looked up again at every request so that a revocation holds at once.
        sessions.log_in(response, "admin" if principal.server else digest(_one(form, "token")))
        return response

    async def logout(request: Request) -> Response:
        form = await sessions.form(request, base(request) + "/login")
        if isinstance(form, Response):
            return form
        response = RedirectResponse(base(request) + "/login", status_code=303)
        sessions.log_out(response)
        return response

    async def live_js(request: Request) -> Response:
        return PlainTextResponse(_pages.LIVE_JS, media_type="text/javascript",
                                 headers={"cache-control": "no-cache"})

    return [
        Route("/executions", executions_page),
        Route(f"/executions/{EXECUTION_ID}/cancel", cancel, methods=["POST"]),
        Route(f"/executions/{EXECUTION_ID}/retry", retry, methods=["POST"]),
        Route(f"/executions/{EXECUTION_ID}/fork", fork, methods=["POST"]),
        Route("/approvals", approvals_page),
        Route("/approvals/decide", approvals_decide, methods=["POST"]),
        Route("/approvals/bulk", approvals_bulk, methods=["POST"]),
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/assets/live.js", live_js),
        # Last: an id may end in anything, "/cancel" too, and is then shown (GET) rather than acted on.
        Route(f"/executions/{EXECUTION_ID}", execution_page),
    ]


def _one(form: dict[str, list[str]], name: str) -> str:
    values = form.get(name)
    return values[0] if values else ""


def _back(form: dict[str, list[str]], base: str) -> str:
    """Where a decision's form returns: a page of this server (never another site)."""
    back = _one(form, "back")
    return back if back.startswith(base + "/") and not back.startswith("//") else base + "/approvals"


def _pick(text: str) -> tuple[str, str, int | None] | None:
    """A bulk checkbox's ``[execution_id, path, seq]``, or None when it is not one."""
    try:
        execution_id, path, seq = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(execution_id, str) or not isinstance(path, str) or not isinstance(seq, int):
        return None
    return execution_id, path, seq


async def _still_pending(serving: Serving, chosen: list[tuple[str, str, int | None]]) -> list[PendingInterrupt]:
    rows = []
    for execution_id, path, seq in chosen:
        rows += [row for row in await serving.operator.store.list_pending(execution_id=execution_id)
                 if row.agent_path == path and row.seq == seq]
    return rows


def search_of(params: Any) -> tuple[ExecutionSearch, Execution | None]:
    """The filters of the executions page (and API), and where its ``before`` cursor stands.

    Raises:
        ConfigurationError: A value that is not what its field takes (the message says which).
    """
    def text(name: str) -> str | None:
        value = str(params.get(name, "")).strip()
        return value or None

    def moment(name: str) -> datetime | None:
        value = text(name)
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value)
            return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
        except (ValueError, OverflowError):
            raise ConfigurationError(f"{name}={value!r} is not a time: give it as 2026-12-01T09:30 (UTC).") from None

    status = text("status")
    if status is not None and status not in _pages.STATUSES:
        raise ConfigurationError(f"status={status!r}: give one of {', '.join(_pages.STATUSES)}.")
    version = params.get("version")
    try:
        search = ExecutionSearch.model_validate({
            "status": status, "root_path": text("runner"), "version": None if version in (None, "") else str(version),
            "path_prefix": text("path"), "thread": text("thread"), "since": moment("since"),
            "until": moment("until"), "id_prefix": text("id")})
    except ValidationError as exc:
        raise ConfigurationError(f"Not a filter this page takes: {exc.errors()[0]['msg']}.") from None
    before = str(params.get("before", ""))  # not stripped: an id may end in whitespace
    return search, _cursor(before) if before else None


def _cursor(before: str) -> Execution:
    """The execution a ``before`` cursor (``<created_at> <id>``) stands for, for keyset paging."""
    stamp, _, execution_id = before.partition(" ")
    try:
        created = datetime.fromisoformat(stamp)
    except ValueError:
        raise ConfigurationError(f"before={before!r} is not a page cursor: follow the page's own links.") from None
    if created.tzinfo is None or not execution_id:
        raise ConfigurationError(f"before={before!r} is not a page cursor: follow the page's own links.")
    try:  # the id as a search field takes it: text every store keeps (no NUL)
        ExecutionSearch(id_prefix=execution_id)
    except ValidationError:
        raise ConfigurationError(f"before={before!r} is not a page cursor: follow the page's own links.") from None
    # Only the two keys matter to the query: the row itself may since have been pruned.
    return Execution.model_construct(execution_id=execution_id, created_at=created)
