"""Bad and hostile input through the real commands: config, event names and headers, secrets."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.store.schema.tables import outbox
from tests.support.broker import Collector
from tests.support.fleet import RELAY_BIN, fleet_env, statuses
from tests.unit.test_config import BAD_VALUES

SECRET = "hunter2-s3cr3t"


def _relay(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY_BIN, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


FIRST_BAD_VALUE = list({var: (var, value) for var, value, _ in reversed(BAD_VALUES)}.values())


@pytest.mark.parametrize(("var", "value"), FIRST_BAD_VALUE)
def test_relay_dispatch_refuses_each_bad_variable_with_exit_code_2(
    var: str, value: str, tmp_path: Path
) -> None:
    """`relay dispatch --once` (which reads every setting; `relay status` reads only the
    database's) with one bad RELAY_* value exits 2 at once, naming it, no traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env |= {"RELAY_DATABASE_URL": "sqlite:///unused.sqlite3", var: value}
    done = _relay("dispatch", "--once", env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert var in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "unused.sqlite3").exists(), "it did I/O before refusing"


def test_malformed_database_url_is_a_config_error_without_the_password(tmp_path: Path) -> None:
    """A URL that does not parse (bad port) exits 2 naming the variable, password redacted."""
    env = fleet_env(f"postgresql://u:{SECRET}@db:port/app", "memory://", "outbox")
    done = _relay("status", env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "RELAY_DATABASE_URL" in done.stderr
    assert "Traceback" not in done.stderr
    assert SECRET not in done.stdout + done.stderr


HOSTILE = [
    'it\'s "quoted"',
    "x'); DROP TABLE outbox; --",
    "événement.仕様.😀",
    "tab\there\nnew line\r\x1b[31m\x07",
    "%s %(x)s {0} $1 :name",
    "back\\slash",
    "*.#",
]


@pytest.mark.timeout(120)
def test_hostile_event_types_and_headers_are_stored_and_published_verbatim(
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    tmp_path: Path,
) -> None:
    """Quotes, SQL, unicode and control characters survive enqueue -> table -> wire unchanged."""
    with Session(engine) as session, session.begin():
        ids = {
            relay.enqueue(
                session,
                text,
                {"text": text},
                headers={text: text, "tenant": text},
                ordering_key=text,
            ): text
            for text in HOSTILE
        }
    with engine.connect() as conn:
        stored = conn.execute(
            sa.select(outbox.c.id, outbox.c.event_type, outbox.c.headers, outbox.c.ordering_key)
        ).all()
    for row in stored:
        text = ids[row.id]
        assert (row.event_type, row.ordering_key) == (text, text)
        assert row.headers == {text: text, "tenant": text}

    done = _relay(
        "dispatch", "--once", env=fleet_env(pg_url, amqp_url, exchange_name), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert statuses(engine) == {"sent": len(HOSTILE)}
    received = {m.outbox_id: m for m in collector.drain(len(HOSTILE), timeout=20)}
    assert received.keys() == ids.keys()
    for outbox_id, text in ids.items():
        msg = received[outbox_id]
        assert msg.routing_key == text
        assert msg.body == {"text": text}
        assert msg.headers[text] == text
        assert msg.headers["tenant"] == text
        assert msg.headers["event_type"] == text


@pytest.mark.timeout(120)
def test_row_the_broker_cannot_encode_fails_alone_and_never_kills_the_relay(
    pg_url: str,
    amqp_url: str,
    exchange_name: str,
    collector: Collector,
    engine: sa.Engine,
    tmp_path: Path,
) -> None:
    """A row written by plain SQL with a header key over AMQP's 255 bytes ends failed with its
    error; the events around it are delivered and `relay dispatch` exits 0."""
    with engine.begin() as conn:
        conn.execute(
            sa.insert(outbox),
            [{"event_type": "good", "payload": {"n": i}} for i in range(50)],
        )
        bad = conn.execute(
            sa.insert(outbox)
            .values(event_type="good", payload={}, headers={"k" * 300: 1})
            .returning(outbox.c.id)
        ).scalar_one()
        conn.execute(
            sa.insert(outbox),
            [{"event_type": "good", "payload": {"n": i}} for i in range(50, 100)],
        )
    env = fleet_env(pg_url, amqp_url, exchange_name, max_attempts=2, backoff_base_seconds=0.05)
    done = _relay("dispatch", "--once", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    done = _relay("dispatch", "--once", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with engine.connect() as conn:
        row = conn.execute(sa.select(outbox).where(outbox.c.id == bad)).mappings().one()
    assert row["status"] == "failed"
    assert row["last_error"]
    assert statuses(engine) == {"sent": 100, "failed": 1}
    assert len({m.message_id for m in collector.drain(100, timeout=20)}) == 100


@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_credentials_in_urls_never_reach_the_output(
    verbose: list[str], pg_url: str, amqp_url: str, engine: sa.Engine, tmp_path: Path
) -> None:
    """`relay dispatch --once` with wrong passwords in both URLs: no output carries them."""
    bad_db = (
        sa.make_url(pg_url)
        .set(username="relay_nobody", password=SECRET)
        .render_as_string(hide_password=False)
    )
    bad_broker = amqp_url.replace("guest:guest@", f"guest:{SECRET}@")
    with Session(engine) as session, session.begin():
        relay.enqueue(session, "secret.test", {"n": 1})
    outputs = []
    for db, broker in ((bad_db, amqp_url), (pg_url, bad_broker)):
        env = fleet_env(db, broker, "relay.secret.test")
        done = _relay(*verbose, "dispatch", "--once", env=env, cwd=tmp_path)
        outputs.append(done.stdout + done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
    assert all(SECRET not in out for out in outputs), outputs
    assert "relay_nobody" in outputs[0], "the database error was not reported"
    assert "ACCESS_REFUSED" in outputs[1] or "refused" in outputs[1].lower(), outputs[1]
    with engine.connect() as conn:
        row = conn.execute(sa.select(outbox.c.status, outbox.c.attempt)).one()
    assert tuple(row) == ("pending", 0), "a refused broker login spent the event's attempt"
