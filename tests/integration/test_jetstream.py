"""NATS JetStream as the events broker (issue 50), against the real server: each event stored
once under its event id, the stream created with a window that covers a republish, the
contract's headers in the NATS binding, a message over ``max_payload`` dead-lettered alone,
an unreachable server an outage that spends no attempt."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay import publishers
from relay.config import Settings, timing
from relay.publishers import Publisher
from relay.records import ClaimedEvent, PublishResult
from relay.store.schema.tables import outbox
from tests.support.jetstream import Stream, drain

pytestmark = pytest.mark.timeout(120)


def _settings(pg_url: str, stream: Stream, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "database_url": pg_url,
        "events_url": stream.url,
        "exchange": stream.exchange,
        "nats_stream": stream.name,
        "batch_size": 100,
        "lease_seconds": 10,
        "confirm_timeout_seconds": 5,
        "max_attempts": 3,
        "backoff_base_seconds": 0.05,
        "backoff_max_seconds": 0.2,
        "tick_seconds": 0.1,
    }
    return Settings(**{**values, **overrides})  # type: ignore[arg-type]


class _Twice:
    """Publishes every batch twice, as a relay that crashed before recording it and the one
    that claimed it after the lease would: the second publish is the republish to survive."""

    def __init__(self, inner: Publisher) -> None:
        self.inner = inner

    def publish(self, events: Sequence[ClaimedEvent]) -> PublishResult:
        first = self.inner.publish(events)
        assert not first.unavailable, first.error
        return self.inner.publish(events)

    def close(self) -> None:
        self.inner.close()


def _drain(settings: Settings, *, twice: bool = False) -> None:
    drain(settings, _Twice if twice else None)


def _rows(engine: sa.Engine) -> dict[int, tuple[str, str, str | None]]:
    with engine.connect() as conn:
        query = sa.select(outbox.c.id, outbox.c.event_id, outbox.c.status, outbox.c.last_error)
        return {i: (e, s, err) for i, e, s, err in conn.execute(query)}


def test_each_event_is_stored_once_under_its_event_id_even_when_published_again(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream
) -> None:
    """Given 250 events (some of one key), when the relay publishes each batch twice (as a
    crash before recording and the next claim would), then the stream holds each once:
    Nats-Msg-Id = event_id, subject <exchange>.<event_type>, the contract and CloudEvents
    headers, a key's messages in its order; the stream was created with the relay's window."""
    with Session(pg_engine) as session, session.begin():
        for n in range(250):
            key = "order-1" if n % 5 == 0 else None
            relay.enqueue(session, "order.created", {"n": n}, ordering_key=key, headers={"h": n})
    _drain(_settings(pg_url, jetstream), twice=True)

    rows = _rows(pg_engine)
    assert {s for _, s, _ in rows.values()} == {"sent"}
    stored = jetstream.messages()
    assert len(stored) == 250
    by_id = {m.headers["Nats-Msg-Id"]: m for m in stored}
    assert set(by_id) == {e for e, _, _ in rows.values()}
    first = stored[0]
    assert first.subject == f"{jetstream.exchange}.order.created"
    assert first.headers["ce-id"] == first.headers["Nats-Msg-Id"]
    assert first.headers["ce-type"] == "order.created"
    assert first.headers["ce-specversion"] == "1.0"
    assert first.headers["Content-Type"] == "application/json"
    assert rows[int(first.headers["outbox_id"])][0] == first.headers["Nats-Msg-Id"]
    assert json.loads(first.body) == {"n": int(first.headers["h"])}
    keyed = [int(m.headers["ordering_seq"]) for m in stored if "ordering_seq" in m.headers]
    assert keyed == sorted(keyed)
    assert len(keyed) == 50
    window = jetstream.info().config.duplicate_window
    assert window >= timing.duplicate_window_needed(10, 0.2)


def test_a_message_over_max_payload_is_dead_lettered_alone(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream
) -> None:
    """Given a payload that fits the outbox's limit but not, with its headers, the server's
    max_payload, between small events of its key: it alone fails at once, with the reason;
    its neighbours without a key are sent, the rows of its key after it wait (key order)."""
    with Session(pg_engine) as session, session.begin():
        small = relay.enqueue(session, "t.small", {"n": 1})
        big = relay.enqueue(session, "t.big", {"x": "a" * 1_048_500}, ordering_key="k")
        after = relay.enqueue(session, "t.small", {"n": 2}, ordering_key="k")
        other = relay.enqueue(session, "t.small", {"n": 3})
    _drain(_settings(pg_url, jetstream))
    rows = _rows(pg_engine)
    assert rows[big][1] == "failed"
    assert "max_payload" in (rows[big][2] or ""), rows[big]
    assert rows[small][1] == rows[other][1] == "sent"
    assert rows[after][1] != "failed"
    stored = {m.headers["outbox_id"] for m in jetstream.messages()}
    assert str(big) not in stored
    assert {str(small), str(other)} <= stored


def test_an_unreachable_server_is_an_outage_that_spends_no_attempt(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream
) -> None:
    """Given NATS down (a closed port), the batch is given back: pending, attempt 0."""
    with Session(pg_engine) as session, session.begin():
        relay.enqueue(session, "t.down", {"n": 1})
    down = Stream("nats://127.0.0.1:1", jetstream.name, jetstream.exchange)
    _drain(_settings(pg_url, down, confirm_timeout_seconds=2))
    with pg_engine.connect() as conn:
        status, attempt = conn.execute(sa.select(outbox.c.status, outbox.c.attempt)).one()
    assert (status, attempt) == ("pending", 0)


def test_the_cli_refuses_an_unknown_events_scheme_naming_the_variable_and_schemes(
    pg_url: str, tmp_path: Path
) -> None:
    """`relay dispatch --once` with RELAY_EVENTS_URL=bogus://: exit 2, one clear line."""
    import subprocess

    from tests.support.env import relay_env
    from tests.support.fleet import RELAY_BIN

    env = relay_env(database_url=pg_url, events_url="bogus://host:1")
    done = subprocess.run(
        [RELAY_BIN, "dispatch", "--once"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert "RELAY_EVENTS_URL" in done.stderr, done.stderr
    assert "nats" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_the_doctor_refuses_a_stream_whose_window_is_too_short_and_says_what_to_set(
    pg_url: str, jetstream: Stream
) -> None:
    """An existing stream keeping ids 5 s (lease 10 s): `relay doctor` fails the stream check
    and names the window to set; the relay's own stream passes."""
    import subprocess

    from tests.support.env import relay_env
    from tests.support.fleet import RELAY_BIN

    jetstream.create(duplicate_window=5.0)
    env = relay_env(
        database_url=pg_url,
        events_url=jetstream.url,
        exchange=jetstream.exchange,
        nats_stream=jetstream.name,
        lease_seconds=10,
        backoff_max_seconds=1,
    )
    doctor = [RELAY_BIN, "doctor", "--json"]
    done = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=60)
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert done.returncode != 0, done.stdout
    assert checks["stream"]["status"] == "fail", checks["stream"]
    needed = timing.duplicate_window_needed(10, 1)
    assert f"--dupe-window {timing.DUPLICATE_WINDOW_MARGIN * needed:g}s" in checks["stream"]["fix"]

    jetstream.delete()
    publisher = publishers.for_settings(
        _settings(pg_url, jetstream, lease_seconds=10, backoff_max_seconds=1)
    )
    publisher.connect()  # type: ignore[attr-defined]  # creates the stream
    publisher.close()
    done = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=60)
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["stream"]["status"] == "pass", checks["stream"]


