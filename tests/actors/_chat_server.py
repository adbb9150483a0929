"""A real HTTP server speaking the chat-completions protocol, scripted by the test.

It runs in a thread of the test process (so under either anyio backend), on a
free localhost port. Each request takes the next scripted answer; every request
is kept for the test to inspect.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None
    """If set, the answer waits for it first (to make the client time out)."""


def text(content: str) -> Answer:
    return Answer(body={"choices": [{"message": {"role": "assistant", "content": content}}]})


def calls(*pairs: tuple[str, str]) -> Answer:
    """Tool calls, each ``(name, arguments as JSON text)``."""
    return Answer(body={"choices": [{"message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": f"srv_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                       for i, (n, a) in enumerate(pairs)],
    }}]})


class ChatServer:
    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.holds: list[threading.Event] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                server.requests.append({"path": self.path, "body": json.loads(self.rfile.read(length))})
                server.headers.append(dict(self.headers))
                answer = server.answers.pop(0) if server.answers else Answer(500, {"error": "no answer left"})
                if answer.hold is not None:
                    server.holds.append(answer.hold)
                    answer.hold.wait(30)
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

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        # serve_forever notices shutdown() between polls: a short poll keeps teardown quick.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for hold in self.holds:
            hold.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(10)
