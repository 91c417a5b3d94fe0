"""The embedded ``filesystem://`` transport hands each message over whole and exactly once.

Kombu's own filesystem channel creates a message file before writing it, so a consumer that
lists the folder in between takes an empty file and loses the message (celery/kombu#1551; in
this harness Kombu's channel lost 17 of 5,000). These tests run publishers and consumers as
separate processes on real folders, with the consumers polling as fast as they can.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import kombu

from relay.publishers import transports
from tests.support import fs_peers
from tests.support.celery_fleet import ROOT

COUNT = 5000


def _queue_name() -> str:
    return f"peers.{uuid.uuid4().hex[:8]}"


def _peer(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.support.fs_peers", *args], cwd=ROOT)


def test_filesystem_urls_resolve_to_the_relays_transport(tmp_path: Path) -> None:
    with fs_peers.connect(f"filesystem://{tmp_path}") as conn:
        assert isinstance(conn.transport, transports.Transport)
        assert isinstance(conn.default_channel, transports.Channel)


def test_a_polling_consumer_never_takes_a_half_written_message(tmp_path: Path) -> None:
    url = f"filesystem://{tmp_path}"
    with fs_peers.connect(url) as conn:
        queue = fs_peers.bind(conn, _queue_name())
        publisher = _peer("publish", url, str(COUNT))
        taken: list[str] = []
        deadline = time.monotonic() + 120
        # A decode error from a half-written file would raise out of get() and fail the test.
        while publisher.poll() is None or len(taken) < COUNT:
            assert time.monotonic() < deadline, f"only {len(taken)} of {COUNT} taken in 120 s"
            msg = queue.get(no_ack=True)
            if msg is not None:
                taken.append(msg.properties["message_id"])
            elif publisher.returncode is not None and not any((tmp_path / "queues").iterdir()):
                break
    assert publisher.wait() == 0
    assert sorted(map(int, taken)) == list(range(COUNT))
    assert not list((tmp_path / "taken").iterdir()), "a taken message file was left behind"


def test_competing_consumers_take_each_message_exactly_once(tmp_path: Path) -> None:
    url = f"filesystem://{tmp_path}"
    name = _queue_name()
    with fs_peers.connect(url) as conn:
        fs_peers.bind(conn, name)  # bound before anything is published
    outs = [tmp_path / f"consumer-{i}.txt" for i in range(3)]
    consumers = [_peer("consume", url, name, str(out)) for out in outs]
    publishers = [_peer("publish", url, str(COUNT // 2)) for _ in range(2)]
    assert [p.wait(timeout=120) for p in publishers] == [0, 0]
    (tmp_path / fs_peers.PUBLISHED).touch()
    assert [c.wait(timeout=120) for c in consumers] == [0, 0, 0]
    per_consumer = [out.read_text().split() for out in outs]
    taken = [int(i) for ids in per_consumer for i in ids]
    # Two publishers each sent ids 0..COUNT/2-1: every message arrives once, none twice.
    assert sorted(taken) == sorted(list(range(COUNT // 2)) * 2)
    assert sum(1 for ids in per_consumer if ids) >= 2, "the consumers did not compete"


def test_a_message_from_kombus_own_channel_is_read(tmp_path: Path) -> None:
    """Files written by Kombu's stock channel (another app on the same folders) still read."""
    url = f"filesystem://{tmp_path}"
    with fs_peers.connect(url) as conn:
        name = _queue_name()
        queue = fs_peers.bind(conn, name)
        stock = kombu.transport.filesystem.Channel._put
        stock(conn.default_channel, name, _raw(conn, "from-stock"))
        msg = queue.get(no_ack=True)
        assert msg is not None
        assert msg.properties["message_id"] == "from-stock"


def _raw(conn: kombu.Connection, message_id: str) -> dict[str, object]:
    channel = conn.default_channel
    raw: dict[str, object] = channel.prepare_message(
        b'{"i": 0}', 0, "application/json", "utf-8", {}, {"message_id": message_id}
    )
    channel._inplace_augment_message(raw, fs_peers.EXCHANGE.name, "peer.message")
    return raw
