"""Every operator view of a bad row (``tests/support/bad_rows.py``: what a database accepts and
no message can carry) answers, on every database: the console's event page and
``GET /api/events/{id}`` show a text that cannot be read as JSON as the stored text, cut, with
why; the lists, the console's retry preview and ``relay failed list|retry --dry-run`` list such
rows like any other (docs/guarantees.md, "What a bad row does")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import sqlalchemy as sa
from markupsafe import escape

from relay.console.views import WITHHELD
from relay.records import Status
from relay.store.operations.filters import EventFilter
from relay.store.operations.readable import SHOWN_CHARS
from relay.store.operations.store import OperationsStore
from tests.support import bad_rows
from tests.support import console as web
from tests.support.console import bearer

#: Rows that decode but that no JSON view can render: nesting past what a page renders.
TOO_DEEP = bad_rows.BadRow(
    "nested-150-deep", "[" * 150 + "]" * 150, None, "", frozenset({"postgresql", "sqlite"})
)
#: The field each bad row's view cannot show as JSON, and the start of why (others: none).
UNREADABLE = {
    "integer-of-5001-digits": ("payload", "an integer of 5,001 digits, more than the 4,300"),
    "nested-5000-deep": ("payload", "JSON nested deeper than the relay decodes"),
    "number-out-of-range": ("payload", "a number JSON text cannot hold (inf)"),
    "payload-not-json": ("payload", "not JSON: Expecting value"),
    "headers-not-json": ("headers", "not JSON: Expecting property name"),
    "nested-150-deep": ("payload", "JSON nested over 100 deep, deeper than a view renders"),
    "bare-number-beyond-a-double": ("payload", "a number beyond a double (inf): SQLite stored"),
}

#: What SQLite keeps of a JSON text that reads as a number: the number, shown as Python does.
SQLITE_KEPT = {"bare-number-beyond-a-double": "inf"}


def _dead_lettered(engine: sa.Engine) -> dict[int, bad_rows.BadRow]:
    """Every bad row this database accepts (and one too deep to render), written by plain SQL
    and dead-lettered as the dispatch path leaves it."""
    kind = engine.dialect.name
    chosen = bad_rows.for_kind(kind) + ([TOO_DEEP] if kind in TOO_DEEP.kinds else [])
    bad = {bad_rows.insert(engine, row): row for row in chosen}
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE outbox SET status = 'failed', attempt = 1, last_error = 'bad row' "
                "WHERE id IN :ids"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": list(bad)},
        )
    return bad


def test_the_event_page_and_api_show_every_bad_row_with_why(engine: sa.Engine) -> None:
    """Given every bad row the database accepts, dead-lettered: OperationsStore.event, the
    event page and GET /api/events/{id} answer for each (200); a field that cannot be read as
    JSON is None with its reason and its stored text cut to SHOWN_CHARS; the others decode."""
    bad = _dead_lettered(engine)
    ops = OperationsStore(engine)
    with web.client(engine) as c:
        web.signed_in(c)
        for id_, row in bad.items():
            stored = {"payload": row.payload, "headers": row.headers}
            event = ops.event(id_)
            assert event is not None
            r = c.get(f"/api/events/{id_}", headers=bearer())
            assert r.status_code == 200, (row.name, r.text[:300])
            api = r.json()
            page = c.get(f"/events/{id_}")
            assert page.status_code == 200, row.name
            field, why = UNREADABLE.get(row.name, (None, ""))
            for name in ("payload", "headers"):
                if name != field:
                    text = stored[name]
                    assert event[name] == (None if text is None else json.loads(text)), row.name
                    assert f'id="{name}-unreadable"' not in page.text
                    continue
                text = SQLITE_KEPT.get(row.name, stored[name]) or ""
                reason = event["unreadable"][name]["reason"]
                assert reason.startswith(why), (row.name, reason)
                assert event[name] is None
                assert api[name] is None
                assert (
                    event["unreadable"]
                    == api["unreadable"]
                    == {name: {"reason": reason, "text": text[:SHOWN_CHARS], "chars": len(text)}}
                )
                assert f'id="{name}-unreadable"' in page.text
                assert escape(reason) in page.text
                assert escape(text[:SHOWN_CHARS]) in page.text
                if len(text) > SHOWN_CHARS:
                    assert f"its first {SHOWN_CHARS:,} of {len(text):,} characters" in page.text
            if field is None:
                assert event["unreadable"] == api["unreadable"] == {}


def test_lists_previews_and_relay_failed_list_every_bad_row(engine: sa.Engine) -> None:
    """The console's and the API's lists of failed events, the console's retry preview and
    `relay failed list --json` / `relay failed retry --all --dry-run` list every bad row."""
    bad = _dead_lettered(engine)
    ids = sorted(bad)
    failed = EventFilter(statuses=(Status.FAILED,), all=True)
    assert [r["id"] for r in OperationsStore(engine).list_events(failed)] == ids
    with web.client(engine) as c:
        r = c.get("/api/events", params={"status": "failed"}, headers=bearer())
        assert r.status_code == 200
        assert [e["id"] for e in r.json()["events"]] == ids
        csrf = web.signed_in(c)
        page = c.get("/events", params={"status": "failed"})
        assert page.status_code == 200
        preview = c.post(
            "/actions/preview",
            data={"csrf": csrf, "action": "retry", "status": "failed", "all": "true"},
        )
        assert preview.status_code == 200
    for id_ in ids:
        assert f"/events/{id_}" in page.text
        assert f"/events/{id_}" in preview.text
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env["RELAY_DATABASE_URL"] = engine.url.render_as_string(hide_password=False)
    for args, check in (
        (["list", "--json"], lambda out: [e["id"] for e in json.loads(out)["events"]] == ids),
        (["retry", "--all", "--dry-run"], lambda out: f"would retry {len(ids)} failed" in out),
    ):
        run = subprocess.run(
            [sys.executable, "-m", "relay", "failed", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        assert check(run.stdout), run.stdout[-2000:]


def test_a_masking_console_withholds_a_text_it_cannot_read(engine: sa.Engine) -> None:
    """With RELAY_CONSOLE_REDACT set, a payload that cannot be read as JSON is shown with its
    reason and its length, and its text withheld: no field can be found in it to mask."""
    secret = '{"password": "hunter2", "n": 1' + "0" * 5000 + "}"
    row = bad_rows.BadRow("secret", secret, None, "")
    id_ = bad_rows.insert(engine, row)
    with web.client(engine, console_redact="password") as c:
        api = c.get(f"/api/events/{id_}", headers=bearer())
        web.signed_in(c)
        page = c.get(f"/events/{id_}")
    assert api.status_code == page.status_code == 200
    unreadable = api.json()["unreadable"]["payload"]
    assert unreadable["text"] == WITHHELD
    assert unreadable["chars"] == len(secret)
    assert unreadable["reason"].startswith("an integer of 5,001 digits")
    assert "hunter2" not in api.text + page.text
    assert escape(WITHHELD) in page.text
