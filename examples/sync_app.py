"""A plain WSGI refunds app (no async in sight) on tether's blocking runtime, under a threaded server.

    python examples/sync_app.py                      # serve on http://127.0.0.1:8000
    curl -X POST localhost:8000/refunds -d '{"order": "7", "amount": 5000}'
    curl localhost:8000/approvals                    # what waits for a manager
    curl -X POST localhost:8000/approvals/refund-7 -d '{"approved": true, "by": "alice"}'
    curl localhost:8000/refunds/refund-7             # completed, with what it paid
    python examples/sync_app.py --selftest           # start on a free port, make those requests, print, exit

Every request runs in a thread of its own (the server is wsgiref's, with
``socketserver.ThreadingMixIn``), and each view calls the runtime as it would a
database: ``rt.run(...)``, ``rt.pending()``, ``rt.resume(...)`` block the
request's thread while the run goes on in the runtime's event loop, next to
every other request's. A refund over $1,000 pauses for a manager; of two
managers approving the same one at once, one wins and the other gets 409.
The run is durable: stop the server while refunds wait, start it again, and
they are still waiting. The store is ``--store`` (``$TETHER_STORE``, else
``sqlite:///tether.db``); ``--backend trio`` runs the runtime's loop on trio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socketserver
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tether.actors import Chain
from tether.runtime import (
    AlreadyResumed,
    BlockingRuntime,
    ExecutionFinished,
    ExecutionNotFound,
    NoPendingInterrupt,
    Resume,
    blocking,
    interrupt,
)

if TYPE_CHECKING:
    from collections.abc import Iterable
    from wsgiref.types import StartResponse, WSGIEnvironment

# -- the flow ------------------------------------------------------------------------------


def validate(state: dict[str, Any]) -> dict[str, Any]:
    if state["amount"] <= 0:
        raise ValueError("a refund is for a positive amount")
    return {}


def approve(state: dict[str, Any]) -> dict[str, Any]:
    if state["amount"] <= 1000:
        return {"approved": True, "approver": "auto"}
    decision = interrupt("manager_approval", {"order": state["order"], "amount": state["amount"]})
    return {"approved": decision.approved, "approver": decision.metadata.get("approver")}


def pay(state: dict[str, Any]) -> dict[str, Any]:
    return {"paid": state["amount"] if state["approved"] else 0}


refunds = Chain("refund", [validate, approve, pay])  # no store=: the blocking runtime lends it its own
runners = [refunds]  # for `tether worker --app examples.sync_app:runners`


# -- the views -----------------------------------------------------------------------------

View = Callable[[BlockingRuntime, dict[str, Any], str], tuple[int, Any]]


def start_refund(rt: BlockingRuntime, body: dict[str, Any], _: str) -> tuple[int, Any]:
    order, amount = str(body["order"]), int(body["amount"])
    result = rt.run(refunds, {"order": order, "amount": amount}, execution_id=f"refund-{order}")
    return 200, {"id": result.execution_id, "status": result.status}


def show_refund(rt: BlockingRuntime, _: dict[str, Any], execution_id: str) -> tuple[int, Any]:
    result = rt.result(execution_id)
    return 200, {"id": execution_id, "status": result.status, "output": result.output, "error": result.error}


def list_approvals(rt: BlockingRuntime, _: dict[str, Any], __: str) -> tuple[int, Any]:
    return 200, [{"id": p.execution_id, "path": p.agent_path, "reason": p.reason, "context": p.context}
                 for p in rt.pending(path_prefix="chain:refund/")]


def decide(rt: BlockingRuntime, body: dict[str, Any], execution_id: str) -> tuple[int, Any]:
    decision = Resume(approved=bool(body["approved"]), metadata={"approver": str(body["by"])})
    try:
        result = rt.resume(refunds, execution_id, decision, by=f"web:{body['by']}")
    except AlreadyResumed:
        return 409, {"error": f"{execution_id} was decided by someone else first"}
    except (ExecutionFinished, NoPendingInterrupt) as exc:
        return 409, {"error": str(exc)}
    return 200, {"id": execution_id, "status": result.status, "output": result.output}


ROUTES: list[tuple[str, re.Pattern[str], View]] = [
    ("POST", re.compile(r"/refunds"), start_refund),
    ("GET", re.compile(r"/refunds/([\w-]+)"), show_refund),
    ("GET", re.compile(r"/approvals"), list_approvals),
    ("POST", re.compile(r"/approvals/([\w-]+)"), decide),
]


def make_app(rt: BlockingRuntime) -> Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]:
    """The WSGI callable: a JSON API over the runtime, as a Flask or Django view would be."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        code, answer = 404, {"error": "no such page"}
        for method, pattern, view in ROUTES:
            match = pattern.fullmatch(environ.get("PATH_INFO", ""))
            if match and environ["REQUEST_METHOD"] == method:
                size = int(environ.get("CONTENT_LENGTH") or 0)
                body = json.loads(environ["wsgi.input"].read(size) or b"{}")
                try:
                    code, answer = view(rt, body, match.group(1) if match.groups() else "")
                except ExecutionNotFound as exc:  # raised in the runtime's loop, caught here as itself
                    code, answer = 404, {"error": str(exc)}
                break
        data = json.dumps(answer).encode()
        reason = {200: "OK", 404: "Not Found", 409: "Conflict"}[code]
        start_response(f"{code} {reason}", [("Content-Type", "application/json"),
                                            ("Content-Length", str(len(data)))])
        return [data]

    return app