def test_the_readiness_probe_asks_jetstream_on_a_nats_url(pg_url: str, jetstream: Stream) -> None:
    """`relay probe ready` with a NATS events URL: ready while JetStream answers (stream or
    not), not ready when the server is down; never Kombu's unknown-transport error."""
    import subprocess

    from tests.support.env import relay_env
    from tests.support.fleet import RELAY_BIN

    probe = [RELAY_BIN, "probe", "ready"]
    up = relay_env(database_url=pg_url, events_url=jetstream.url, nats_stream=jetstream.name)
    done = subprocess.run(probe, env=up, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    down = {**up, "RELAY_EVENTS_URL": "nats://127.0.0.1:1"}
    done = subprocess.run(probe, env=down, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "NATS" in done.stdout + done.stderr


def test_a_message_over_the_streams_own_limit_is_dead_lettered_before_it_is_sent(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream
) -> None:
    """An existing stream with max_msg_size 4,000: a 6 kB event fails at once naming the
    limit, found before sending (nothing of it reaches the stream), the rest goes on."""
    jetstream.create(duplicate_window=600.0, max_msg_size=4000)
    with Session(pg_engine) as session, session.begin():
        big = relay.enqueue(session, "t.big", {"x": "a" * 6000}, ordering_key="k")
        after = relay.enqueue(session, "t.small", {"n": 1}, ordering_key="k")
        other = relay.enqueue(session, "t.small", {"n": 2})
    _drain(_settings(pg_url, jetstream))
    rows = _rows(pg_engine)
    assert rows[big][1] == "failed"
    assert "max_msg_size of 4000" in (rows[big][2] or ""), rows[big]
    assert rows[other][1] == "sent"
    assert rows[after][1] != "failed"
    stored = {m.headers["outbox_id"] for m in jetstream.messages()}
    assert str(other) in stored
    assert str(big) not in stored
