"""The relay's own AMQP frames are byte for byte what py-amqp writes for the same Kombu message."""

from __future__ import annotations

import functools
import struct
import types
from datetime import UTC, datetime
from typing import Any

import pytest
from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps
from kombu.transport import pyamqp

from relay.publishers import message
from relay.publishers.frames import BatchEncoder
from relay.publishers.kombu_connection import kombu_message
from relay.publishers.message import OutgoingMessage
from relay.records import ClaimedEvent

EXCHANGE = "outbox.events"
CHANNEL = 3
#: RabbitMQ's default frame_max, and a small one so that bodies split.
FRAME_MAXES = (131072, 4096)


def _py_amqp_frames(msg: OutgoingMessage, frame_max: int) -> bytes:
    """What Kombu's channel + py-amqp write for ``msg`` (the relay's former publish path)."""
    written: list[bytes] = []
    transport = types.SimpleNamespace(write=lambda data: written.append(bytes(data)))
    connection = types.SimpleNamespace(frame_max=frame_max, bytes_sent=0)
    write_frame = frame_writer(connection, transport)
    channel = types.SimpleNamespace(
        prepare_message=functools.partial(pyamqp.Channel.prepare_message, None)
    )
    exchange = EXCHANGE if msg.exchange is None else msg.exchange
    args = dumps("Bssbb", (0, exchange, msg.routing_key, True, False))
    write_frame(1, CHANNEL, spec.Basic.Publish, args, kombu_message(channel, msg))
    return b"".join(written)


def _event(payload: Any, headers: dict[str, Any] | None, **kw: Any) -> ClaimedEvent:
    fields: dict[str, Any] = {
        "id": 42,
        "event_type": "order.created",
        "payload": payload,
        "headers": headers,
        "ordering_key": None,
        "attempt": 1,
        "created_at": datetime(2026, 11, 29, 9, 30, 0, 123456, tzinfo=UTC),
    }
    fields.update(kw)
    return ClaimedEvent(**fields)


CASES = {
    "plain": _event({"n": 1}, None),
    "unicode": _event(
        {"name": "Zoë 東京 🚀"}, {"tenant": "ünï", "ключ": "значение"}, event_type="заказ.создан"
    ),
    "empty body": _event("", None),  # the JSON "" is two bytes; see test_empty_body below
    "large body": _event({"blob": "x" * 300_000}, {"trace": "t"}),
    "body at the frame limit": _event({"blob": "y" * 4076}, None),
    "every JSON header type": _event(
        {"n": 1},
        {
            "s": "text",
            "i": 7,
            "neg": -2147483647,
            "i32_edge": 2147483647,
            "big": 2147483648,
            "small": -2147483648,
            "f": 1.5,
            "t": True,
            "no": False,
            "none": None,
            "list": [1, "a", None, [True], {"k": 2.25}],
            "dict": {"nested": {"deep": [1, 2]}, "": "empty key"},
            "empty list": [],
            "empty dict": {},
        },
        attempt=9,
        id=2**40,
    ),
    "ordered": _event({"n": 3}, {"tenant": "t"}, ordering_key="order-1", seq=17),
}


@pytest.mark.parametrize("frame_max", FRAME_MAXES)
@pytest.mark.parametrize("case", list(CASES))
def test_frames_equal_py_amqp_encoding(case: str, frame_max: int) -> None:
    """Method, header and body frames equal py-amqp's, bodies split at frame_max - 8."""
    msg = message.build(CASES[case])
    encoder = BatchEncoder(CHANNEL, EXCHANGE, frame_max)
    assert encoder.encode(msg) == _py_amqp_frames(msg, frame_max)


@pytest.mark.parametrize("frame_max", FRAME_MAXES)
def test_empty_body(frame_max: int) -> None:
    """A zero-length body has no body frame, as with py-amqp."""
    msg = message.build(CASES["plain"])
    empty = OutgoingMessage(msg.outbox_id, msg.routing_key, b"", msg.headers, msg.message_id)
    frames = BatchEncoder(CHANNEL, EXCHANGE, frame_max).encode(empty)
    assert frames == _py_amqp_frames(empty, frame_max)
    assert frames.count(b"\xce") == 2


def test_large_body_is_split_into_frames_of_at_most_frame_max() -> None:
    """Every frame of a large message fits the negotiated frame_max."""
    frame_max = 4096
    frames = BatchEncoder(CHANNEL, EXCHANGE, frame_max).encode(message.build(CASES["large body"]))
    sizes = []
    offset = 0
    while offset < len(frames):
        _, _, size = struct.unpack_from(">BHI", frames, offset)
        sizes.append(size + 8)
        assert frames[offset + 7 + size] == 0xCE
        offset += size + 8
    assert max(sizes) == frame_max
    assert len(sizes) > 70


def test_a_field_py_amqp_cannot_encode_fails_the_same_way() -> None:
    """A header key over 255 bytes is a struct.error, the message alone is refused."""
    msg = message.build(_event({"n": 1}, {"k" * 256: "v"}))
    with pytest.raises(struct.error):
        BatchEncoder(CHANNEL, EXCHANGE, 131072).encode(msg)
    with pytest.raises(struct.error):
        _py_amqp_frames(msg, 131072)


def _task(properties: dict[str, Any], exchange: str) -> ClaimedEvent:
    celery_headers = {"lang": "py", "task": "app.add", "id": "7f3c", "eta": None, "retries": 0}
    celery_headers |= {"timelimit": [None, None], "expires": "2026-12-01T10:00:00+00:00"}
    task = {
        "exchange": exchange,
        "routing_key": "celery",
        "headers": celery_headers,
        "properties": properties,
    }
    body = [[1, 2], {"k": "ü"}, {"callbacks": None, "errbacks": None, "chain": None}]
    return _event(body, {"tenant": "a", message.TASK_HEADER: task}, event_type="app.add")


@pytest.mark.parametrize(
    ("properties", "exchange"),
    [
        ({"correlation_id": "7f3c", "reply_to": ""}, ""),
        ({"correlation_id": "7f3c", "reply_to": "r.q", "priority": 5}, "tasks"),
    ],
)
def test_celery_task_frames_equal_py_amqp_encoding(
    properties: dict[str, Any], exchange: str
) -> None:
    """A task message (own exchange, correlation_id, reply_to, priority) encodes byte for byte
    as py-amqp would, and the relay's row header never reaches the wire."""
    msg = message.build(_task(properties, exchange))
    assert message.TASK_HEADER not in msg.headers
    assert msg.headers["id"] == "7f3c"
    encoder = BatchEncoder(CHANNEL, EXCHANGE, 131072)
    assert encoder.encode(msg) == _py_amqp_frames(msg, 131072)
