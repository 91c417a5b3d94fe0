"""The console never answers 5xx to a request: Hypothesis throws arbitrary query strings,
headers (credentials, CSRF tokens, cookies, actor names, origins, hosts) and bodies (forms,
JSON, raw bytes) at every route, signed in and not, against a real database; every answer is
below 500. The overflow inputs the issue names get 400."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.support import console as web
from tests.support.console import OPERATOR_TOKEN, VIEWER_TOKEN

ROUTES: list[tuple[str, str]] = [
    ("GET", "/api/status"),
    ("GET", "/api/events"),
    ("GET", "/api/events/{id}"),
    ("GET", "/api/audit"),
    ("POST", "/api/events/retry"),
    ("POST", "/api/events/purge"),
    ("POST", "/api/events/replay"),
    ("GET", "/"),
    ("GET", "/signin"),
    ("POST", "/signin"),
    ("POST", "/signout"),
    ("GET", "/events"),
    ("GET", "/events/{id}"),
    ("GET", "/leases"),
    ("GET", "/audit"),
    ("POST", "/actions/preview"),
    ("POST", "/actions/run"),
    ("GET", "/static/{id}"),
]
#: The names the handlers read, so that most generated parameters reach a parser.
NAMES = [
    "status", "event_type", "key", "error", "since", "until", "ids", "all", "limit", "after",
    "dry_run", "next", "token", "code", "name", "csrf", "action", "to_queue", "rate",
]  # fmt: skip
#: Values that broke parsers once, or would: overflows, huge ids, NUL, surrogates, markup.
NASTY = [
    "1e20d", "100000000000000000000d", "1e30", "-1", "9" * 30, "0", "NaN", "inf", "\x00",
    "\ud800", "é", "2026-13-01", "0001-01-01T00:00+14:00", "9999-12-31T23:59:59-14:00",
    "*", "%", "_", "\\", "order.*", "failed", "sent,failed", "true", "[]", "{}", " ",
    "99999999999999999999", "//evil.example", "/\\evil", "<script>", "retry",
    "purge", "sent", "ids",
]  # fmt: skip

ids = st.one_of(st.integers(min_value=-(2**70), max_value=2**70).map(str), st.sampled_from(NASTY))
#: Longer than any field may be.
LONG = "1" * 5000
values = st.one_of(st.sampled_from(NASTY), st.text(max_size=40), ids, st.just(LONG))
names = st.one_of(st.sampled_from(NAMES), st.text(max_size=10))
query = st.lists(st.tuples(names, values), max_size=6)
header_bytes = st.one_of(
    st.sampled_from([s.encode("utf-8", "surrogatepass") for s in NASTY]),
    st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")),
)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.floats(),
        st.sampled_from(NASTY),
        st.text(max_size=20),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=5)),
    max_leaves=12,
)
#: Filters and actions mostly well-formed, so that the handlers past the parsers run too.
GOOD = {
    "action": ["retry", "purge", "replay"],
    "to_queue": ["orders", "missing.queue"],
    "status": ["failed", "sent", "pending"],
    "event_type": ["order.*", "*", "order.created"],
    "key": ["k1"],
    "error": ["Unroutable"],
    "since": ["2h", "2026-01-01T00:00", "0"],
    "until": ["1s", "2100-01-01T00:00+02:00"],
    "ids": ["1,2,3", "4"],
    "all": ["true", "on"],
}
filters = st.fixed_dictionaries(
    {},
    # Three in four values well-formed: a request past every parser is then common.
    optional={
        k: st.sampled_from(v) | st.sampled_from(v) | st.sampled_from(v) | values
        for k, v in GOOD.items()
    },
)
bodies = st.one_of(
    st.none(),
    filters.map(lambda d: ("form", list(d.items()))),
    st.tuples(filters, st.booleans()).map(lambda t: ("json", {**t[0], "dry_run": t[1]})),
    st.lists(st.tuples(names, values), max_size=8).map(lambda kv: ("form", kv)),
    st.dictionaries(names, json_values, max_size=8).map(lambda d: ("json", d)),
    json_values.map(lambda v: ("json", v)),
    st.binary(max_size=200).map(lambda b: ("raw", b)),
)


@pytest.fixture
def fuzz_client(db_url: str) -> Iterator[tuple[TestClient, str]]:
    """A console over each database with rows of every status; yields it and a session's CSRF."""
    engine = sa.create_engine(db_url)
    try:
        for status in ("failed", "sent", "pending", "processing"):
            web.add(engine, 3, status, ordering_key="k1")
        with web.client(engine) as c:
            csrf = web.signed_in(c)
            yield c, csrf
    finally:
        engine.dispose()


