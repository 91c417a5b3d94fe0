"""The NATS side of a message, the events URL's scheme and the doctor's window verdict; pure."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from relay import publishers
from relay.commands.doctor import stream
from relay.config import Settings, timing
from relay.exceptions import ConfigError, EventUnsendable
from relay.publishers import message, nats_message
from relay.publishers.jetstream import connect_options
from relay.records import ClaimedEvent

EVENT_ID = "0b7d1c2e-2f4e-4f0a-9a51-3a7c2b1d9e10"
CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def _event(
    event_type: str = "order.paid", headers: dict[str, object] | None = None
) -> ClaimedEvent:
    return ClaimedEvent(7, event_type, {"n": 1}, headers, "k", 3, CREATED, 4, EVENT_ID)


def test_the_nats_message_carries_the_event_id_and_the_cloudevents_nats_binding() -> None:
    """Subject <exchange>.<type>; Nats-Msg-Id = event id; ce-* headers; text header values."""
    msg = nats_message.from_message(message.prepare(_event(headers={"tenant": 3})), "outbox")
    assert msg.subject == "outbox.order.paid"
    assert msg.headers["Nats-Msg-Id"] == EVENT_ID
    assert msg.headers["ce-id"] == EVENT_ID
    assert msg.headers["ce-type"] == "order.paid"
    assert msg.headers["ce-specversion"] == "1.0"
    assert msg.headers["Content-Type"] == "application/json"
    assert msg.headers["outbox_id"] == "7"
    assert msg.headers["tenant"] == "3"
    assert msg.headers["ordering_seq"] == "4"
    assert not any(k.startswith("cloudEvents:") for k in msg.headers)
    assert msg.body == b'{"n":1}'
    assert msg.size > len(msg.body) + sum(map(len, msg.headers))


@pytest.mark.parametrize(
    ("event_type", "headers"),
    [
        ("has space", None),
        ("a..b", None),
        ("wild.*", None),
        ("order.paid", {"bad name": 1}),
        ("order.paid", {"x": "two\nlines"}),
    ],
)
def test_what_nats_cannot_carry_is_the_rows_fault(
    event_type: str, headers: dict[str, object] | None
) -> None:
    with pytest.raises(EventUnsendable):
        nats_message.from_message(message.prepare(_event(event_type, headers)), "outbox")


def test_an_unknown_events_scheme_names_the_variable_and_the_known_schemes() -> None:
    with pytest.raises(ConfigError) as caught:
        publishers.for_url("bogus://user:secret@host:1", "outbox")
    text = str(caught.value)
    assert "RELAY_EVENTS_URL" in text
    assert "'bogus'" in text
    assert "nats" in text
    assert "amqp" in text
    assert "secret" not in text


def test_nats_url_options_become_nats_py_keywords_and_unknown_ones_are_refused() -> None:
    servers, options = connect_options("nats://u:p@a:4222?creds=/c.creds,nats://b:4222")
    assert servers == ["nats://u:p@a:4222", "nats://b:4222"]
    assert options == {"user_credentials": "/c.creds"}
    _, tls_options = connect_options("tls://nats.example:4222")
    assert tls_options["tls_hostname"] == "nats.example"
    assert tls_options["tls"].check_hostname
    with pytest.raises(ConfigError):
        publishers.for_url("nats://a:4222?bogus=1", "outbox")


@pytest.mark.parametrize(("window", "status"), [(None, "warn"), (5.0, "fail"), (400.0, "pass")])
def test_the_doctor_fails_a_window_shorter_than_lease_plus_longest_wait(
    window: float | None, status: str
) -> None:
    settings = Settings(lease_seconds=30, backoff_max_seconds=300, exchange="outbox")
    config = (
        None if window is None else SimpleNamespace(duplicate_window=window, subjects=["outbox.>"])
    )
    check = stream.verdict(settings, config)
    assert check.status == status, check
    if status == "fail":
        needed = timing.duplicate_window_needed(30, 300)
        assert needed == 330
        assert f"--dupe-window {2 * needed:g}s" in check.fix
