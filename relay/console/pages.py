"""The console's pages for people: sign-in, overview, events, one event, leases, audit, pauses
(with pause and resume, audited), and the actions (each shown as its dry run first, then
confirmed). Every page needs a credential; without one the browser is sent to the sign-in
page. Every form that acts carries the session's CSRF token."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from relay.console import charts
from relay.console.auth import COOKIE, SESSION_SECONDS, Credential, csrf_ok
from relay.console.views import (
    ACTIONS,
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
from relay.records import Status
from relay.store.operations.actions import Actor
from relay.store.operations.filters import EventFilter
from relay.store.operations.pausing import HELD_COUNTED_UP_TO

if TYPE_CHECKING:
    from relay.console.context import Console

Page = Callable[[Request, Credential], Awaitable[Response]]
#: The filter fields a page carries from the list to the confirmation and back.
FILTER_FIELDS = ("status", "event_type", "key", "error", "since", "until", "ids", "all")
#: What a replay's form carries besides the filter.
REPLAY_FIELDS = ("to_queue", "to_subject", "after")
#: Rows a dry run shows before its confirmation.
PREVIEW_ROWS = 20


def _filter_params(values: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(values[k]) for k in FILTER_FIELDS if values.get(k) not in (None, "")}


def routes(c: Console) -> list[Route]:
    def render(
        request: Request, name: str, cred: Credential | None, status: int = 200, **ctx: Any
    ) -> Response:
        def url(route: str, **params: Any) -> str:
            return str(request.url_for(route, **params).path)

        def sibling(database: str) -> str:
            # Mounted side by side under one parent: /<parent>/<this> -> /<parent>/<database>/
            root = str(request.scope.get("app_root_path", ""))
            parent = root[: -len(c.database) - 1] if c.database else root
            return f"{parent}/{database}/"

        context = {
            "cred": cred,
            "url": url,
            "now": datetime.now(UTC),
            "database": c.database,
            "databases": c.databases,
            "sibling": sibling,
            **ctx,
        }
        response: Response = c.templates.TemplateResponse(
            request, name, context, status_code=status
        )
        return response

    def page(
        handler: Page, *, acting: bool = False, posted: bool = False
    ) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            cred = c.credential(request)
            if cred is None:
                here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                target = str(request.url_for("signin").path) + "?" + urlencode({"next": here})
                return RedirectResponse(target, status_code=303)
            if acting and not cred.may_act:
                message = "This sign-in may view, not act: sign in with the operator token."
                return render(request, "error.html", cred, 403, message=message)
            if acting or posted:
                form = await request.form()
                if not csrf_ok(cred, _str(form, "csrf")):
                    message = "The form's CSRF token is missing or stale: reload and try again."
                    return render(request, "error.html", cred, 403, message=message)
            try:
                return await handler(request, cred)
            except ANSWERED as exc:
                return render(request, "error.html", cred, failure_status(exc), message=str(exc))

        return endpoint

    async def signin(request: Request) -> Response:
        nxt = request.query_params.get("next", "")
        name = ""
        if request.method == "POST":
            origin = request.headers.get("origin")
            if origin and _netloc(origin) != request.headers.get("host"):
                # A sign-in posted from another site (login CSRF) is refused.
                return render(request, "signin.html", None, 403, next="", failed=True)
            form = await request.form()
            token, name, nxt = _str(form, "token"), _str(form, "name"), _str(form, "next")
            role = c.guard.role_of(token)
        elif "code" in request.query_params:
            role = c.guard.redeem(request.query_params["code"])
            if role is None:
                message = "This sign-in link was used already or is not valid: use the token."
                return render(request, "signin.html", None, 401, next=nxt, message=message)
        elif "token" in request.query_params:
            # A long-lived token in a URL stays in proxies' logs and the browser's history.
            message = "A token is not accepted in a URL: paste it in the form."
            return render(request, "signin.html", None, 400, next=nxt, message=message)
        else:
            return render(request, "signin.html", None, next=nxt, failed=False)
        if role is None:
            return render(request, "signin.html", None, 401, next=nxt, failed=True)
        home = str(request.url_for("overview").path)
        # Only a path of this console: never another site ("//host", "/\\host").
        inside = nxt.startswith(home) and not nxt.startswith("//") and "\\" not in nxt
        target = nxt if inside else home
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            c.guard.issue(role, name or ""),
            max_age=SESSION_SECONDS,
            path=home,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def signout(request: Request, cred: Credential) -> Response:
        home = str(request.url_for("overview").path)
        response = RedirectResponse(str(request.url_for("signin").path), status_code=303)
        response.delete_cookie(COOKIE, path=home, httponly=True, samesite="strict")
        return response

    async def overview(request: Request, cred: Credential) -> Response:
        report = (await run_in_threadpool(c.store.status)).as_dict()
        minutes = await run_in_threadpool(c.store.sent_per_minute)
        throughput = charts.per_minute(minutes, "sent", "Sent per minute, last hour", "events")
        lag = charts.per_minute(
            minutes, "max_lag", "Commit-to-sent lag per minute (largest)", "s", "{:,.2f}"
        )
        return render(
            request,
            "overview.html",
            cred,
            report=report,
            charts=[throughput, lag],
            sent_last_hour=sum(m["sent"] for m in minutes),
        )

    async def events(request: Request, cred: Credential) -> Response:
        params = request.query_params
        f = read_filter(params)
        limit, after = read_page(params)
        rows = await run_in_threadpool(c.store.list_events, f, limit, after)
        query = _filter_params(params)
        nxt = None
        if len(rows) == limit:
            nxt = urlencode({**query, "limit": limit, "after": rows[-1]["id"]})
        statuses = f.statuses
        return render(
            request,
            "events.html",
            cred,
            rows=rows,
            query=query,
            form=params,
            next_query=nxt,
            statuses=[s.value for s in Status],
            can_retry=statuses == (Status.FAILED,),
            can_purge=statuses in ((Status.FAILED,), (Status.SENT,)),
            can_replay=statuses == (Status.SENT,),
            replay_to="subject" if c.settings.events_on_nats else "queue",
        )

    async def event(request: Request, cred: Credential) -> Response:
        row_id = bounded_id(request.path_params["row_id"], "the row id")
        row = await run_in_threadpool(c.store.event, row_id)
        if row is None:
            return render(request, "error.html", cred, 404, message=f"No event {row_id}.")
        shown = jsonable(row, c.redact)
        return render(request, "event.html", cred, row=row, shown=shown)

    async def leases(request: Request, cred: Credential) -> Response:
        holders = await run_in_threadpool(c.store.leases)
        f = EventFilter(statuses=(Status.PROCESSING,))
        rows = await run_in_threadpool(c.store.list_events, f, 500, None)
        by_holder: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_holder.setdefault(r["locked_by"] or "", []).append(r)
        return render(request, "leases.html", cred, holders=holders, by_holder=by_holder)

    async def audit(request: Request, cred: Credential) -> Response:
        limit, after = read_page(request.query_params)
        rows = await run_in_threadpool(c.store.audit_log, limit, after)
        nxt = rows[-1]["id"] if len(rows) == limit else None
        return render(request, "audit.html", cred, rows=rows, next_after=nxt, limit=limit)

    async def pauses(request: Request, cred: Credential) -> Response:
        listed = await run_in_threadpool(c.pauses.paused)
        held = await run_in_threadpool(c.pauses.held_rows)
        cap = HELD_COUNTED_UP_TO
        return render(request, "pauses.html", cred, pauses=listed, held=held, cap=cap)

    async def pauses_act(request: Request, cred: Credential) -> Response:
        form = await request.form()
        actor = Actor(cred.name, cred.role, "console")
        await run_in_threadpool(lambda: pause_action(c.pauses, form, actor))
        return RedirectResponse(str(request.url_for("pauses").path), status_code=303)

    async def preview(request: Request, cred: Credential) -> Response:
        form = await request.form()
        verb, f = _action(form)
        if verb == "replay":
            return await replaying(request, cred, form, f, dry_run=True)
        done = await run_in_threadpool(
            lambda: act(c.store, verb, f, dry_run=True, actor=None, values=form)
        )
        rows = await run_in_threadpool(c.store.list_events, f, PREVIEW_ROWS, None)
        fields = _filter_params(form)
        if f.all:
            fields["all"] = "true"
        return render(
            request, "confirm.html", cred, verb=verb, f=f, done=done, rows=rows, fields=fields
        )

    async def replaying(
        request: Request, cred: Credential, form: FormData, f: EventFilter, *, dry_run: bool
    ) -> Response:
        actor = Actor(cred.name, cred.role, "console")
        report = await run_in_threadpool(
            lambda: replay(c.settings, c.store, f, form, dry_run=dry_run, actor=actor)
        )
        fields = {**_filter_params(form), **{k: _str(form, k) for k in REPLAY_FIELDS}}
        if f.all:
            fields["all"] = "true"
        if dry_run:
            rows = await run_in_threadpool(c.store.list_events, f, PREVIEW_ROWS, None)
            return render(
                request, "replay.html", cred, f=f, report=report, rows=rows, fields=fields
            )
        return render(request, "replay.html", cred, f=f, report=report, rows=[], fields=fields)

    async def run(request: Request, cred: Credential) -> Response:
        form = await request.form()
        verb, f = _action(form)
        if verb == "replay":
            return await replaying(request, cred, form, f, dry_run=False)
        actor = Actor(cred.name, cred.role, "console")
        done = await run_in_threadpool(
            lambda: act(c.store, verb, f, dry_run=False, actor=actor, values=form)
        )
        report = (await run_in_threadpool(c.store.status)).as_dict()
        status = (f.statuses or (Status.FAILED,))[0].value
        back = urlencode({k: v for k, v in _filter_params(form).items() if k not in ("ids", "all")})
        return render(
            request,
            "done.html",
            cred,
            verb=verb,
            done=done,
            report=report,
            acted=status,
            back=back,
        )

    return [
        Route("/", page(overview), name="overview"),
        Route("/signin", signin, methods=["GET", "POST"], name="signin"),
        Route("/signout", page(signout, posted=True), methods=["POST"], name="signout"),
        Route("/events", page(events), name="events"),
        Route("/events/{row_id:int}", page(event), name="event"),
        Route("/leases", page(leases), name="leases"),
        Route("/audit", page(audit), name="audit"),
        Route("/pauses", page(pauses), name="pauses"),
        Route("/pauses/act", page(pauses_act, acting=True), methods=["POST"], name="pauses_act"),
        Route("/actions/preview", page(preview, acting=True), methods=["POST"], name="preview"),
        Route("/actions/run", page(run, acting=True), methods=["POST"], name="run"),
    ]


def _netloc(url: str) -> str | None:
    try:
        return urlsplit(url).netloc
    except ValueError:  # "http://[::1" and the like: not this host
        return None


def _str(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


def _action(form: FormData) -> tuple[str, EventFilter]:
    verb = _str(form, "action")
    if verb not in ACTIONS:
        raise BadRequest(f"unknown action {verb!r}")
    values: dict[str, Any] = {k: _str(form, k) for k in FILTER_FIELDS}
    if verb == "replay":
        values["status"] = "sent"
    f = read_filter(values)
    if not f.statuses:
        f = read_filter({**values, "status": "failed"})
    if not f.selects and not f.all:
        # The list's button acts on everything it shows: say so, explicitly.
        f = read_filter({**values, "status": ",".join(s.value for s in f.statuses), "all": "true"})
    return verb, f


__all__ = ["routes"]
