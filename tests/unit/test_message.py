"""The message on the wire is built from the row exactly as DESIGN.md §1.3 says."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.publishers import message
from relay.records import ClaimedEvent


def test_message_carries_the_contract_headers_and_id() -> None:
    """routing key = event_type, message_id = outbox id, contract headers plus the row's."""
    created = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    event = ClaimedEvent(
        42, "order.paid", {"total": 3, "é": "ü"}, {"trace": "t-1"}, None, 2, created
    )
    msg = message.build(event)
    assert msg.routing_key == "order.paid"
    assert msg.message_id == "42"
    assert json.loads(msg.body) == {"total": 3, "é": "ü"}
    assert msg.headers == {
        "trace": "t-1",
        "outbox_id": 42,
        "event_type": "order.paid",
        "attempt": 2,
        "created_at": "2026-11-29T09:00:00+00:00",
    }


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
        assert [c.name for c in columns] == [f.name for f in fields(ClaimedEvent)], name


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
