"""The console's JSON API and its auth rules over HTTP, on every database (docs/operations.md's
"Web console", docs/security.md's "The console")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from relay import console
from relay.store.engine import create_engine
from relay.store.schema.tables import audit
from tests.support import console as web
from tests.support import databases, rows
from tests.support.console import OPERATOR_TOKEN, VIEWER_TOKEN, bearer

API_GETS = ["/api/status", "/api/events", "/api/events/1", "/api/audit"]


@pytest.mark.parametrize(
    "headers", [{}, bearer("wrong-token-0123456789"), {"Authorization": "Basic x"}]
)
def test_no_valid_credential_gets_401_and_no_data(
    engine: sa.Engine, headers: dict[str, str]
) -> None:
    """Without a valid credential every API route answers 401 with only an error, and a
    page sends the browser to the sign-in page."""
    web.add(engine, 1, "failed", event_type="secret.type")
    with web.client(engine) as c:
        for path in API_GETS:
            r = c.get(path, headers=headers)
            assert r.status_code == 401, path
            assert "secret" not in r.text
            assert r.headers["www-authenticate"].startswith("Bearer")
        for verb in ("retry", "purge"):
            r = c.post(f"/api/events/{verb}", json={"all": True}, headers=headers)
            assert r.status_code == 401
        for path in ("/", "/events?status=failed", "/events/1", "/leases", "/audit"):
            r = c.get(path, headers=headers)
            assert r.status_code == 303, path
            assert r.headers["location"].startswith("/signin?next=")
            assert "secret" not in r.text


def test_status_is_the_document_of_relay_status_json(engine: sa.Engine, db_url: str) -> None:
    """GET /api/status answers exactly what `relay status --json` prints."""
    web.add(engine, 2, "failed")
    web.add(engine, 3, "pending")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    run = subprocess.run(
        [sys.executable, "-m", "relay", "status", "--json"],
        env=env | {"RELAY_DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    with web.client(engine) as c:
        r = c.get("/api/status", headers=bearer(VIEWER_TOKEN))
    assert r.status_code == 200
    got = r.json()
    assert got.pop("oldest_pending_age_seconds") == pytest.approx(
        printed.pop("oldest_pending_age_seconds"), abs=5
    )
    assert got == printed
    assert got["counts"]["failed"] == 2


def test_events_filter_and_keyset_pages(engine: sa.Engine) -> None:
    """Filters select by status, type pattern, key and error; `next` walks every row once."""
    failed = web.add(engine, 7, "failed", event_type="order.created")
    web.add(engine, 2, "failed", event_type="invoice.sent")
    web.add(engine, 3, "sent", event_type="order.created")
    keyed = web.add(engine, 1, "failed", event_type="order.paid", ordering_key="order-9")
    seen: list[int] = []
    after = None
    with web.client(engine) as c:
        for _ in range(10):
            params = {"status": "failed", "event_type": "order.*", "limit": 3}
            if after is not None:
                params["after"] = after
            r = c.get("/api/events", params=params, headers=bearer())
            assert r.status_code == 200
            body = r.json()
            assert set(body) == {"events", "next"}
            seen += [e["id"] for e in body["events"]]
            after = body["next"]
            if after is None:
                break
        assert seen == failed + keyed
        r = c.get("/api/events", params={"key": "order-9"}, headers=bearer())
        assert [e["id"] for e in r.json()["events"]] == keyed
        r = c.get("/api/events", params={"error": "UNROUTABLE", "status": "sent"}, headers=bearer())
        assert r.json() == {"events": [], "next": None}
        r = c.get(
            "/api/events", params={"since": "1h", "until": "2999-01-01T00:00"}, headers=bearer()
        )
        assert len(r.json()["events"]) == 13
        for bad in ({"status": "lost"}, {"limit": "0"}, {"since": "yesterday"}, {"after": "x"}):
            assert c.get("/api/events", params=bad, headers=bearer()).status_code == 400


def test_retry_dry_run_then_for_real_is_audited(engine: sa.Engine) -> None:
    """A dry run counts and changes nothing; the retry then changes exactly those rows and
    records who, what, the filter and the counts in relay_audit; an empty selector is refused
    without all."""
    web.add(engine, 4, "failed", event_type="order.created")
    other = web.add(engine, 2, "failed", event_type="invoice.sent")
    with web.client(engine) as c:
        r = c.post("/api/events/retry", json={}, headers=bearer())
        assert r.status_code == 400
        assert "selector" in r.json()["error"]
        body = {"event_type": "order.*", "dry_run": True}
        r = c.post("/api/events/retry", json=body, headers=bearer(actor="night-script"))
        assert r.json() == {"matched": 4, "changed": 0}
        body["dry_run"] = False
        r = c.post("/api/events/retry", json=body, headers=bearer(actor="night-script"))
        assert r.json() == {"matched": 4, "changed": 4}
        status = c.get("/api/status", headers=bearer()).json()
        assert status["counts"]["pending"] == 4
        assert status["counts"]["failed"] == 2
        r = c.post("/api/events/purge", json={"ids": other[:1]}, headers=bearer())
        assert r.json() == {"matched": 1, "changed": 1}
        r = c.post("/api/events/purge", json={"all": True, "dry_run": True}, headers=bearer())
        assert r.json() == {"matched": 1, "changed": 0}
        actions = c.get("/api/audit", headers=bearer(VIEWER_TOKEN)).json()["actions"]
    with engine.connect() as conn:
        (n,) = conn.execute(sa.select(sa.func.count()).select_from(audit)).one()
    assert n == 2
    purge, retry = actions
    assert (retry["actor"], retry["via"], retry["role"]) == ("night-script", "api", "operator")
    assert (retry["action"], retry["status"], retry["matched"], retry["changed"]) == (
        "retry",
        "failed",
        4,
        4,
    )
    assert retry["selector"] == {"statuses": ["failed"], "event_type": "order.*"}
    assert purge["selector"] == {"statuses": ["failed"], "ids": other[:1]}


def test_purge_sent_by_filter(engine: sa.Engine) -> None:
    """Sent rows are purged by filter; retry refuses them; other statuses are refused."""
    web.add(engine, 3, "sent", event_type="order.created")
    web.add(engine, 2, "sent", event_type="invoice.sent")
    with web.client(engine) as c:
        body = {"status": "sent", "event_type": "invoice.*"}
        assert c.post("/api/events/purge", json=body, headers=bearer()).json() == {
            "matched": 2,
            "changed": 2,
        }
        assert c.post("/api/events/retry", json=body, headers=bearer()).status_code == 400
        body = {"status": "pending", "all": True}
        assert c.post("/api/events/purge", json=body, headers=bearer()).status_code == 400
        assert c.get("/api/status", headers=bearer()).json()["counts"]["sent"] == 3


def test_read_only_token_views_but_gets_403_acting(engine: sa.Engine) -> None:
    """The view-only token reads everything and may not act, by API or by form."""
    web.add(engine, 2, "failed")
    with web.client(engine) as c:
        assert c.get("/api/events", headers=bearer(VIEWER_TOKEN)).status_code == 200
        for verb in ("retry", "purge"):
            r = c.post(f"/api/events/{verb}", json={"all": True}, headers=bearer(VIEWER_TOKEN))
            assert r.status_code == 403
        csrf = web.signed_in(c, VIEWER_TOKEN)
        r = c.post(
            "/actions/run",
            data={"csrf": csrf, "action": "retry", "status": "failed", "all": "true"},
        )
        assert r.status_code == 403
        assert c.get("/api/status", headers=bearer()).json()["counts"]["failed"] == 2


def test_session_cookie_and_csrf(engine: sa.Engine) -> None:
    """The sign-in form sets an HttpOnly SameSite=Strict cookie; a form action without the
    session's CSRF token is refused; with it, the dry run is shown, then the action runs."""
    web.add(engine, 3, "failed", event_type="order.created")
    with web.client(engine) as c:
        r = c.post("/signin", data={"token": "nope-nope-nope-nope", "next": "/"})
        assert r.status_code == 401
        assert "set-cookie" not in r.headers
        r = c.post("/signin", data={"token": OPERATOR_TOKEN, "name": "ada", "next": "/events"})
        assert r.status_code == 303
        assert r.headers["location"] == "/events"
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        csrf = web.signed_in(c)
        form = {"action": "retry", "status": "failed", "event_type": "order.*"}
        assert c.post("/actions/preview", data=form).status_code == 403
        assert c.post("/actions/preview", data=form | {"csrf": "forged"}).status_code == 403
        r = c.post("/api/events/retry", json={"all": True})
        assert r.status_code == 403  # a session calling the API needs X-CSRF-Token
        r = c.post("/actions/preview", data=form | {"csrf": csrf})
        assert r.status_code == 200
        assert 'id="matched">3<' in r.text
        assert c.get("/api/status", headers=bearer()).json()["counts"]["failed"] == 3
        r = c.post("/actions/run", data=form | {"csrf": csrf})
        assert r.status_code == 200
        assert 'id="changed">3<' in r.text
        assert "ada" in c.get("/audit").text
        tampered = "x" + c.cookies["relay_console_session"]
        c.cookies.clear()
        c.cookies.set("relay_console_session", tampered)
        assert c.get("/").status_code == 303


