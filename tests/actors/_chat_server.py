"""A real HTTP server speaking the chat-completions protocol, scripted by the test.

It runs in a thread of the test process (so under either anyio backend), on a
free localhost port. Each request takes the next scripted answer; every request
is kept for the test to inspect. A `streamed` answer is sent as server-sent
events, in HTTP/1.1 chunks, the way a model streams its reply.
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
    events: list[Any] | None = None
    """If set, the answer is these server-sent events (``data:`` each, or a ``:`` comment if a str)."""
    drop_after: int | None = None
    """With ``events``: the connection drops after this many, in the middle of the next one."""
    done: bool = True
    """With ``events``: end with ``data: [DONE]``."""


def text(content: str) -> Answer:
    return Answer(body={"choices": [{"message": {"role": "assistant", "content": content}}]})


def calls(*pairs: tuple[str, str]) -> Answer:
    """Tool calls, each ``(name, arguments as JSON text)``."""
    return Answer(body={"choices": [{"message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": f"srv_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                       for i, (n, a) in enumerate(pairs)],
    }}]})


def streamed(answer: Answer, *, size: int = 4, drop_after: int | None = None, end: bool = True) -> Answer:
    """``answer``'s reply (`text` or `calls`) as chat-completion chunks, the way a model streams it.

    The text comes in pieces of ``size`` characters; each call's id and name come
    first, then its arguments in pieces of ``size``, the calls' pieces interleaved.
    Comments and a usage chunk (no choices) come along, as real servers send
    them. ``end=False`` stops before the finish_reason and ``[DONE]`` (the body
    ends cleanly, the reply does not).
    """
    message = answer.body["choices"][0]["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events: list[Any] = [": the model is thinking", chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    events += [chunk({"content": content[i:i + size]}) for i in range(0, len(content), size)]
    pieces: list[list[dict[str, Any]]] = []
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        pieces.append([{"index": index, "id": call["id"], "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""}}]
                      + [{"index": index, "function": {"arguments": arguments[i:i + size]}}
                         for i in range(0, len(arguments), size)])
    for place in range(max(map(len, pieces), default=0)):
        events += [chunk({"tool_calls": [p[place]]}) for p in pieces if place < len(p)]
    if end:
        events += [chunk({}, "tool_calls" if pieces else "stop"), {"choices": [], "usage": {"total_tokens": 9}}]
    return Answer(events=events, drop_after=drop_after, done=end)


def sse(event: Any) -> bytes:
    return (f": {event}\n\n" if isinstance(event, str) else f"data: {json.dumps(event)}\n\n").encode()


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
                if answer.events is not None:
                    self._stream(answer)
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

            def _stream(self, answer: Answer) -> None:
                assert answer.events is not None
                self.protocol_version = "HTTP/1.1"  # chunked; "connection: close" ends it after this answer
                self.send_response(answer.status)
                for name, value in {"content-type": "text/event-stream", "transfer-encoding": "chunked",
                                    "connection": "close", **answer.headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                events = [sse(e) for e in answer.events] + ([b"data: [DONE]\n\n"] if answer.done else [])
                for sent, event in enumerate(events):
                    if sent == answer.drop_after:
                        # Half an event, and no last chunk: the client sees the body cut short.
                        self.wfile.write(b"%x\r\n%s" % (len(event), event[: len(event) // 2]))
                        self.wfile.flush()
                        return
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

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
