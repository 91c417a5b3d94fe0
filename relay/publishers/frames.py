"""AMQP 0-9-1 frames of ``basic.publish`` for a whole batch, encoded by the relay itself; pure.

py-amqp builds every message's frames through its generic serialiser and writes each with its own
``sendall``; that, not the broker, bounds a Kombu publisher (docs/benchmarks.md, "Publishing only").
Here the parts that never change (the frame layout, the exchange, the content type and encoding, the
property flags) are encoded once, the ``basic.publish`` method frame once per routing key, and per
message only the body size, the headers table, the message id and the body. The bytes are the ones
py-amqp would write for the same Kombu message (``tests/unit/test_frames.py`` holds them equal): a
consumer cannot tell the difference.

Wire format: each frame is ``type (octet), channel (short), size (long), payload, 0xCE``;
a message is a method frame, a content header frame and its body in frames of at most
``frame_max - 8`` bytes of payload (none for an empty body).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from relay.publishers import message
from relay.publishers.message import OutgoingMessage

FRAME_METHOD, FRAME_HEADER, FRAME_BODY = 1, 2, 3
FRAME_END = b"\xce"
#: Type, channel and size in front of every frame's payload, and the end octet after it.
FRAME_OVERHEAD = 8
BASIC_CLASS, BASIC_PUBLISH = 60, 40
#: Property flags of the contract's properties (AMQP's order, high bit first): content_type,
#: content_encoding, headers, delivery_mode, message_id.
PROPERTY_FLAGS = 0x8000 | 0x4000 | 0x2000 | 0x1000 | 0x0080
#: ``basic.publish`` bits: mandatory (an unroutable message comes back), not immediate.
MANDATORY = 0x01

_FRAME_HEAD = struct.Struct(">BHI")
_HEADER_HEAD = struct.Struct(">HHQH")  # class, weight, body size, property flags
_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_I32_MAX = 2147483647


def shortstr(value: str) -> bytes:
    """An AMQP short string; over 255 bytes is ``struct.error``, as in py-amqp."""
    raw = value.encode("utf-8", "surrogatepass")
    return _U8.pack(len(raw)) + raw


#: Header names seen, as short strings: a few names recur in every message.
_NAMES: dict[str, bytes] = {}
_LONGSTR_HEAD = struct.Struct(">cI")
_INT_FIELD = struct.Struct(">ci")


def table(values: Mapping[str, Any]) -> bytes:
    """An AMQP field table, typed as py-amqp types it (``_write_table``)."""
    parts: list[bytes] = []
    append = parts.append
    for key, value in values.items():
        name = _NAMES.get(key)
        if name is None:
            name = shortstr(key)
            if len(_NAMES) < 10_000:  # header names are few; never grow without bound
                _NAMES[key] = name
        append(name)
        # The two kinds every message carries, inline; the rest as _field types them.
        kind = type(value)
        if kind is str:
            raw = value.encode("utf-8", "surrogatepass")
            append(_LONGSTR_HEAD.pack(b"S", len(raw)))
            append(raw)
        elif kind is int and -_I32_MAX <= value <= _I32_MAX:
            append(_INT_FIELD.pack(b"I", value))
        else:
            _field(value, parts)
    data = b"".join(parts)
    return _U32.pack(len(data)) + data


def _array(values: list[Any] | tuple[Any, ...], parts: list[bytes]) -> None:
    items: list[bytes] = []
    for value in values:
        _field(value, items)
    data = b"".join(items)
    parts += (b"A", _U32.pack(len(data)), data)


def _field(value: Any, parts: list[bytes]) -> None:
    # The order of the checks is py-amqp's: bool before int, str and bytes first.
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        parts += (b"S", _U32.pack(len(raw)), raw)
    elif isinstance(value, bytes):
        parts += (b"S", _U32.pack(len(value)), value)
    elif isinstance(value, bool):
        parts.append(b"t\x01" if value else b"t\x00")
    elif isinstance(value, float):
        parts += (b"d", _F64.pack(value))
    elif isinstance(value, int):
        if value > _I32_MAX or value < -_I32_MAX:
            parts += (b"L", _I64.pack(value))
        else:
            parts += (b"I", _I32.pack(value))
    elif isinstance(value, dict):
        parts += (b"F", table(value))
    elif isinstance(value, list | tuple):
        _array(value, parts)
    elif value is None:
        parts.append(b"V")
    else:
        raise TypeError(f"a header value of type {type(value).__name__} has no AMQP field type")


#: Properties a Celery task message adds, in AMQP's order between delivery_mode and message_id.
_EXTRA: tuple[tuple[str, int, Callable[[Any], bytes]], ...] = (
    ("priority", 0x0800, lambda v: _U8.pack(v)),
    ("correlation_id", 0x0400, lambda v: shortstr(v)),
    ("reply_to", 0x0200, lambda v: shortstr(v)),
)


class BatchEncoder:
    """Encodes messages for one channel, exchange and negotiated ``frame_max``."""

    def __init__(self, channel_id: int, exchange: str, frame_max: int) -> None:
        self.channel_id = channel_id
        self.chunk = frame_max - FRAME_OVERHEAD
        self._exchange = shortstr(exchange)
        self._methods: dict[tuple[str | None, str], bytes] = {}
        self._content = shortstr(message.CONTENT_TYPE) + shortstr(message.CONTENT_ENCODING)
        self._delivery_mode = _U8.pack(message.PERSISTENT)
        self._frame: Callable[..., bytes] = _FRAME_HEAD.pack

    def method_frame(self, routing_key: str, exchange: str | None = None) -> bytes:
        """The whole ``basic.publish`` method frame for ``routing_key`` on the encoder's
        exchange, or on ``exchange`` (a Celery task's route); cached."""
        cache, key = self._methods, (exchange, routing_key)
        frame = cache.get(key)
        if frame is None:
            payload = b"".join(
                (
                    struct.pack(">HHH", BASIC_CLASS, BASIC_PUBLISH, 0),
                    self._exchange if exchange is None else shortstr(exchange),
                    shortstr(routing_key),
                    _U8.pack(MANDATORY),
                )
            )
            frame = self._frame(FRAME_METHOD, self.channel_id, len(payload)) + payload + FRAME_END
            if len(cache) < 10_000:  # event types are few; never grow without bound
                cache[key] = frame
        return frame

    def _properties(self, msg: OutgoingMessage, body_size: int) -> bytes:
        """The content header's payload: the contract's properties, plus a task's extras."""
        flags, extra = PROPERTY_FLAGS, b""
        if msg.extra:
            unknown = set(msg.extra) - {name for name, _, _ in _EXTRA}
            if unknown:
                raise ValueError(f"properties the encoder does not write: {sorted(unknown)}")
            parts = []
            for name, flag, encode in _EXTRA:
                value = msg.extra.get(name)
                if value is not None:
                    flags |= flag
                    parts.append(encode(value))
            extra = b"".join(parts)
        return b"".join(
            (
                _HEADER_HEAD.pack(BASIC_CLASS, 0, body_size, flags),
                self._content,
                table(msg.headers),
                self._delivery_mode,
                extra,
                shortstr(msg.message_id),
            )
        )

    def encode(self, msg: OutgoingMessage) -> bytes:
        """Every frame of ``msg``: method, content header, body."""
        body = msg.body
        header = self._properties(msg, len(body))
        frame, channel = self._frame, self.channel_id
        parts = [
            self.method_frame(msg.routing_key, msg.exchange),
            frame(FRAME_HEADER, channel, len(header)),
            header,
            FRAME_END,
        ]
        chunk = self.chunk
        if len(body) <= chunk:
            if body:
                parts += (frame(FRAME_BODY, channel, len(body)), body, FRAME_END)
        else:
            for start in range(0, len(body), chunk):
                piece = body[start : start + chunk]
                parts += (frame(FRAME_BODY, channel, len(piece)), piece, FRAME_END)
        return b"".join(parts)