def test_a_token_in_a_url_does_not_sign_in(engine: sa.Engine) -> None:
    """GET /signin?token=… is refused (400, no cookie): a URL lands in proxies' logs and the
    browser's history; the form (POST) signs in."""
    with web.client(engine) as c:
        r = c.get("/signin", params={"token": OPERATOR_TOKEN})
        assert r.status_code == 400
        assert "not accepted in a URL" in r.text
        assert "relay_console_session" not in r.headers.get("set-cookie", "")
        assert c.get("/").status_code == 303


def test_one_time_sign_in_link(engine: sa.Engine) -> None:
    """GET /signin?code=… with the console's one-time code signs in once; the same link
    later, or a wrong code, does not."""
    code = "one-time-code-0123456789abcdef"
    app = console.app(engine, web.settings(engine.url.render_as_string(False)), signin_code=code)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as c:
        assert c.get("/signin", params={"code": "wrong" + code}).status_code == 401
        r = c.get("/signin", params={"code": code})
        assert r.status_code == 303
        assert r.headers["location"] == "/"
        assert c.get("/").status_code == 200
        c.cookies.clear()
        assert c.get("/signin", params={"code": code}).status_code == 401
        assert c.get("/").status_code == 303


def test_redacted_fields_are_masked_everywhere(engine: sa.Engine) -> None:
    """RELAY_CONSOLE_REDACT masks payload and header fields, at any depth, in the API and pages."""
    (eid,) = web.add(
        engine,
        1,
        "failed",
        payload={"user": {"Password": "hunter2", "name": "x"}, "cards": [{"card_number": "4111"}]},
        headers={"password": "hunter2"},
    )
    with web.client(engine, console_redact="password,card_number") as c:
        r = c.get(f"/api/events/{eid}", headers=bearer())
        assert r.json()["payload"] == {
            "user": {"Password": "***", "name": "x"},
            "cards": [{"card_number": "***"}],
        }
        assert r.json()["headers"] == {"password": "***"}
        web.signed_in(c)
        page = c.get(f"/events/{eid}").text
    assert "hunter2" not in r.text + page
    assert "4111" not in r.text + page


