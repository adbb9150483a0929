"""A browser's session on the operator pages: its id, its login, its form tokens and its flash message.

Every cookie is HttpOnly and SameSite=Strict, and every value in one is signed
with the server's secret for the browser's random session id: a cookie planted
by another page (cookies are not port-isolated) or copied from another browser
is worth nothing. The message shown after a form (the flash) travels in such a
cookie, read once, never in the URL, so a link cannot put words on the page.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.responses import JSONResponse, Response

if TYPE_CHECKING:
    from starlette.requests import Request

SID_COOKIE = "tether_sid"
"""A random id per browser; its form tokens and its login are signed for it."""
LOGIN_COOKIE = "tether_login"
"""Who this browser logged in as (``admin``, or a token's digest), signed for its session id."""
FLASH_COOKIE = "tether_flash"
"""What the last form did, shown once on the next page."""
FLASH_MAX = 1000
"""The longest flash kept, in characters: a browser drops a cookie over 4 KB, and base64 grows text by a third."""


class Sessions:
    """Sign and read the cookies of the pages, with one secret.

    Args:
        secret: Signs every cookie and form token (derive it from the server's token
            so every replica and a restarted server accept each other's pages).
        secure: Mark cookies ``Secure`` (served over HTTPS).
    """

    def __init__(self, secret: bytes, *, secure: bool = False) -> None:
        self._secret = secret
        self._secure = secure

    def sign(self, purpose: bytes, value: str) -> str:
        # One secret, distinct purposes: the CSRF token shown on a page is never a login.
        return hmac.new(self._secret, purpose + b"\0" + value.encode(), hashlib.sha256).hexdigest()

    def _valid(self, purpose: bytes, value: str, signature: str) -> bool:
        return hmac.compare_digest(signature.encode(), self.sign(purpose, value).encode())

    @staticmethod
    def sid(request: Request) -> str:
        """The browser's session id, or a new one (`keep` sets it on the response)."""
        return request.cookies.get(SID_COOKIE) or secrets.token_hex(16)

    def keep(self, request: Request, response: Response, sid: str) -> None:
        """Set the session cookie when the browser does not have this one yet."""
        if request.cookies.get(SID_COOKIE) != sid:
            self._set(response, SID_COOKIE, sid)

    def csrf(self, sid: str) -> str:
        return self.sign(b"csrf", sid)

    def log_in(self, response: Response, who: str) -> None:
        """A fresh session logged in as ``who``: a session id planted before the login is not the one logged in."""
        sid = secrets.token_hex(16)
        self._set(response, SID_COOKIE, sid)
        self._set(response, LOGIN_COOKIE, f"{who}.{self.sign(b'login', sid + chr(0) + who)}")

    @staticmethod
    def log_out(response: Response) -> None:
        for name in (LOGIN_COOKIE, SID_COOKIE, FLASH_COOKIE):
            response.delete_cookie(name)

    def who(self, request: Request) -> str | None:
        """Who the browser logged in as, when its login cookie is genuine."""
        sid = request.cookies.get(SID_COOKIE, "")
        who, _, signature = request.cookies.get(LOGIN_COOKIE, "").rpartition(".")
        if not sid or not who or not self._valid(b"login", sid + chr(0) + who, signature):
            return None
        return who

    def flash(self, request: Request, response: Response, text: str, *, error: bool = False) -> None:
        """Show ``text`` once on the next page this browser opens (cut to fit a cookie)."""
        if len(text) > FLASH_MAX:
            text = text[: FLASH_MAX - 1] + "…"
        value = base64.urlsafe_b64encode(json.dumps([text, error]).encode()).decode()
        self._set(response, FLASH_COOKIE, f"{value}.{self.sign(b'flash', self.sid(request) + chr(0) + value)}")

    def take_flash(self, request: Request) -> tuple[str, bool] | None:
        """The message a form left for this page, if a genuine one is there (`forget_flash` clears it)."""
        raw = request.cookies.get(FLASH_COOKIE)
        if raw is None:
            return None
        value, _, signature = raw.rpartition(".")
        if not self._valid(b"flash", self.sid(request) + chr(0) + value, signature):
            return None
        text, error = json.loads(base64.urlsafe_b64decode(value))
        return str(text), bool(error)

    @staticmethod
    def forget_flash(request: Request, response: Response) -> None:
        if FLASH_COOKIE in request.cookies:
            response.delete_cookie(FLASH_COOKIE)

    async def form(self, request: Request, reload: str) -> dict[str, list[str]] | Response:
        """The posted form's fields, or the 403 that refuses a form from another origin or with a wrong token."""
        origin = request.headers.get("origin")
        # The scheme is left out: behind a TLS proxy the server sees http, the browser https.
        if origin is not None and urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
            return problem(403, f"This form was posted from {origin}, not from this server's own pages; "
                                f"nothing was done. Open {reload} on this server and submit it there "
                                f"(behind a proxy, pass the Host header through).")
        form = await request.form()
        sid = request.cookies.get(SID_COOKIE, "")
        given = str(form.get("csrf", ""))
        if not sid or not hmac.compare_digest(given.encode(), self.csrf(sid).encode()):
            return problem(403, f"The form's CSRF token is missing or wrong: reload {reload} and try again.")
        fields: dict[str, list[str]] = {}
        for key, value in form.multi_items():
            fields.setdefault(key, []).append(str(value))
        return fields

    def _set(self, response: Response, name: str, value: str) -> None:
        response.set_cookie(name, value, httponly=True, samesite="strict", secure=self._secure)


def problem(status: int, detail: str, **extra: object) -> JSONResponse:
    """An error answer: ``{"detail": ...}`` and whatever else says what went wrong."""
    return JSONResponse({"detail": detail, **extra}, status_code=status)