# -- the server ----------------------------------------------------------------------------


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """wsgiref's server with a thread per request, as gunicorn's threaded workers give a Flask app."""

    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # the self-test prints its own account


def serve(rt: BlockingRuntime, port: int) -> WSGIServer:
    """A threaded server for the app, bound now (``port`` 0: a free one), not yet serving."""
    return make_server("127.0.0.1", port, make_app(rt), server_class=ThreadingWSGIServer,
                       handler_class=QuietHandler)


def selftest(base: str) -> bool:
    """Make the requests a user would, some at once, print what came back; True if all is as it should be."""

    def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        try:
            with urllib.request.urlopen(urllib.request.Request(base + path, data=data, method=method),
                                        timeout=30) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    ok = True

    def check(what: str, good: bool) -> None:
        nonlocal ok
        ok = ok and good
        print(f"{'ok ' if good else 'BAD'} {what}")

    orders = [("1", 250), ("2", 5000), ("3", 12_000), ("4", 40_000)]
    with ThreadPoolExecutor(8) as pool:
        started = list(pool.map(lambda o: call("POST", "/refunds", {"order": o[0], "amount": o[1]}), orders))
        statuses = [answer["status"] for _, answer in started]
        check(f"started 4 refunds at once: {statuses}", statuses == ["completed", "paused", "paused", "paused"])
        _, waiting = call("GET", "/approvals")
        ids = sorted(item["id"] for item in waiting)
        check(f"waiting for a manager: {ids}", ids == ["refund-2", "refund-3", "refund-4"])
        # Two managers approve each refund at the same moment: one of each pair wins.
        tries = [(item["id"], by) for item in waiting for by in ("alice", "bob")]
        answers = list(pool.map(lambda t: call("POST", f"/approvals/{t[0]}", {"approved": True, "by": t[1]}),
                                tries))
    codes = sorted(code for code, _ in answers)
    check(f"approved twice each, at once: {codes.count(200)} won, {codes.count(409)} got 409",
          codes == [200] * 3 + [409] * 3)
    code, _ = call("POST", "/approvals/refund-1", {"approved": True, "by": "carol"})
    check(f"approving one that waits for nobody: {code}", code == 409)
    code, _ = call("GET", "/refunds/refund-99")
    check(f"a refund nobody started: {code}", code == 404)
    for order, amount in orders:
        _, shown = call("GET", f"/refunds/refund-{order}")
        output = shown["output"] or {}
        check(f"refund-{order}: {shown['status']}, paid {output.get('paid')} (approver {output.get('approver')})",
              shown["status"] == "completed" and output.get("paid") == amount)
    _, left = call("GET", "/approvals")
    check(f"left waiting: {len(left)}", left == [])
    return ok


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=os.environ.get("TETHER_STORE"),
                        help="a store URL (default: $TETHER_STORE, else sqlite:///tether.db; "
                             "--selftest: a file of its own)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--selftest", action="store_true", help="serve on a free port, make requests, exit")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as scratch:
        store = args.store or (f"sqlite:///{scratch}/sync_app.db" if args.selftest else "sqlite:///tether.db")
        # The runtime lives as long as the app: opened before the server starts, closed after it stopped.
        with blocking(store, backend=args.backend) as rt:
            server = serve(rt, 0 if args.selftest else args.port)
            if not args.selftest:
                print(f"serving on http://127.0.0.1:{server.server_port} (store {store}); Ctrl-C stops")
                try:
                    server.serve_forever()
                except KeyboardInterrupt:
                    pass
                finally:
                    server.server_close()
                return 0
            serving = threading.Thread(target=server.serve_forever)
            serving.start()
            try:
                ok = selftest(f"http://127.0.0.1:{server.server_port}")
            finally:
                server.shutdown()
                server.server_close()
                serving.join()
        print("all good" if ok else "something went wrong")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