def test_event_fields_holding_markup_render_as_text(engine: sa.Engine) -> None:
    """An event type, key, error, header or payload holding <script> is escaped on every page."""
    evil = "<script>alert(1)</script>"
    (eid,) = web.add(
        engine,
        1,
        "failed",
        event_type=evil,
        ordering_key=evil,
        last_error=evil,
        payload={"x": evil, evil: 1},
        headers={"h": evil},
    )
    with web.client(engine) as c:
        web.signed_in(c)
        pages = [c.get(p).text for p in ("/events?status=failed", f"/events/{eid}", "/events")]
        csrf = web.signed_in(c)
        pages.append(
            c.post("/actions/preview", data={"csrf": csrf, "action": "purge", "ids": str(eid)}).text
        )
        api = c.get(f"/api/events/{eid}", headers=bearer())
    for html in pages:
        assert "<script>" not in html
        assert "&lt;script&gt;" in html
    assert api.headers["content-type"] == "application/json"
    assert api.json()["event_type"] == evil
    assert "script-src" not in api.headers["content-security-policy"]  # default-src 'none'


def test_console_refuses_to_start_without_a_token(engine: sa.Engine) -> None:
    """relay.console.app never builds an open console."""
    from relay import console
    from relay.config import Settings
    from relay.exceptions import ConfigError

    with pytest.raises(ConfigError, match="RELAY_CONSOLE_TOKEN"):
        console.app(engine, Settings(database_url="sqlite://"))


