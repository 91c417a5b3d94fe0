"""The JSON API under ``/api``: the contract for scripts (names stable; docs/operations.md).

``GET /api/status`` (= ``relay status --json``), ``GET /api/events`` (a keyset page),
``GET /api/events/{id}``, ``GET /api/audit``, ``POST /api/events/retry|purge``, ``POST
/api/events/replay`` (the sent events a filter selects, to the body's ``to_queue``), ``GET
/api/pauses`` and ``POST /api/pauses`` (``{"action": "pause"|"resume", "kind", "value",
"reason"}``, audited). A missing or
wrong credential gets 401 and no data; a view-only one that acts gets 403. A browser session
may call the API too, with its CSRF token in ``X-CSRF-Token`` for a POST.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from relay.console.auth import Credential, csrf_ok
from relay.console.views import (
    ANSWERED,
    BadRequest,
    act,
    bounded_id,
    failure_status,
    jsonable,
    pause_action,
    read_filter,
    read_page,
    replay,
)
from relay.store.operations.filters import EventFilter
from relay.store.operations.store import Actor

if TYPE_CHECKING:
    from relay.console.context import Console

Handler = Callable[[Request, Credential], Awaitable[Response]]


def _error(status: int, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="relay"'} if status == 401 else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _selection(body: Mapping[str, Any], cred: Credential) -> tuple[bool, EventFilter, Actor]:
    """An action's body read: whether it is a dry run, the rows it selects, who asks."""
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise BadRequest("dry_run must be true or false")
    return dry_run, read_filter(body), Actor(cred.name, cred.role, cred.via)


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (ValueError, RecursionError):
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def routes(c: Console) -> list[Route]:
    def guarded(handler: Handler, *, acting: bool = False) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            cred = c.credential(request)
            if cred is None:
                return _error(401, "a valid token is required (Authorization: Bearer …)")
            if acting:
                if not cred.may_act:
                    return _error(403, "this token may view, not act")
                if cred.via == "console" and not csrf_ok(cred, request.headers.get("x-csrf-token")):
                    return _error(403, "a session's action needs its X-CSRF-Token")
            try:
                return await handler(request, cred)
            except ANSWERED as exc:
                return _error(failure_status(exc), str(exc))

        return endpoint

    async def status(request: Request, cred: Credential) -> Response:
        report = (await run_in_threadpool(c.store.status)).as_dict()
        report["pauses"] = [p.as_dict() for p in await run_in_threadpool(c.pauses.paused)]
        return JSONResponse(report)

    async def events(request: Request, cred: Credential) -> Response:
        f = read_filter(request.query_params)
        limit, after = read_page(request.query_params, default=100)
        rows = await run_in_threadpool(c.store.list_events, f, limit, after)
        nxt = rows[-1]["id"] if len(rows) == limit else None
        return JSONResponse({"events": [jsonable(r, c.redact) for r in rows], "next": nxt})

    async def event(request: Request, cred: Credential) -> Response:
        row_id = bounded_id(request.path_params["row_id"], "the row id")
        row = await run_in_threadpool(c.store.event, row_id)
        if row is None:
            return _error(404, f"no event {row_id}")
        return JSONResponse(jsonable(row, c.redact))

    async def audit(request: Request, cred: Credential) -> Response:
        limit, after = read_page(request.query_params, default=100)
        rows = await run_in_threadpool(c.store.audit_log, limit, after)
        nxt = rows[-1]["id"] if len(rows) == limit else None
        return JSONResponse({"actions": [jsonable(r, frozenset()) for r in rows], "next": nxt})

    def action(verb: str) -> Handler:
        async def run(request: Request, cred: Credential) -> Response:
            body = await _body(request)
            dry_run, f, actor = _selection(body, cred)
            done = await run_in_threadpool(
                lambda: act(c.store, verb, f, dry_run=dry_run, actor=actor, values=body)
            )
            out = {"matched": done.matched, "changed": done.changed}
            return JSONResponse(out | ({"expired": done.expired} if done.expired else {}))

        return run

    async def pauses(request: Request, cred: Credential) -> Response:
        listed = await run_in_threadpool(c.pauses.paused)
        return JSONResponse({"pauses": [p.as_dict() for p in listed]})

    async def pause_or_resume(request: Request, cred: Credential) -> Response:
        body = await _body(request)
        actor = Actor(cred.name, cred.role, cred.via)
        verb, kind, value, changed = await run_in_threadpool(
            lambda: pause_action(c.pauses, body, actor)
        )
        return JSONResponse({"action": verb, "kind": kind, "value": value, "changed": changed})

    async def replay_events(request: Request, cred: Credential) -> Response:
        body = await _body(request)
        dry_run, f, actor = _selection(body, cred)
        report = await run_in_threadpool(
            lambda: replay(c.settings, c.store, f, body, dry_run=dry_run, actor=actor)
        )
        return JSONResponse(report.as_dict())

    return [
        Route("/api/status", guarded(status), name="api_status"),
        Route("/api/events", guarded(events), name="api_events"),
        Route("/api/events/{row_id}", guarded(event), name="api_event"),
        Route("/api/audit", guarded(audit), name="api_audit"),
        Route("/api/events/retry", guarded(action("retry"), acting=True), methods=["POST"]),
        Route("/api/events/purge", guarded(action("purge"), acting=True), methods=["POST"]),
        Route("/api/events/replay", guarded(replay_events, acting=True), methods=["POST"]),
        Route("/api/pauses", guarded(pauses), name="api_pauses"),
        Route("/api/pauses", guarded(pause_or_resume, acting=True), methods=["POST"]),
    ]


__all__ = ["routes"]
