"""What every console handler needs (:class:`Console`), apart from the application that builds
it, so the API and the pages import it downward."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
from starlette.requests import Request
from starlette.templating import Jinja2Templates

from relay.config import Settings
from relay.console.auth import COOKIE, Credential, Guard
from relay.store.operations.pausing import PauseStore
from relay.store.operations.store import OperationsStore

HERE = Path(__file__).parent


class Console:
    """What every handler needs: the store, the guard, the masked fields, the templates."""

    def __init__(
        self,
        store: OperationsStore,
        guard: Guard,
        redact: frozenset[str],
        *,
        database: str | None = None,
        databases: tuple[str, ...] = (),
        settings: Settings | None = None,
    ) -> None:
        self.store = store
        #: The pauses of the same database (``relay pause``), on the store's engine.
        self.pauses = PauseStore(store.engine)
        #: What a replay publishes with (the events broker, the exchange, the source).
        self.settings = settings or Settings(database_url=str(store.engine.url))
        self.guard = guard
        self.redact = redact
        #: With several outbox databases: this console's name, and every console's, mounted
        #: side by side (:func:`relay.console.several`), for the switcher in the header.
        self.database = database
        self.databases = databases
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True
        )
        # A str, so autoescaping applies: markup in a payload shows as text.
        env.filters["tojson_pretty"] = lambda value: json.dumps(
            value, indent=2, ensure_ascii=False, default=str
        )
        self.templates = Jinja2Templates(env=env)

    def credential(self, request: Request) -> Credential | None:
        """The request's bearer token or session cookie, if valid."""
        return self.guard.bearer(
            request.headers.get("authorization"), request.headers.get("x-relay-actor")
        ) or self.guard.session(request.cookies.get(COOKIE))
