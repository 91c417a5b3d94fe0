"""OpenTelemetry end to end on PostgreSQL and RabbitMQ: the enqueue's span, the relay's PRODUCER
span and the consumer's CONSUMER span are one trace (in-memory span exporter)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import kombu
import pytest
import sqlalchemy as sa
from celery import Celery
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind
from sqlalchemy.orm import Session

import relay
from relay.celery import send_task
from relay.config import Settings
from relay.consume.consumer import Event, EventConsumer, QueueHandlers
from relay.dispatch.dispatcher import Dispatcher
from relay.observe import tracing
from relay.publishers import message
from relay.records import ClaimedEvent
from tests.support.env import wait_until
from tests.support.rows import rows

pytestmark = pytest.mark.timeout(120)

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The process's SDK tracer provider (set once: OpenTelemetry refuses a second one)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _one(found: list[ReadableSpan], name: str) -> ReadableSpan:
    matching = [s for s in found if s.name == name]
    assert len(matching) == 1, [s.name for s in found]
    return matching[0]


def test_one_trace_from_enqueue_to_the_consumer(
    spans: InMemorySpanExporter,
    pg_url: str,
    pg_engine: sa.Engine,
    amqp_url: str,
    exchange_name: str,
) -> None:
    """An event enqueued inside a span is published under a PRODUCER span whose parent is that
    span (messaging attributes, its context in the message headers) and handled under a CONSUMER
    span that is its child and links to it: one trace id throughout. An event enqueued with no
    span active carries no trace context and gets no span of its own."""
    tracer = trace.get_tracer("shop")
    queue = f"{exchange_name}.traced"
    seen: dict[str, SpanContext] = {}
    handled = threading.Event()

    def handle(conn: sa.Connection, event: Event) -> None:
        seen[event.event_type] = trace.get_current_span().get_span_context()
        if len(seen) == 2:
            handled.set()

    handlers = QueueHandlers(queue, pg_engine)
    handlers.add("shop.#", handle)
    with kombu.Connection(amqp_url) as conn:
        handlers.declare(conn.channel(), exchange_name)  # bound before the first publish
    with (
        tracer.start_as_current_span("checkout") as checkout,
        Session(pg_engine) as session,
        session.begin(),
    ):
        traced_id = relay.enqueue(session, "shop.order.paid", {"order": 1})
    with Session(pg_engine) as session, session.begin():
        plain_id = relay.enqueue(session, "shop.audit", {"order": 1})
    stored = rows(pg_engine, traced_id, plain_id)
    assert stored[plain_id]["headers"] is None
    assert stored[traced_id]["headers"]["traceparent"].split("-")[1:3] == [
        f"{checkout.get_span_context().trace_id:032x}",
        f"{checkout.get_span_context().span_id:016x}",
    ]

    settings = Settings(database_url=pg_url, broker_url=amqp_url, exchange=exchange_name)
    dispatcher = Dispatcher.from_settings(
        settings, observer=tracing.PublishTracer(exchange_name, "rabbitmq")
    )
    try:
        report = dispatcher.drain(budget_seconds=30)
    finally:
        dispatcher.close()
        dispatcher.publisher.close()
        dispatcher.store.dispose()
    assert report.sent == 2
    stop = threading.Event()
    consumer = EventConsumer(amqp_url, exchange_name, handlers)
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(handled.is_set, 30, "both events handled")
    finally:
        stop.set()
        thread.join(timeout=10)

    found = list(spans.get_finished_spans())
    root = _one(found, "checkout")
    publishes = [s for s in found if s.name == f"publish {exchange_name}"]
    publish = next(s for s in publishes if s.parent is not None and s.parent.is_valid)
    batch = next(s for s in publishes if s is not publish)
    process = _one(found, f"process {queue}")
    trace_id = root.context.trace_id
    assert {publish.context.trace_id, process.context.trace_id} == {trace_id}
    assert publish.kind is SpanKind.PRODUCER
    assert publish.parent is not None
    assert publish.parent.span_id == root.context.span_id
    attributes: dict[str, Any] = dict(publish.attributes or {})
    assert attributes["messaging.system"] == "rabbitmq"
    assert attributes["messaging.destination.name"] == exchange_name
    # The message id is the row's event id (migration 0010), not its outbox id.
    with pg_engine.connect() as conn:
        traced_event_id = conn.execute(
            sa.text("SELECT event_id FROM outbox WHERE id = :id"), {"id": traced_id}
        ).scalar_one()
    assert attributes["messaging.message.id"] == traced_event_id
    assert batch.kind is SpanKind.PRODUCER
    assert dict(batch.attributes or {})["messaging.batch.message_count"] == 2
    assert [link.context.span_id for link in batch.links] == [publish.context.span_id]
    assert process.kind is SpanKind.CONSUMER
    assert process.parent is not None
    assert process.parent.span_id == publish.context.span_id
    assert [link.context.span_id for link in process.links] == [publish.context.span_id]
    assert dict(process.attributes or {})["messaging.message.id"] == traced_event_id
    assert seen["shop.order.paid"].span_id == process.context.span_id
    assert not seen["shop.audit"].is_valid, "an untraced event is handled without a span"
    assert len(publishes) == 2


def test_send_task_carries_the_trace_context_into_the_task_message(
    spans: InMemorySpanExporter, pg_engine: sa.Engine
) -> None:
    """A Celery task written through the outbox inside a span stores the span's traceparent,
    and the task message the relay builds carries it in its headers (where OpenTelemetry's
    Celery instrumentation looks)."""
    app = Celery("traced", set_as_current=False)
    with (
        trace.get_tracer("shop").start_as_current_span("signup") as span,
        Session(pg_engine) as session,
        session.begin(),
    ):
        send_task(session, "emails.welcome", (42,), app=app)
    (row,) = rows(pg_engine).values()
    traceparent = row["headers"]["traceparent"]
    assert traceparent.split("-")[1] == f"{span.get_span_context().trace_id:032x}"
    keys = ("id", "event_type", "payload", "headers", "ordering_key")
    event = ClaimedEvent(*(row[k] for k in keys), attempt=1, created_at=row["created_at"])
    built = message.build(event)
    assert built.headers["traceparent"] == traceparent
    assert "x-relay-task" not in built.headers


def test_a_caller_set_traceparent_is_kept(
    spans: InMemorySpanExporter, pg_engine: sa.Engine
) -> None:
    """enqueue never replaces a trace context the caller put in the headers itself."""
    mine = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with (
        trace.get_tracer("shop").start_as_current_span("other"),
        Session(pg_engine) as session,
        session.begin(),
    ):
        row_id = relay.enqueue(session, "shop.x", {}, headers={"traceparent": mine})
    assert rows(pg_engine, row_id)[row_id]["headers"]["traceparent"] == mine
