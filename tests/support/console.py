"""Rows and clients for the web console's tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from starlette.testclient import TestClient

from relay import console
from relay.config import Settings
from relay.store import dialects
from relay.store.schema.tables import outbox

OPERATOR_TOKEN = "operator-token-0123456789"
VIEWER_TOKEN = "viewer-token-0123456789ab"


def settings(db_url: str, **kw: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "console_token": OPERATOR_TOKEN,
        "console_readonly_token": VIEWER_TOKEN,
    }
    return Settings(**(values | kw))


@contextmanager
def client(engine: sa.Engine, **kw: Any) -> Iterator[TestClient]:
    app = console.app(engine, settings(engine.url.render_as_string(hide_password=False), **kw))
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as c:
        yield c


def bearer(token: str = OPERATOR_TOKEN, actor: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if actor:
        headers["X-Relay-Actor"] = actor
    return headers


def add(
    engine: sa.Engine, n: int, status: str, event_type: str = "order.created", **kw: Any
) -> list[int]:
    """Insert ``n`` rows of ``status`` directly; returns their ids in order."""
    clock = dialects.for_name(engine.dialect.name)
    values: dict[str, Any] = {"event_type": event_type, "status": status}
    if status == "failed":
        values |= {"attempt": 10, "last_error": "Unroutable: no queue bound"}
    if status == "sent":
        values |= {"attempt": 1, "sent_at": clock.now()}
    if status == "processing":
        values |= {
            "attempt": 1,
            "locked_by": "worker-a",
            "locked_until": clock.now_plus(sa.literal(30.0, sa.Float)),
        }
    values |= kw
    payload = values.pop("payload", None)
    ids = []
    with engine.begin() as conn:
        for i in range(n):
            row = {"payload": payload if payload is not None else {"n": i}, **values}
            result = conn.execute(sa.insert(outbox).values(**row))
            ids.append(int(result.inserted_primary_key[0]))
    return ids


def signed_in(c: TestClient, token: str = OPERATOR_TOKEN, name: str = "ada") -> str:
    """Sign ``c`` in through the form; returns the session's CSRF token (read from a page)."""
    r = c.post("/signin", data={"token": token, "name": name, "next": "/"})
    assert r.status_code == 303, r.text
    page = c.get("/events").text
    marker = 'name="csrf" value="'
    start = page.index(marker) + len(marker)
    return page[start : page.index('"', start)]
