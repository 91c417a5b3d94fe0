"""Signed events (relay.publishers.signatures): the header the relay adds, what it covers,
rotation, and the refusals of RELAY_SIGNING_KEYS; no network."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from relay.config import Settings
from relay.exceptions import ConfigError
from relay.publishers import message
from relay.publishers.signatures import HEADER, Keyring
from relay.records import TASK_HEADER, ClaimedEvent

OLD = "k2025=" + "o" * 40
NEW = "k2026=" + "n" * 40


def _event(**kw: object) -> ClaimedEvent:
    fields: dict[str, object] = {
        "id": 7,
        "event_type": "order.created",
        "payload": {"n": 7},
        "headers": {"tenant": "t1"},
        "ordering_key": None,
        "attempt": 1,
        "created_at": datetime(2026, 12, 6, 9, 0, tzinfo=UTC),
        "event_id": "4f1c2a9e-8b7d-4e6f-a1b2-c3d4e5f60718",
        "source": "/shop",
    }
    fields.update(kw)
    return ClaimedEvent(**fields)  # type: ignore[arg-type]


def _signed(keys: str, **kw: object) -> message.OutgoingMessage:
    return message.prepare(_event(**kw), Keyring.from_text(keys))


def _verify(keys: str, msg: message.OutgoingMessage, **changes: object) -> str | None:
    keyring = Keyring.from_text(keys)
    assert keyring is not None
    headers = {**msg.headers, **changes.pop("headers", {})}  # type: ignore[dict-item]
    body = changes.pop("body", msg.body)
    key = changes.pop("routing_key", msg.routing_key)
    return keyring.verify(msg.message_id, str(key), headers, body)  # type: ignore[arg-type]


def test_a_signed_event_verifies_and_names_its_key() -> None:
    msg = _signed(NEW)
    assert msg.headers[HEADER].startswith("v1 k2026 ")
    assert _verify(NEW, msg) is None


def test_rotation_the_first_key_signs_every_key_verifies() -> None:
    """Keys listed new-first: new events carry the new key id, and events signed with the old
    key (in flight during the rotation) still verify; once the old key is dropped they do not."""
    during = f"{NEW},{OLD}"
    assert _signed(during).headers[HEADER].split()[1] == "k2026"
    old_msg = _signed(OLD)
    assert _verify(during, old_msg) is None
    assert _verify(NEW, old_msg) == "signed with unknown key id 'k2025'"


@pytest.mark.parametrize(
    "change",
    [
        {"body": b'{"n": 8}'},
        {"routing_key": "order.refunded"},
        {"headers": {"outbox_id": 8}},
        {"headers": {"created_at": "2026-12-06T09:00:01+00:00"}},
        {"headers": {"cloudEvents:source": "/elsewhere"}},
    ],
)
def test_any_change_to_body_or_contract_headers_breaks_the_signature(
    change: dict[str, object],
) -> None:
    refused = _verify(NEW, _signed(NEW), **change)
    assert refused is not None
    assert refused.startswith("bad signature")


def test_unsigned_forged_and_other_key_messages_are_refused() -> None:
    unsigned = message.prepare(_event())
    assert HEADER not in unsigned.headers
    assert _verify(NEW, unsigned) == "unsigned (no relay_signature header)"
    other = _signed("k2026=" + "x" * 40)
    assert (_verify(NEW, other) or "").startswith("bad signature")
    assert (
        _verify(NEW, unsigned, headers={HEADER: "v9 k2026 00"}) == "unknown signature scheme 'v9'"
    )


def test_celery_task_messages_are_not_signed() -> None:
    task = {
        "exchange": "",
        "routing_key": "celery",
        "headers": {"id": "t1", "task": "app.add"},
        "properties": {},
    }
    msg = _signed(NEW, headers={TASK_HEADER: task}, payload=[[1, 2], {}, {}])
    assert HEADER not in msg.headers


def test_producers_cannot_set_the_signature_header() -> None:
    assert HEADER in message.RESERVED_HEADERS


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        ("k1", "entry 1 is not kid=secret"),
        ("k1=short", "shorter than 32 characters"),
        (f"{NEW},{NEW}", "listed twice"),
        ("bad kid=" + "s" * 40, "is not 1-64 of"),
    ],
)
def test_bad_keys_are_refused_without_echoing_a_secret(keys: str, problem: str) -> None:
    with pytest.raises(ConfigError, match="RELAY_SIGNING_KEYS") as caught:
        Settings.from_env({"RELAY_SIGNING_KEYS": keys})
    assert problem in str(caught.value)
    assert "short" not in str(caught.value).replace("shorter", "")
    assert "s" * 40 not in str(caught.value)


def test_keys_are_secret_everywhere_the_settings_print() -> None:
    settings = Settings(signing_keys=NEW)
    assert "n" * 40 not in repr(settings)
    assert settings.describe()["signing_keys"] == "***"
    assert "n" * 40 not in repr(Keyring.from_text(NEW))


def test_on_event_workers_verify_with_the_keys_of_their_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RELAY_SIGNING_KEYS`` in a worker's environment: every queue ``on_event`` registers
    verifies signatures; without it, none does."""
    import sqlalchemy as sa
    from celery import Celery

    from relay.celery import on_event
    from relay.celery.events import _EVENT_QUEUES

    engine = sa.create_engine("sqlite://")
    monkeypatch.setenv("RELAY_SIGNING_KEYS", NEW)
    signed_app, plain_app = Celery("signed"), Celery("plain")
    on_event(signed_app, "order.*", queue="orders", engine=engine)(lambda conn, event: None)
    monkeypatch.delenv("RELAY_SIGNING_KEYS")
    on_event(plain_app, "order.*", queue="orders", engine=engine)(lambda conn, event: None)
    keyring = _EVENT_QUEUES[signed_app].queues["orders"].keyring
    assert keyring is not None
    assert keyring.keys[0][0] == "k2026"
    assert _EVENT_QUEUES[plain_app].queues["orders"].keyring is None
