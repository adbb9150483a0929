"""The HTTP API described as an OpenAPI 3.1 document, served at ``GET /api/openapi.json``.

Bodies are described by the same pydantic models the API answers with, so the
document cannot drift from what is sent; the tests check its operations
against the app's routes, and fuzz the real server against it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic.json_schema import models_json_schema
from tether.runtime._core.execution import RunResult
from tether.runtime._executions.query import ActorState
from tether.stores import Execution, JournalEntry, PendingInterrupt

if TYPE_CHECKING:
    from pydantic import BaseModel

_MODELS: list[type[BaseModel]] = [Execution, PendingInterrupt, JournalEntry, ActorState, RunResult]
_STATUSES = ["queued", "running", "paused", "decided", "completed", "failed", "cancelled", "timed_out"]


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _problem(description: str) -> dict[str, Any]:
    return _json(_ref("Problem"), description)


def _query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema or _TEXT}


_ID = {"name": "execution_id", "in": "path", "required": True,
       "schema": {"type": "string", "minLength": 1, "pattern": r"^[^\x00]+$"},
       "description": "The execution's id, percent-encoded whole (an id may hold any character, '/' too)."}
_WAIT = {"type": "number", "minimum": 0}
_STAMP = (r"[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
          r"(\.[0-9]{1,6})?")
_ZONE = r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
# The filters, as the page's form sends them: an empty one is no filter.
_TIME = {"type": "string", "pattern": f"^({_STAMP}{_ZONE}?)?$", "description": "ISO 8601, like 2026-12-01T09:30:00Z."}
_TEXT = {"type": "string", "pattern": r"^[^\x00]*$", "description": "Any text without NUL."}

# Answers any API call may get, whatever it asked.
_EVERY = {
    "400": _problem("A parameter holds a NUL character (or, as the operation says, is not what it takes)."),
    "401": _problem("No token, or a wrong or revoked one, where the server has a token."),
    "403": _problem("The token lacks the scope (or the path) this call needs, or the call came from another "
                    "site's page; nothing was done."),
    "429": _problem("Too many wrong tokens from this address of late; Retry-After says when to try again."),
    "503": _problem("The store does not exist (yet), or cannot be reached now; nothing was done. "
                    "Retry-After says when to ask again."),
}
_POSTED = {"413": {"description": "The body is over the server's limit (1 MiB by default); nothing was read."}}


def _operation(summary: str, responses: dict[str, Any], *, parameters: list[dict[str, Any]] | None = None,
               body: dict[str, Any] | None = None, body_required: bool = True) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "parameters": parameters or [],
                                 "responses": {**_EVERY, **responses, **(_POSTED if body is not None else {})}}
    if body is not None:
        operation["requestBody"] = {"required": body_required, "content": {"application/json": {"schema": body}}}
    return operation


def _paths() -> dict[str, Any]:
    timeline = {"type": "object", "required": ["execution", "pending", "decision", "journal"], "properties": {
        "execution": _ref("Execution"), "pending": {"type": "array", "items": _ref("PendingInterrupt")},
        "decision": {"anyOf": [{"type": "null"}, {"type": "object"}]},
        "journal": {"type": "array", "items": _ref("JournalEntry")}}}
    accepted = {"type": "object", "required": ["execution_id", "status", "continuing", "detail"], "properties": {
        "execution_id": {"type": "string"}, "status": {"const": "accepted"}, "continuing": {"type": "boolean"},
        "detail": {"type": "string"}}}
    continued = {"allOf": [_ref("RunResult"), {"type": "object", "required": ["continuing", "detail"], "properties": {
        "continuing": {"type": "boolean"}, "detail": {"type": "string"}}}]}
    return {
        "/api/openapi.json": {"get": {"summary": "This document (no token needed: it holds no data).",
                                      "security": [{}],
                                      "responses": {"200": _json({"type": "object"}, "The document.")}}},
        "/api/executions": {"get": _operation(
            "Executions, newest first, a page at a time.",
            {"200": _json({"type": "object", "required": ["executions", "before"], "properties": {
                "executions": {"type": "array", "items": _ref("Execution")},
                "before": {"type": ["string", "null"], "description": "The next page's ?before=, or null."}}},
                "A page of executions."),
             "400": _problem("A filter that is not what it takes.")},
            parameters=[_query("status", "Only executions in this status.", {"type": "string", "enum": ["", *_STATUSES]}),
                        _query("runner", "Only executions of this root path."),
                        _query("version", "Only executions of this version."),
                        _query("path", "Only executions with a pending interrupt under this path prefix."),
                        _query("thread", "Only the executions of this thread."),
                        _query("since", "Created at or after this time (ISO 8601; UTC when it has no zone).",
                               _TIME),
                        _query("until", "Created before this time (ISO 8601).", _TIME),
                        _query("id", "Only ids that start with this."),
                        _query("before", "The previous page's cursor (its `before`): a time and an id.",
                               {"type": "string", "pattern": f"^({_STAMP}{_ZONE} [^\\x00]+)?$"}),
                        _query("limit", "Executions per page, 1 to 1000 (default 50).",
                               {"type": "integer", "minimum": 1, "maximum": 1000})])},
        "/api/pending": {"get": _operation(
            "Pending interrupts, oldest first.",
            {"200": _json({"type": "array", "items": _ref("PendingInterrupt")}, "The pending interrupts.")},
            parameters=[_query("path_prefix", "Only interrupts under this path prefix.")])},
        "/api/executions/{execution_id}": {"get": _operation(
            "An execution, its pending interrupts, the decision it waits to carry out, and its journal.",
            {"200": _json(timeline, "The execution."), "400": _problem("A wait= that is not a number of seconds."),
             "404": _problem("No such execution.")},
            parameters=[_ID, _query("wait", "Seconds to wait (at most 60) for the run this server continues to "
                                            "pause or end.", _WAIT)])},
        "/api/executions/{execution_id}/state": {"get": _operation(
            "One actor's state as of its last boundary (read only, no lease).",
            {"200": _json({"anyOf": [_ref("ActorState"), timeline]},
                          "The actor's state (or, for an id that itself ends in /state, that execution)."),
             "404": _problem("No such execution, or no such actor in it.")},
            parameters=[_ID, _query("path", "The actor's path; the root by default.")])},
        "/api/executions/{execution_id}/events": {"get": _operation(
            "The execution's events as server-sent events, from a cursor on.",
            {"200": {"description": "An event stream (id: the cursor; event: the type; data: the event as JSON).",
                     "content": {"text/event-stream": {"schema": {"type": "string"}}}},
             "400": _problem("A cursor or until= that is not one."), "404": _problem("No such execution.")},
            parameters=[_ID, _query("after", "The cursor to continue after (or send Last-Event-ID).",
                                    {"type": "integer", "minimum": 0}),
                        _query("until", "finished (the default) or paused: when the stream ends.",
                               {"type": "string", "enum": ["finished", "paused"]})])},
        "/api/executions/{execution_id}/resume": {"post": _operation(
            "Decide a pending interrupt: claimed exactly once, then the run continues.",
            {"202": _json(accepted, "The decision is claimed and journaled."),
             "400": _problem("The body is not JSON, or seq= is not a number; nothing was claimed."),
             "404": _problem("No such execution."),
             "409": _problem("Decided already, or nothing of it waits for a decision; nothing was claimed."),
             "415": _problem("The body is not application/json."),
             "422": _problem("Not a valid decision for this interrupt; nothing was claimed.")},
            parameters=[_ID, _query("path", "The call path of the interrupt to decide."),
                        _query("seq", "The seq of the pending interrupt.", {"type": "integer"})],
            body={"type": "object", "description": 'The decision, like {"approved": true}.'})},
        "/api/executions/{execution_id}/cancel": {"post": _operation(
            "Cancel an execution wherever it runs or waits.",
            {"200": _json(_ref("RunResult"), "Cancelled."),
             "202": _json(_ref("RunResult"), "Recorded; the process that runs it stops it at its next await."),
             "400": _problem("The body is not JSON, or wait= is not a number."), "404": _problem("No such execution."),
             "409": _problem("It had already finished."), "422": _problem("A reason that is not a string.")},
            parameters=[_ID, _query("wait", "Seconds to wait for a running one to stop (default 10, at most 60).",
                                    _WAIT)],
            body={"type": "object", "properties": {"reason": {"type": "string"}}}, body_required=False)},
        "/api/executions/{execution_id}/retry": {"post": _operation(
            "Continue a failed execution from its last good boundary.",
            {"202": _json(continued, "Retrying."), "404": _problem("No such execution."),
             "409": _problem("It has not failed.")},
            parameters=[_ID])},
        "/api/executions/{execution_id}/fork": {"post": _operation(
            "Start a new execution from a boundary of this one's history.",
            {"201": _json({"type": "object", "required": ["execution_id", "forked_from", "at", "continuing",
                                                          "detail"]}, "Forked."),
             "400": _problem("The body is not JSON."), "404": _problem("No such execution."),
             "409": _problem("No such boundary, or the new id is taken."), "415": _problem("Not application/json."),
             "422": _problem("The fork is not well formed, or its update does not fit the boundary.")},
            parameters=[_ID],
            body={"type": "object", "required": ["at", "as"], "properties": {
                "at": {"anyOf": [{"type": "integer"}, {"type": "string"}],
                       "description": "A seq of the history, or a label such as node:b."},
                "as": {"type": "string", "minLength": 1, "description": "The fork's execution id."},
                "effects": {"enum": ["again", "reuse"]},
                "update": {"description": "What the boundary recorded, rewritten (admin only)."}}})},
        "/api/executions/{execution_id}/messages": {"post": _operation(
            "Send a message to an actor of the execution.",
            {"202": _json({"type": "object", "required": ["execution_id", "path", "seq", "status"]}, "Accepted."),
             "400": _problem("The body is not JSON."), "404": _problem("No such execution, or no such actor."),
             "409": _problem("It has finished."), "415": _problem("Not application/json."),
             "422": _problem("Not what the receiving actor takes.")},
            parameters=[_ID, _query("path", "The receiving actor's path; the root by default.")],
            body={"type": "object", "description": "The message."})},
    }


def document() -> dict[str, Any]:
    """The API's OpenAPI document."""
    _, schemas = models_json_schema([(model, "serialization") for model in _MODELS],
                                    ref_template="#/components/schemas/{model}")
    components = {**schemas.get("$defs", {}), "Problem": {
        "type": "object", "required": ["detail"], "properties": {"detail": {"type": "string"}},
        "description": "What went wrong, and what to do about it."}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "tether", "version": "1",
                 "description": "Executions, their pending interrupts and decisions, and the operator's actions."},
        "paths": _paths(),
        "components": {"schemas": components, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        # A server without a token takes calls without one (loopback only).
        "security": [{"bearer": []}, {}],
    }
