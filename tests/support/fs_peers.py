"""Peers on the embedded ``filesystem://`` transport, run as separate processes by the tests.

``python -m tests.support.fs_peers publish URL N`` publishes N messages (message ids ``0`` to
``N-1``). ``python -m tests.support.fs_peers consume URL QUEUE OUT`` binds QUEUE and takes
messages from it until the file ``published`` exists in the transport's folder and the queue
folder is empty (or 60 s pass), then writes the ids it took to OUT, one per line.

Kombu remembers the bindings a process declared and skips declaring them again, even on a new
folder, so each test uses its own queue name.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import kombu

from relay.publishers import transports

EXCHANGE = kombu.Exchange("peers", type="topic", durable=True)
#: Created by the test in the transport's base folder once every publisher has exited.
PUBLISHED = "published"


def connect(url: str) -> kombu.Connection:
    return kombu.Connection(url, transport_options=transports.transport_options(url))


def bind(conn: kombu.Connection, name: str) -> kombu.Queue:
    """Queue ``name``, bound to :data:`EXCHANGE` for every message the publishers send."""
    queue = kombu.Queue(name, EXCHANGE, routing_key="peer.#")(conn.channel())
    queue.declare()
    return queue


def publish(url: str, count: int) -> None:
    with connect(url) as conn:
        producer = kombu.Producer(conn.channel(), exchange=EXCHANGE)
        for i in range(count):
            producer.publish({"i": i}, routing_key="peer.message", message_id=str(i))


def consume(url: str, name: str, out: Path) -> None:
    base = transports.embedded_folder(url)
    assert base is not None
    with connect(url) as conn:
        queue = bind(conn, name)
        taken: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = queue.get(no_ack=True)
            if msg is not None:
                taken.append(msg.properties["message_id"])
            elif (base / PUBLISHED).exists() and not any((base / "queues").iterdir()):
                break
    out.write_text("".join(f"{i}\n" for i in taken))


if __name__ == "__main__":
    role, url = sys.argv[1], sys.argv[2]
    if role == "publish":
        publish(url, int(sys.argv[3]))
    else:
        consume(url, sys.argv[3], Path(sys.argv[4]))