def test_mounted_under_a_prefix(engine: sa.Engine) -> None:
    """Mounted in another Starlette app, the console's links, redirects and cookie stay under
    its prefix."""
    from starlette.applications import Starlette
    from starlette.routing import Mount
    from starlette.testclient import TestClient

    from relay import console

    host = Starlette(
        routes=[Mount("/ops/relay", app=console.app(engine, web.settings("sqlite://")))]
    )
    with TestClient(host, follow_redirects=False) as c:
        r = c.get("/ops/relay/events")
        assert r.status_code == 303
        assert r.headers["location"].startswith("/ops/relay/signin?next=%2Fops%2Frelay%2Fevents")
        r = c.post("/ops/relay/signin", data={"token": OPERATOR_TOKEN, "next": "/ops/relay/leases"})
        assert r.headers["location"] == "/ops/relay/leases"
        assert "path=/ops/relay/" in r.headers["set-cookie"].lower()
        page = c.get("/ops/relay/")
        assert page.status_code == 200
        assert 'href="/ops/relay/static/console.css"' in page.text
        assert c.get("/ops/relay/static/console.css").status_code == 200


def test_pages_show_charts_leases_and_audit(engine: sa.Engine) -> None:
    """The overview draws both charts from the last hour's sent rows; the leases page groups
    processing rows by holder and marks expired ones; an unknown event is a 404 page."""
    web.add(engine, 5, "sent")
    web.add(engine, 1, "processing", locked_by="worker-c")
    rows.expire_leases(engine)
    web.add(engine, 2, "processing", locked_by="worker-b")
    with web.client(engine) as c:
        web.signed_in(c)
        overview = c.get("/").text
        assert overview.count("<svg") == 2
        assert "0 min ago: 5 events" in overview
        leases = c.get("/leases").text
        assert "worker-b — 2 rows" in leases
        assert "worker-c — 1 rows" in leases
        assert '<span class="expired">1 expired</span>' in leases
        assert c.get("/events/999999").status_code == 404
        assert c.get("/audit").status_code == 200