def _encoded(pairs: list[tuple[str, str]]) -> str:
    """``pairs`` as a query string, percent-encoded from their UTF-8 bytes (a lone surrogate
    becomes bytes that are not UTF-8: the server must cope with those too)."""

    def enc(text: str) -> str:
        return quote(text.encode("utf-8", "surrogatepass"), safe="")

    return "&".join(f"{enc(k)}={enc(v)}" for k, v in pairs)


def _send(c: TestClient, method: str, path: str, params: Any, headers: Any, body: Any) -> int:
    url = f"{path}?{_encoded(params)}" if params else path
    kwargs: dict[str, Any] = {"headers": headers}
    if method == "POST" and body is not None:
        kind, content = body
        if kind == "form":
            kwargs["content"] = _encoded(content).encode()
            headers["content-type"] = "application/x-www-form-urlencoded"
        elif kind == "json":
            kwargs["content"] = json.dumps(content, allow_nan=True).encode("utf-8", "surrogatepass")
            headers["content-type"] = "application/json"
        else:
            kwargs["content"] = content
    return c.request(method, url, **kwargs).status_code


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    route=st.sampled_from(ROUTES),
    path_id=ids,
    params=st.one_of(query, filters.map(lambda d: list(d.items()))),
    # Mostly signed in, so that most requests reach a handler's parsers.
    auth=st.sampled_from(["operator"] * 4 + ["session"] * 3 + ["viewer", "none", "garbage"]),
    extra=st.dictionaries(
        st.sampled_from(
            ["x-csrf-token", "x-relay-actor", "origin", "cookie", "authorization", "host"]
        ),
        header_bytes,
        max_size=2,
    )
    | st.just({}),
    body=bodies,
)
def test_no_request_gets_a_5xx(
    fuzz_client: tuple[TestClient, str],
    route: tuple[str, str],
    path_id: str,
    params: list[tuple[str, str]],
    auth: str,
    extra: dict[str, bytes],
    body: Any,
) -> None:
    c, csrf = fuzz_client
    method, template = route
    segment = quote(path_id[:60].encode("utf-8", "surrogatepass"), safe="") or "0"
    path = template.replace("{id}", segment)
    headers: dict[str, Any] = {}
    if auth in ("operator", "viewer"):
        token = OPERATOR_TOKEN if auth == "operator" else VIEWER_TOKEN
        headers["authorization"] = f"Bearer {token}"
    elif auth == "garbage":
        headers["authorization"] = b"Bearer \xff\xfe"
    elif auth == "session":
        headers["x-csrf-token"] = csrf
    headers.update(extra)
    if auth != "session":
        c.cookies.clear()
    else:
        c.cookies.clear()
        csrf = web.signed_in(c)
        headers["x-csrf-token"] = csrf
    if auth == "session" and method == "POST" and not path.startswith("/api/"):
        # A form with the session's CSRF token, so the action handlers parse the rest.
        fields = body[1] if body is not None and body[0] == "form" else []
        body = ("form", [*fields, ("csrf", csrf)])
    status = _send(c, method, path, params, headers, body)
    event(f"{method} {template} -> {status}")
    assert status < 500, (method, path, params, headers, body)


@pytest.mark.parametrize(
    "query",
    [
        {"since": "1e20d"},
        {"since": "100000000000000000000d"},
        {"until": "100000000000000000000d"},
        {"limit": "1e30"},
        {"after": "99999999999999999999"},
        {"ids": "1,99999999999999999999"},
        {"event_type": "order\x00created"},
    ],
)
def test_overflowing_parameters_get_400(
    fuzz_client: tuple[TestClient, str], query: dict[str, str]
) -> None:
    c, _ = fuzz_client
    r = c.get("/api/events", params=query, headers=web.bearer())
    assert r.status_code == 400, r.text
    assert r.json()["error"]
    assert c.get("/events", params=query).status_code == 400


def test_huge_event_ids_in_paths_get_400(fuzz_client: tuple[TestClient, str]) -> None:
    c, _ = fuzz_client
    assert c.get("/api/events/99999999999999999999", headers=web.bearer()).status_code == 400
    assert c.get("/events/99999999999999999999").status_code == 400
