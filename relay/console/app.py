"""The console's ASGI application: ``app(engine, settings)``, mountable in any Starlette or
FastAPI application, or served alone by ``relay console``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from relay.config import Settings
from relay.console import api, pages
from relay.console.auth import Guard
from relay.console.context import HERE, Console
from relay.exceptions import ConfigError
from relay.store.operations.store import OperationsStore

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Sent with every answer: nothing but the console's own files runs or loads; no framing.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        b"frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


class _Console:
    """The console's Starlette app, with its security headers on every answer, resolving its
    own route names even when mounted (a host app's router would not know them)."""

    def __init__(self, inner: Starlette) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        if not _valid_host(scope):
            await _answer(send, 400, b"the Host header is not a host name and port")
            return
        root = scope.get("root_path", "")
        scope = {**scope, "router": self.inner.router, "app_root_path": root}

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.inner(scope, receive, with_headers)


def _valid_host(scope: Scope) -> bool:
    """Whether the request's Host header (which every URL the console builds starts from)
    parses as ``host[:port]``; a missing one is left to the server's own address."""
    for name, value in scope.get("headers", []):
        if name == b"host":
            try:
                host = value.decode("latin-1")
                parts = urlsplit(f"http://{host}/")
                _ = parts.port
            except ValueError:
                return False
            return parts.netloc == host and all(c.isprintable() and c != " " for c in host)
    return True


async def _answer(send: Send, status: int, text: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *SECURITY_HEADERS],
        }
    )
    await send({"type": "http.response.body", "body": text})


def app(
    engine: Engine,
    settings: Settings,
    *,
    database: str | None = None,
    databases: tuple[str, ...] = (),
    signin_code: str | None = None,
) -> ASGIApp:
    """The console over ``engine``'s outbox, with the credentials and masked fields of
    ``settings``; refuses to build without a token (never an open console). ``database`` and
    ``databases`` name it among consoles mounted side by side (:func:`several`);
    ``signin_code`` is a one-time operator sign-in code (``GET /signin?code=``)."""
    if not settings.console_token and not settings.console_readonly_token:
        raise ConfigError(
            "RELAY_CONSOLE_TOKEN: the console needs RELAY_CONSOLE_TOKEN or "
            "RELAY_CONSOLE_READONLY_TOKEN; it never serves without a credential"
        )
    console = Console(
        OperationsStore(engine),
        Guard(settings.console_token, settings.console_readonly_token, signin_code),
        settings.console_redact_fields,
        database=database,
        databases=databases,
        settings=settings,
    )
    routes = [
        *api.routes(console),
        *pages.routes(console),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return _Console(Starlette(routes=routes))


def several(
    consoles: Mapping[str, tuple[Engine, Settings]], *, signin_code: str | None = None
) -> ASGIApp:
    """One console per outbox database (``RELAY_DATABASES``), each mounted at ``/<name>/`` with
    its own API (``/<name>/api/status``, ...) and a switcher between them in the header; ``/``
    leads to the first. Each signs in on its own path, with the same tokens."""
    if not consoles:
        raise ConfigError("RELAY_DATABASES: the console needs at least one database")
    names = tuple(consoles)
    mounts: list[BaseRoute] = [
        Mount(
            f"/{name}",
            app(engine, s, database=name, databases=names, signin_code=signin_code),
        )
        for name, (engine, s) in consoles.items()
    ]

    async def first(request: Request) -> Response:
        root = str(request.scope.get("root_path", ""))
        return RedirectResponse(f"{root}/{names[0]}/", status_code=307)

    return Starlette(routes=[Route("/", first), *mounts])


__all__ = ["Console", "app", "several"]
