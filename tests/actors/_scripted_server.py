"""A real HTTP server, scripted by the test, that each provider's test server specialises.

It runs in a thread of the test process (so under either anyio backend), on a
free localhost port. Each request takes the next scripted answer; every request
is kept for the test to inspect. An answer with ``events`` is sent as
server-sent events, in HTTP/1.1 chunks, the way a model streams its reply. A
provider's server says only what differs: how it frames an event, how a stream
ends, which headers it adds, what it answers when no answer is left (or to a
request its API would refuse), and where its API lives under the URL.

Also here: the helpers of the tests that follow an agent run against one of
these servers.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar, cast

if TYPE_CHECKING:
    from tether.actors import Agent
    from tether.stores import Store


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None
    """If set, the answer waits for it first (to make the client time out)."""
    events: list[Any] | None = None
    """If set, the answer is these server-sent events, each framed by the server's `frame`."""
    drop_after: int | None = None
    """With ``events``: the connection drops after this many, in the middle of the next one."""


A = TypeVar("A", bound=Answer)


class ScriptedServer(ABC, Generic[A]):
    url_suffix = ""
    """Where the API lives under the server's root: the client's ``base_url`` is `url`."""
    stream_headers: ClassVar[dict[str, str]] = {}
    """Added to (or replacing) a stream's headers, before the answer's own."""

    def __init__(self) -> None:
        self.answers: list[A] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.holds: list[threading.Event] = []
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.scripted = self
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}{self.url_suffix}"
        # serve_forever notices shutdown() between polls: a short poll keeps teardown quick.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    # -- what a provider's server says ---------------------------------------------------

    @abstractmethod
    def no_answer_left(self) -> A:
        """What the server answers when the test scripted no more answers."""

    @abstractmethod
    def frame(self, event: Any) -> bytes:
        """One event of ``events`` as its bytes on the wire."""

    def answer(self, path: str, headers: dict[str, str], body: Any) -> A:
        """The answer to this request: the next scripted one (a provider may refuse it first)."""
        return self.answers.pop(0) if self.answers else self.no_answer_left()

    def kept_headers(self, headers: Message) -> dict[str, str]:
        """A request's headers as kept in `headers` (and given to `answer`): as the client spelt them."""
        return dict(headers)

    def frames(self, answer: A) -> list[bytes]:
        """The stream's events as sent; a provider whose stream has a terminator adds it."""
        assert answer.events is not None
        return [self.frame(e) for e in answer.events]

    # -- the lifecycle -------------------------------------------------------------------

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for hold in self.holds:
            hold.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)


class _HTTPServer(ThreadingHTTPServer):
    scripted: ScriptedServer[Any]


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        scripted = cast(_HTTPServer, self.server).scripted
        length = int(self.headers.get("content-length", 0))
        body = json.loads(self.rfile.read(length))
        headers = scripted.kept_headers(self.headers)
        scripted.requests.append({"path": self.path, "body": body})
        scripted.headers.append(headers)
        answer = scripted.answer(self.path, headers, body)
        if answer.hold is not None:
            scripted.holds.append(answer.hold)
            answer.hold.wait(30)
        if answer.events is not None:
            self._stream(answer, scripted.frames(answer), scripted.stream_headers)
            return
        payload = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
        try:
            self.send_response(answer.status)
            for name, value in {"content-type": "application/json", **answer.headers}.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (a timeout test)

    def _stream(self, answer: Answer, frames: list[bytes], extra: dict[str, str]) -> None:
        self.protocol_version = "HTTP/1.1"  # chunked; "connection: close" ends it after this answer
        self.send_response(answer.status)
        for name, value in {"content-type": "text/event-stream", "transfer-encoding": "chunked",
                            "connection": "close", **extra, **answer.headers}.items():
            self.send_header(name, value)
        self.end_headers()
        for sent, frame in enumerate(frames):
            if sent == answer.drop_after:
                # Half an event, and no last chunk: the client sees the body cut short.
                self.wfile.write(b"%x\r\n%s" % (len(frame), frame[: len(frame) // 2]))
                self.wfile.flush()
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        return None


# -- for the tests that follow an agent over the wire ------------------------------------


async def follow(agent: Agent, task: str, execution_id: str) -> tuple[list[str], Any]:
    """Run ``task`` while following it: the tokens seen, and the run's result."""
    async with agent.stream(task, execution_id=execution_id) as events:
        tokens = [e.text async for e in events if e.type == "token"]
    return tokens, events.result


async def journaled_turn(store: Store, execution_id: str, label: str = "turn:1") -> dict[str, Any]:
    """The result a turn journaled (its message, as stored)."""
    [entry] = [e for e in await store.read_journal(execution_id) if e.label == label]
    assert isinstance(entry.payload, dict)
    result = entry.payload["result"]
    assert isinstance(result, dict)
    return result
