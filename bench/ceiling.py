"""The ceilings: what the broker and the database allow on their own.

Broker: the relay's messages (same body, headers, persistent, mandatory) published with raw
Kombu / py-amqp and publisher confirms awaited per window of 100, 1,000 or all messages, or
one by one; built before the clock starts, so only the transport is timed. Database: the
relay's own claim + mark-sent statements with no broker (``bench.sqlonly``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

import amqp
import kombu

from bench import fixtures, procs, rows
from bench.drain import grid
from bench.stats import summarize
from relay import message
from relay.message import OutgoingMessage
from relay.publishers.base import kombu_message


def _messages(count: int) -> list[OutgoingMessage]:
    return [message.build(rows.claimed(n)) for n in range(1, count + 1)]


class _Confirms:
    """Counts publisher confirms on a channel (acks arrive in order, often ``multiple``)."""

    def __init__(self) -> None:
        self.floor = 0
        self.singles: set[int] = set()
        self.nacked = 0

    def on_ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.floor = max(self.floor, tag)
            self.singles = {t for t in self.singles if t > self.floor}
        elif tag > self.floor:
            self.singles.add(tag)

    def on_nack(self, tag: int, multiple: bool) -> None:
        self.nacked += 1
        self.on_ack(tag, multiple)

    @property
    def confirmed(self) -> int:
        return self.floor + len(self.singles)


def _windowed(
    publish: Callable[[OutgoingMessage], None],
    drain: Callable[[], None],
    confirms: _Confirms,
    msgs: list[OutgoingMessage],
    window: int,
) -> float:
    start = time.perf_counter()
    sent = 0
    for i in range(0, len(msgs), window):
        for msg in msgs[i : i + window]:
            publish(msg)
        sent += len(msgs[i : i + window])
        while confirms.confirmed < sent:
            drain()
    elapsed = time.perf_counter() - start
    if confirms.nacked:
        raise RuntimeError(f"broker nacked {confirms.nacked} messages")
    return len(msgs) / elapsed


def kombu_windowed(
    route: fixtures.Route,
    msgs: list[OutgoingMessage],
    window: int,
    before_clock: Callable[[], None] | None = None,
) -> float:
    """Kombu channel in confirm mode, the relay's former publisher calls; msgs/s.
    ``before_clock`` runs once the channel is ready, before the clock starts."""
    with kombu.Connection(route.url) as conn:
        channel: Any = conn.channel()
        channel.confirm_select()
        confirms = _Confirms()
        channel.events["basic_ack"].add(confirms.on_ack)
        channel.events["basic_nack"].add(confirms.on_nack)

        def publish(msg: OutgoingMessage) -> None:
            channel.basic_publish(
                kombu_message(channel, msg),
                exchange=route.exchange_name,
                routing_key=msg.routing_key,
                mandatory=True,
            )

        if before_clock is not None:
            before_clock()
        return _windowed(publish, lambda: conn.drain_events(timeout=10), confirms, msgs, window)


def pyamqp_windowed(route: fixtures.Route, msgs: list[OutgoingMessage], window: int) -> float:
    """Plain py-amqp (no Kombu layer) in confirm mode; msgs/s."""
    parts = urlsplit(route.url)
    conn = amqp.Connection(
        host=f"{parts.hostname}:{parts.port or 5672}",
        userid=unquote(parts.username or "guest"),
        password=unquote(parts.password or "guest"),
    )
    conn.connect()
    try:
        channel: Any = conn.channel()
        channel.confirm_select()
        confirms = _Confirms()
        channel.events["basic_ack"].add(confirms.on_ack)
        channel.events["basic_nack"].add(confirms.on_nack)

        def publish(msg: OutgoingMessage) -> None:
            channel.basic_publish(
                amqp.Message(
                    msg.body,
                    content_type=message.CONTENT_TYPE,
                    content_encoding=message.CONTENT_ENCODING,
                    application_headers=msg.headers,
                    delivery_mode=message.PERSISTENT,
                    message_id=msg.message_id,
                ),
                exchange=route.exchange_name,
                routing_key=msg.routing_key,
                mandatory=True,
            )

        return _windowed(publish, lambda: conn.drain_events(timeout=10), confirms, msgs, window)
    finally:
        conn.close()


def kombu_producer(route: fixtures.Route, msgs: list[OutgoingMessage], confirm: bool) -> float:
    """``kombu.Producer.publish`` one message at a time (``confirm_publish`` waits for each
    ack on AMQP; Redis has no confirms); msgs/s. The exchange is declared on this connection:
    Kombu's virtual transports only route by the type of an exchange they declared."""
    options = {"confirm_publish": True} if confirm else {}
    exchange = kombu.Exchange(route.exchange_name, type="topic", durable=True)
    with kombu.Connection(route.url, transport_options=options) as conn:
        producer = kombu.Producer(conn.default_channel, exchange=exchange)
        start = time.perf_counter()
        for msg in msgs:
            producer.publish(
                msg.body, routing_key=msg.routing_key, retry=False, **message.properties(msg)
            )
        return len(msgs) / (time.perf_counter() - start)


def _repeat(
    route: fixtures.Route, reps: int, count: int, publish: Callable[[], float]
) -> dict[str, Any]:
    rates: list[float] = []
    delivered: list[int] = []
    for _ in range(reps):
        route.purge()
        rates.append(publish())
        delivered.append(route.depth())
    route.purge()
    result = summarize(rates)
    result.update(messages=count, delivered=delivered)
    return result


def publish_ceilings(
    amqp_url: str, redis_url: str, count: int, reps: int, windows: list[int]
) -> dict[str, Any]:
    """Every broker-only publishing mode, ``reps`` times each; msgs/s."""
    msgs = _messages(count)
    few = msgs[: max(100, count // 5)]
    out: dict[str, Any] = {}
    with fixtures.route(amqp_url, "ceiling") as route:
        kombu_windowed(route, msgs[:200], 100)  # warm the connection path and the queue
        for window in windows:
            w = window or count
            label = "all" if window == 0 else str(window)
            out[f"kombu_confirm_window_{label}"] = _repeat(
                route, reps, count, functools.partial(kombu_windowed, route, msgs, w)
            )
        out["pyamqp_confirm_window_1000"] = _repeat(
            route, reps, count, lambda: pyamqp_windowed(route, msgs, 1000)
        )
        out["kombu_confirm_each"] = _repeat(
            route, reps, len(few), lambda: kombu_producer(route, few, confirm=True)
        )
    with fixtures.route(redis_url, "ceiling") as route:
        out["redis_kombu_publish_each"] = _repeat(
            route, reps, len(few), lambda: kombu_producer(route, few, confirm=False)
        )
    return out


def sql_ceiling(
    database_url: str,
    route: fixtures.Route,
    count: int,
    reps: int,
    processes: list[int],
    batches: list[int],
) -> dict[str, Any]:
    """Claim + mark sent with no broker, per (processes, batch size); rows/s."""
    return grid(
        procs.module_command("bench.sqlonly"),
        procs.BENCH_READY,
        database_url,
        route,
        count,
        reps,
        processes,
        batches,
        check_queue=False,
    )
