"""The message on the wire is built from the row exactly as docs/consuming.md's "The message"
says."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.publishers import message
from relay.records import ClaimedEvent

EVENT_ID = "0b6f3c0e-5d1a-4c53-9a1e-2f0c8d9e7a61"


def test_message_carries_the_contract_headers_and_id() -> None:
    """routing key = event_type, message_id = the event id, the relay's headers, the
    CloudEvents attributes (AMQP binding names) and the row's own headers."""
    created = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    event = ClaimedEvent(
        42,
        "order.paid",
        {"total": 3, "é": "ü"},
        {"trace": "t-1"},
        None,
        2,
        created,
        event_id=EVENT_ID,
        source="/shop/orders",
    )
    msg = message.build(event)
    assert msg.routing_key == "order.paid"
    assert msg.message_id == EVENT_ID
    assert json.loads(msg.body) == {"total": 3, "é": "ü"}
    assert msg.headers == {
        "trace": "t-1",
        "outbox_id": 42,
        "event_type": "order.paid",
        "attempt": 2,
        "created_at": "2026-11-29T09:00:00+00:00",
        "cloudEvents:specversion": "1.0",
        "cloudEvents:id": EVENT_ID,
        "cloudEvents:source": "/shop/orders",
        "cloudEvents:type": "order.paid",
        "cloudEvents:time": "2026-11-29T09:00:00+00:00",
    }
    assert message.properties(msg)["content_type"] == "application/json"


def test_a_row_sent_before_event_ids_keeps_its_outbox_id_as_message_id() -> None:
    """A row without an event id (sent before migration 0010) rebuilds the message it was sent
    as: message_id = the outbox id, so an inbox that saw it recognises it."""
    event = ClaimedEvent(7, "order.paid", {}, None, None, 1, datetime(2026, 1, 1, tzinfo=UTC))
    msg = message.build(event)
    assert (msg.message_id, msg.headers["cloudEvents:id"]) == ("7", "7")


def test_enqueue_refuses_the_cloudevents_header_names() -> None:
    """The CloudEvents attributes are the relay's to set: a caller's header cannot shadow them."""
    assert {"cloudEvents:id", "cloudEvents:source"} <= message.RESERVED_HEADERS


def test_body_refuses_nan() -> None:
    """NaN is not JSON: encoding refuses it rather than emit a body consumers cannot parse."""
    with pytest.raises(ValueError, match="JSON"):
        message.encode_body({"x": float("nan")})


def test_a_claimed_row_is_read_in_the_fields_order() -> None:
    """The claim returns its columns as plain tuples, read positionally into ClaimedEvent:
    the two orders must stay the same, on every database."""
    from dataclasses import fields

    from relay.records import ClaimedEvent
    from relay.store.dialects import for_name

    for name in ("postgresql", "mysql", "sqlite"):
        columns = for_name(name).claim_columns()
        # ``source`` and ``defect`` are the store's, not columns: the last fields, set as the
        # claim's rows are read.
        names = [f.name for f in fields(ClaimedEvent)]
        assert names[-2:] == ["source", "defect"]
        assert [c.name for c in columns] == names[:-2], name


#: JSON values as the outbox gives them back: what a JSON text decodes to.
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_a_claimed_payload_is_encoded_to_the_same_bytes_as_any_body(value: object) -> None:
    """The claimed payload's encoder (the C encoder built once) writes exactly the bytes of
    encode_body (``json.JSONEncoder`` with the contract's options) for any JSON value."""
    assert message.encode_claimed(value) == message.encode_body(value)
    assert (
        message.encode_claimed(value)
        == json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    )


def test_a_claimed_payload_is_refused_as_any_body_would_be() -> None:
    """NaN and values JSON has no form for are refused by both encoders alike."""
    for bad, error in (({"x": float("inf")}, ValueError), ({"x": {1, 2}}, TypeError)):
        with pytest.raises(error):
            message.encode_body(bad)
        with pytest.raises(error):
            message.encode_claimed(bad)


@pytest.mark.parametrize(
    ("url", "source"),
    [
        (
            "postgresql+psycopg://app:s3cret@db.internal:5432/shop",
            "/relay/postgresql/db.internal/shop",
        ),
        (
            "mysql+pymysql://root:pw@127.0.0.1/orders?charset=utf8mb4",
            "/relay/mysql/127.0.0.1/orders",
        ),
        ("sqlite:///relay.sqlite3", "/relay/sqlite/localhost/relay.sqlite3"),
    ],
)
def test_default_source_names_the_database_without_credentials(url: str, source: str) -> None:
    """Unset RELAY_SOURCE: kind, host and database of the URL, never its user or password."""
    from sqlalchemy import make_url

    from relay.store.schema.eventids import default_source

    assert default_source(make_url(url)) == source


def test_a_replayed_message_is_the_original_to_one_queue_plus_the_replay_header() -> None:
    """``to_queue``: the default exchange, the queue as routing key, the same body, message id
    and headers, plus ``x-relay-replay`` = the replay's id (a name enqueue refuses)."""
    created = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    event = ClaimedEvent(7, "order.paid", {"n": 1}, None, "k", 3, created, 4, EVENT_ID)
    original = message.build(event)
    replayed = message.to_queue(original, "billing", "r-1")
    assert (replayed.exchange, replayed.routing_key) == ("", "billing")
    assert (replayed.body, replayed.message_id) == (original.body, original.message_id)
    assert replayed.headers == {**original.headers, "x-relay-replay": "r-1"}
    assert message.REPLAY_HEADER in message.RESERVED_HEADERS
