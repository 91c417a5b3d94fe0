"""The chaos soak's JetStream leg (``python -m bench.chaos --jetstream``): the relays publish
to a stream of the soak's own on the NATS server of ``RELAY_TEST_NATS_URL`` (default
127.0.0.1:4222), through the broker's fault proxy; afterwards the whole stream is read back.

What it adds to the soak's report: every message of the stream by outbox id (the soak's usual
delivered / missing / duplicates, where a duplicate is now a message *stored* twice), messages
sharing a ``Nats-Msg-Id`` (the goal: none), and how many republished events the stream dropped
as already stored (summed from the relays' logs: the JetStream publisher logs each batch whose
``PubAck``s said ``duplicate``), which shows the faults did cause republishes.
"""

from __future__ import annotations

import collections
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.jetstream import Stream

NATS_URL = os.environ.get("RELAY_TEST_NATS_URL", "nats://127.0.0.1:4222")
_DROPPED = re.compile(r"dropped (\d+) of \d+ events as already stored")


@dataclass(frozen=True)
class Stored:
    """What the stream holds at the end: message counts by outbox id, and by message id."""

    by_outbox_id: collections.Counter[int]
    by_message_id: collections.Counter[str]

    @property
    def same_message_id(self) -> int:
        """Messages stored under an id the stream already held (JetStream should drop them)."""
        return sum(n - 1 for n in self.by_message_id.values() if n > 1)


@contextmanager
def stream() -> Iterator[Stream]:
    """A stream name and subject prefix of the soak's own, deleted afterwards."""
    tag = uuid.uuid4().hex[:10]
    s = Stream(NATS_URL, f"CHAOS_{tag}", f"chaos{tag}")
    try:
        yield s
    finally:
        s.delete()


def read(s: Stream) -> Stored:
    """Every message of ``s``, counted by outbox id and by ``Nats-Msg-Id``."""
    by_id: collections.Counter[int] = collections.Counter()
    by_msg: collections.Counter[str] = collections.Counter()
    for m in s.messages():
        by_id[int(m.headers["outbox_id"])] += 1
        by_msg[m.headers["Nats-Msg-Id"]] += 1
    return Stored(by_id, by_msg)


def dropped_republishes(logs: dict[str, str]) -> int:
    """Republished events the stream dropped as already stored, from the relays' logs."""
    return sum(int(n) for text in logs.values() for n in _DROPPED.findall(text))


__all__ = ["NATS_URL", "Stored", "dropped_republishes", "read", "stream"]