def test_sign_in_stays_on_this_site(engine: sa.Engine) -> None:
    """A sign-in posted from another origin is refused, and `next` never leaves the console."""
    with web.client(engine) as c:
        data = {"token": OPERATOR_TOKEN, "next": "/"}
        r = c.post("/signin", data=data, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        assert "set-cookie" not in r.headers
        for away in ("//evil.example/", "/\\evil.example", "https://evil.example/"):
            r = c.post("/signin", data={**data, "next": away})
            assert r.headers["location"] == "/"


def test_several_databases_get_a_console_each_side_by_side(
    backend_pool: databases.BackendPool,
) -> None:
    """With several outbox databases, ``relay.console.several`` mounts one console per
    database at ``/<name>/``: each API answers from its own database alone, ``/`` leads to the
    first, every page links to each database's console, and each still needs a credential."""
    with (
        backend_pool.database("postgresql") as orders_url,
        backend_pool.database("mysql") as billing_url,
    ):
        engines = {"orders": create_engine(orders_url), "billing": create_engine(billing_url)}
        try:
            web.add(engines["orders"], 2, "failed", event_type="order.lost")
            web.add(engines["billing"], 3, "pending", event_type="invoice.due")
            app = console.several(
                {name: (engine, web.settings(str(engine.url))) for name, engine in engines.items()}
            )
            with TestClient(app, base_url="http://testserver", follow_redirects=False) as c:
                first = c.get("/")
                assert first.status_code == 307
                assert first.headers["location"] == "/orders/"
                assert c.get("/billing/api/status").status_code == 401
                for name, status, count in (("orders", "failed", 2), ("billing", "pending", 3)):
                    listed = c.get(f"/{name}/api/events", headers=bearer()).json()["events"]
                    assert {e["status"] for e in listed} == {status}
                    assert len(listed) == count
                signed_in = c.post(
                    "/billing/signin", data={"token": OPERATOR_TOKEN, "next": "/billing/"}
                )
                assert signed_in.status_code == 303
                page = c.get("/billing/events")
                assert page.status_code == 200
                assert 'href="/orders/"' in page.text
                assert 'href="/billing/" aria-current="page"' in page.text
                assert "invoice.due" in page.text
                assert "order.lost" not in page.text
        finally:
            for engine in engines.values():
                engine.dispose()


def test_retrying_expired_events_needs_a_new_deadline_or_none(engine: sa.Engine) -> None:
    """The API and the pages never re-drive rows past their deadline to expire again: without
    ``expires_in`` or ``no_expiry`` the retry is a 400 naming them (nothing changed), its dry
    run counts them, the page's dry run asks; with one, the rows go back to pending."""
    past = datetime(2026, 1, 2, tzinfo=UTC)
    late = web.add(engine, 2, "failed", event_type="reminder.due", expires_at=past)
    other = web.add(engine, 1, "failed", event_type="order.created")
    with web.client(engine) as c:
        r = c.post("/api/events/retry", json={"all": True}, headers=bearer())
        assert r.status_code == 400
        assert "2 of the 3 failed events selected are past their deadline" in r.text
        r = c.post("/api/events/retry", json={"all": True, "dry_run": True}, headers=bearer())
        assert r.json() == {"matched": 3, "changed": 0, "expired": 2}
        csrf = web.signed_in(c)
        form = {"action": "retry", "status": "failed", "all": "true", "csrf": csrf}
        page = c.post("/actions/preview", data=form)
        assert 'id="expired"><strong>2</strong>' in page.text
        assert 'name="expires_in"' in page.text
        assert c.post("/actions/run", data=form).status_code == 400
        r = c.post("/api/events/retry", json={"ids": other, "no_expiry": True}, headers=bearer())
        assert r.json() == {"matched": 1, "changed": 1}
        done = c.post("/actions/run", data=form | {"expires_in": "1h"})
        assert 'id="changed">2<' in done.text
    found = rows.rows(engine, *late)
    assert {r["status"] for r in found.values()} == {"pending"}
    assert all(r["expires_at"] > datetime.now(UTC) for r in found.values())


def test_an_operator_pauses_and_resumes_with_an_audit_row(engine: sa.Engine) -> None:
    """POST /api/pauses pauses and resumes (a viewer may only list), each action audited;
    /api/status shows the pause in force, and the Pauses page lists it."""
    with web.client(engine) as c:
        body = {"action": "pause", "kind": "event_type", "value": "mail.*", "reason": "smtp"}
        assert c.post("/api/pauses", json=body, headers=bearer(VIEWER_TOKEN)).status_code == 403
        r = c.post("/api/pauses", json=body, headers=bearer(OPERATOR_TOKEN))
        assert r.status_code == 200
        assert r.json()["changed"] is True
        listed = c.get("/api/pauses", headers=bearer(VIEWER_TOKEN)).json()["pauses"]
        assert [(p["kind"], p["value"], p["reason"]) for p in listed] == [
            ("event_type", "mail.*", "smtp")
        ]
        status = c.get("/api/status", headers=bearer(VIEWER_TOKEN)).json()
        assert [p["value"] for p in status["pauses"]] == ["mail.*"]
        page = c.get("/pauses", headers=bearer(VIEWER_TOKEN))
        assert page.status_code == 200
        assert "mail.*" in page.text
        bad = {"action": "pause", "kind": "table", "value": "x"}
        assert c.post("/api/pauses", json=bad, headers=bearer(OPERATOR_TOKEN)).status_code == 400
        resume = {"action": "resume", "kind": "event_type", "value": "mail.*"}
        r = c.post("/api/pauses", json=resume, headers=bearer(OPERATOR_TOKEN))
        assert r.json()["changed"] is True
        assert c.get("/api/pauses", headers=bearer(VIEWER_TOKEN)).json()["pauses"] == []
    with engine.connect() as conn:
        actions = conn.execute(sa.select(audit.c.action, audit.c.selector)).all()
    assert [(a, s) for a, s in actions] == [
        ("pause", {"event_type": "mail.*", "reason": "smtp"}),
        ("resume", {"event_type": "mail.*"}),
    ]
