"""What the HTTP API and the console pages share: the store, who is asking, and the runs continued here."""

from __future__ import annotations

import logging
import shlex
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ._access import ANYONE, SERVER, Principal, authenticate, principal_of
from ._session import Sessions, problem
from ._throttle import Throttle

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from ._access import Scope
    from ._operator import Operator

log = logging.getLogger("tether.runtime.ops.http")
SETTLED_KEPT = 1000
"""How many continued runs a server remembers for ``?wait=`` once they ended."""


@dataclass
class Serving:
    """One server's state: its operator, its token, its browsers' sessions, the runs it carries on."""

    operator: Operator
    token: str | None
    sessions: Sessions
    tasks: list[anyio.abc.TaskGroup] = field(default_factory=list)
    settled: OrderedDict[str, anyio.Event] = field(default_factory=OrderedDict)
    """Each run this server continues, until it has paused or ended; the latest kept, for ``?wait=``."""
    attempts: Throttle = field(default_factory=Throttle)
    """Wrong tokens per client address, bearer and login alike."""

    # -- who is asking ----------------------------------------------------------------

    async def caller(self, request: Request) -> Principal | None:
        """Who an API request comes from (its bearer token), or None when it must be refused.

        A server without a token lets every request in as an admin; a bearer token
        sent to it still counts, so a client can act under its own name.
        """
        given = request.headers.get("authorization", "")
        scheme, _, secret = given.partition(" ")
        if not given:
            return ANYONE if self.token is None else None
        if scheme.lower() != "bearer" or not secret:
            return None
        return await self.signed_in(request, secret.strip())

    async def signed_in(self, request: Request, secret: str) -> Principal | None:
        """The principal of a presented secret; a wrong one counts against its address (`retry_after`)."""
        address = client_address(request)
        principal = await authenticate(self.operator.store, secret, self.token)
        if principal is None:
            self.attempts.failed(address)
            log.warning("a wrong or revoked token from %s", address)  # never the token itself
        else:
            self.attempts.succeeded(address)
        return principal

    def retry_after(self, request: Request) -> int:
        """Seconds the address must wait, having presented too many wrong tokens of late; 0 if none."""
        return self.attempts.wait(client_address(request))

    async def visitor(self, request: Request) -> Principal | None:
        """Who a browser is logged in as (checked against the store at every request), or None."""
        who = self.sessions.who(request)
        if who is None:
            return ANYONE if self.token is None else None
        if who == "admin":
            return SERVER if self.token is not None else None
        return await principal_of(self.operator.store, who)  # None at once when it was revoked

    @staticmethod
    def refuse(principal: Principal, scope: Scope, path: str | None = None) -> Response | None:
        """The 403 for a request outside the principal's scope, or None when it may go on."""
        why = principal.lacks(scope, path)
        if why is None:
            return None
        return problem(403, why, missing_scope=scope, token=principal.name, **({"path": path} if path else {}))

    @staticmethod
    def by(via: str, principal: Principal, approver: str | None = None) -> str:
        """Who did it, as journaled: how it came and the token's name (or, on an open server, the approver)."""
        if not principal.anonymous:
            return f"{via}:{principal.name}"
        return f"{via}:{approver}" if approver else via

    # -- carrying runs on -------------------------------------------------------------

    async def decide(self, execution_id: str, value: dict[str, Any], path: str | None, seq: int | None,
                     by: str) -> bool:
        """Claim, then continue in the background when this server has the runner; whether it does."""
        runner = await self.operator.decide(execution_id, value, path=path, seq=seq, by=by)  # a misfit: refused first
        if runner is None or not self.tasks:
            return False
        self.carry_on_here(execution_id)
        return True

    async def continue_if_ours(self, execution_id: str) -> bool:
        """Carry an execution on here when this server has its runner; whether it does."""
        found = await self.operator.store.get_execution(execution_id)
        if not self.tasks or found is None or self.operator.runner_for(found) is None:
            return False
        self.carry_on_here(execution_id)
        return True

    def carry_on_here(self, execution_id: str) -> None:
        done = self.settled[execution_id] = anyio.Event()
        self.settled.move_to_end(execution_id)
        while len(self.settled) > SETTLED_KEPT and next(iter(self.settled.values())).is_set():
            self.settled.popitem(last=False)  # bounded: the oldest runs that ended are forgotten
        self.tasks[0].start_soon(self._carry_on, execution_id, done)

    async def _carry_on(self, execution_id: str, done: anyio.Event) -> None:
        try:
            result = await self.operator.resume(execution_id)
            log.info("execution %s continued: %s", execution_id, result.status)
        except Exception:
            log.exception("execution %s could not continue here; a recovery will carry it on", execution_id)
        finally:
            done.set()  # this run's own event: a later decision's run has its own


def nobody_continues(execution_id: str) -> str:
    return (f"no process here continues it: run it with a worker (`tether worker --app module:attr`) "
            f"or `tether resume {shlex.quote(execution_id)} --app module:attr`")


def too_many(wait: int) -> str:
    return f"Too many wrong tokens from this address; try again in {wait} s. Nothing was done."


def client_address(request: Request) -> str:
    """The peer's address as the server sees it (behind a proxy, the proxy's unless it forwards it)."""
    return request.client.host if request.client is not None else "unknown"
