"""The relay's JetStream publisher against raw nats-py (issue 50), in one run, CPU per event.

Both sides publish the same messages to a stream of their own on the NATS server of
``RELAY_TEST_NATS_URL`` (default 127.0.0.1:4222), with the same acknowledgements awaited the
same way: every publish of a window of 1,000 in flight, then all its ``PubAck``s awaited.

- Raw nats-py: one asyncio loop, ``js.publish_async`` of each message (subject, headers and
  body built by the relay's own code before the clock), ``gather`` of the window's futures.
- The relay's publisher: :class:`relay.publishers.jetstream.JetStreamPublisher` publishing the
  claimed events (built before the clock, no database) in batches of 1,000, the relay's largest
  claim at the defaults: it builds each message (``relay.publishers.message.prepare`` and the
  NATS conversion) inside the clock, as the relay does, and hands the batch to its loop thread.

CPU is the harness process's (every thread: the relay's publisher runs its own loop thread) and
the NATS server's, from ``/proc``, over the same window, per event; ``cpu_vs_raw`` is the raw
side's total over the relay's. The modes take turns within each repetition, each on a fresh
stream, and every run must leave exactly ``events`` messages in its stream.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from bench import procs
from relay.publishers import message, nats_message
from relay.records import ClaimedEvent

NATS_URL = os.environ.get("RELAY_TEST_NATS_URL", "nats://127.0.0.1:4222")
WINDOW = 1000
EXCHANGE = "bench"


def _events(n: int) -> list[ClaimedEvent]:
    created = datetime.now(UTC)
    payload = {"order_id": 0, "customer": "c-1234", "total": "99.95", "items": [1, 2, 3]}
    headers = {"tenant": "acme", "trace": "00-abc-01"}
    return [
        ClaimedEvent(i, "order.created", {**payload, "order_id": i}, headers, None, 1, created,
                     event_id=str(uuid.uuid4()))
        for i in range(1, n + 1)
    ]  # fmt: skip


async def _raw(stream: str, msgs: list[nats_message.NatsMessage]) -> float:
    import nats

    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name=stream, subjects=[f"{EXCHANGE}.>"], duplicate_window=660)
        start = time.perf_counter()
        for i in range(0, len(msgs), WINDOW):
            futures = [
                await js.publish_async(m.subject, m.body, headers=m.headers)
                for m in msgs[i : i + WINDOW]
            ]
            await asyncio.gather(*futures)
        return time.perf_counter() - start
    finally:
        await nc.close()


def _relay(stream: str, events: list[ClaimedEvent]) -> float:
    from relay.publishers.jetstream import JetStreamPublisher

    publisher = JetStreamPublisher(
        NATS_URL, EXCHANGE, stream=stream, duplicate_window=660, confirm_timeout=10
    )
    publisher.connect()
    try:
        start = time.perf_counter()
        for i in range(0, len(events), WINDOW):
            batch = events[i : i + WINDOW]
            result = publisher.publish(batch)
            assert len(result.confirmed) == len(batch), result.error
        return time.perf_counter() - start
    finally:
        publisher.close()


async def _stored_then_delete(stream: str) -> int:
    import nats

    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream(timeout=10)
        count = (await js.stream_info(stream)).state.messages
        await js.delete_stream(stream)
        return int(count)
    finally:
        await nc.close()


def _measure(mode: str, events: int) -> dict[str, Any]:
    claimed = _events(events)
    stream = f"BENCH_{mode.upper()}_{uuid.uuid4().hex[:8]}"
    server = procs.pids_of("nats-server")
    cpu_server0, cpu_self0 = procs.cpu_seconds(server), time.process_time()
    if mode == "raw":
        msgs = [nats_message.from_message(message.prepare(e), EXCHANGE) for e in claimed]
        cpu_server0, cpu_self0 = procs.cpu_seconds(server), time.process_time()
        seconds = asyncio.run(_raw(stream, msgs))
    else:
        seconds = _relay(stream, claimed)
    cpu_self = time.process_time() - cpu_self0
    cpu_server = procs.cpu_seconds(server) - cpu_server0
    stored = asyncio.run(_stored_then_delete(stream))
    assert stored == events, f"{mode}: {stored} messages in the stream for {events} events"
    return {
        "seconds": round(seconds, 4),
        "events_per_s": round(events / seconds),
        "cpu_publisher_us": round(cpu_self / events * 1e6, 1),
        "cpu_nats_us": round(cpu_server / events * 1e6, 1),
    }


def run(events: int, reps: int) -> dict[str, Any]:
    """``reps`` runs of each mode on ``events`` events, the modes taking turns."""
    modes = ["raw", "relay"]
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for rep in range(reps):
        for mode in modes[rep % 2 :] + modes[: rep % 2]:
            runs[mode].append(_measure(mode, events))
    out: dict[str, Any] = {"events": events, "window": WINDOW, "reps": reps, "modes": {}}
    for mode, rows in runs.items():
        out["modes"][mode] = {key: statistics.median(r[key] for r in rows) for key in rows[0]} | {
            "runs": rows
        }
    raw, relay = out["modes"]["raw"], out["modes"]["relay"]
    for m in (raw, relay):
        m["cpu_total_us"] = round(m["cpu_publisher_us"] + m["cpu_nats_us"], 1)
    out["rate_vs_raw"] = round(relay["events_per_s"] / raw["events_per_s"], 3)
    out["cpu_vs_raw"] = round(raw["cpu_total_us"] / relay["cpu_total_us"], 3)
    return out
