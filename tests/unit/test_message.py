"""The message on the wire is built from the row exactly as DESIGN.md §1.3 says."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from relay import message
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

    from relay.dialects import for_name
    from relay.records import ClaimedEvent

    for name in ("postgresql", "mysql", "sqlite"):
        columns = for_name(name).claim_columns()
        assert [c.name for c in columns] == [f.name for f in fields(ClaimedEvent)], name
