"""Trace context from ``enqueue`` to the consumer, with OpenTelemetry (extra ``[otel]``).

- :func:`capture`: ``enqueue`` (and ``relay.celery.send_task``) store the active span's W3C
  context (``traceparent``, ``tracestate``) in the row's headers.
- :class:`PublishTracer`: the relay publishes each such row under a PRODUCER span that continues
  it (``publish <exchange>``, messaging semantic conventions) and injects that span's context
  into the message headers; a batch gets one more PRODUCER span carrying
  ``messaging.batch.message_count`` and a link to each message's span.
- :func:`consuming`: ``relay.consume.consumer`` handles a message under a CONSUMER span whose
parent is   the publish span and which links to it, so the enqueue, the publish and the handler are
one   trace.

Without OpenTelemetry installed none of this imports anything or changes a header: each entry
point costs one check of a cached flag.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from relay.observe.observers import Observer, Send
from relay.records import ClaimedEvent, PublishResult

#: The headers of the W3C trace context, the only ones captured and injected.
TRACE_HEADERS = ("traceparent", "tracestate")
TRACER_NAME = "relay"

log = logging.getLogger(__name__)

_UNSET: Any = object()
_api_cache: Any = _UNSET


class _Api:
    """The OpenTelemetry API pieces the relay uses, imported once."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.w3c = TraceContextTextMapPropagator()


def _api() -> _Api | None:
    global _api_cache  # resolved once per process: installed or not
    if _api_cache is _UNSET:
        try:
            importlib.import_module("opentelemetry.trace")
        except ImportError:
            _api_cache = None
        else:
            _api_cache = _Api()
    result: _Api | None = _api_cache
    return result


def available() -> bool:
    """Whether the OpenTelemetry API is installed."""
    return _api() is not None


def capture(headers: dict[str, Any] | None) -> dict[str, Any] | None:
    """``headers`` plus the active span's ``traceparent``/``tracestate`` (never replacing a
    value the caller set); ``headers`` itself when no span is active or OTel is absent."""
    api = _api()
    if api is None:
        return headers
    if not api.trace.get_current_span().get_span_context().is_valid:
        return headers
    carrier: dict[str, str] = {}
    api.w3c.inject(carrier)
    if not carrier:
        return headers
    return {**carrier, **(headers or {})}


def messaging_system(url: str) -> str:
    """``messaging.system`` of an events URL: rabbitmq, redis, nats, or kombu for the rest."""
    scheme = urlsplit(url).scheme.split("+")[0]
    if scheme in ("amqp", "amqps", "pyamqp"):
        return "rabbitmq"
    if scheme in ("redis", "rediss"):
        return "redis"
    if scheme in ("nats", "tls"):
        return "nats"
    return "kombu"


def _destination(event: ClaimedEvent, exchange: str) -> tuple[str, str]:
    """(exchange, routing key) the message of ``event`` goes to."""
    task = (event.headers or {}).get("x-relay-task")
    if task is not None:
        return task.get("exchange") or "", task.get("routing_key") or ""
    return exchange, event.event_type


class PublishTracer(Observer):
    """Publishes traced rows under PRODUCER spans that continue their enqueue's trace."""

    def __init__(self, exchange: str, system: str = "rabbitmq") -> None:
        self.exchange, self.system = exchange, system

    def publish(self, events: list[ClaimedEvent], send: Send) -> PublishResult:
        api = _api()
        traced = [i for i, e in enumerate(events) if _carrier(e.headers)]
        if api is None or not traced:
            return send(events)
        from opentelemetry.trace import Status, StatusCode

        spans: dict[int, Any] = {}
        try:
            out, batch = self._start(api, events, traced, spans)
        except Exception:  # tracing must never stop a batch: publish it untraced
            log.warning("tracing the publish failed; publishing untraced", exc_info=True)
            for span in spans.values():
                span.end()
            return send(events)
        verdicts: dict[int, str | None] = {}
        try:
            result = send(out)
            verdicts.update({e.id: None for e in result.confirmed})
            verdicts.update({e.id: why for e, why in result.rejected})
            error = str(result.error or "broker unavailable")
            verdicts.update({e.id: error for e in result.unavailable})
            return result
        except Exception as exc:
            batch.record_exception(exc)
            raise
        finally:
            for row_id, span in spans.items():
                why = verdicts.get(row_id, "not published")
                if why is not None:
                    span.set_status(Status(StatusCode.ERROR, why))
                span.end()
            batch.end()

    def _start(
        self, api: _Api, events: list[ClaimedEvent], traced: list[int], spans: dict[int, Any]
    ) -> tuple[list[ClaimedEvent], Any]:
        """Start a PRODUCER span per traced event (into ``spans``) and the batch's; returns the
        events to send, traced ones carrying their span's context, and the batch span."""
        from opentelemetry.trace import Link, SpanKind

        tracer = api.trace.get_tracer(TRACER_NAME)
        out = list(events)
        for i in traced:
            event = events[i]
            exchange, routing_key = _destination(event, self.exchange)
            span = tracer.start_span(
                f"publish {exchange or '(default)'}",
                context=api.w3c.extract(_carrier(event.headers)),
                kind=SpanKind.PRODUCER,
                attributes={
                    "messaging.system": self.system,
                    "messaging.operation.type": "send",
                    "messaging.operation.name": "publish",
                    "messaging.destination.name": exchange,
                    "messaging.rabbitmq.destination.routing_key": routing_key,
                    "messaging.message.id": event.event_id or str(event.id),
                },
            )
            spans[event.id] = span
            carrier: dict[str, str] = {}
            api.w3c.inject(carrier, context=api.trace.set_span_in_context(span))
            out[i] = dataclasses.replace(event, headers={**(event.headers or {}), **carrier})
        batch = tracer.start_span(
            f"publish {self.exchange}",
            kind=SpanKind.PRODUCER,
            links=[Link(s.get_span_context()) for s in spans.values()],
            attributes={
                "messaging.system": self.system,
                "messaging.operation.type": "send",
                "messaging.operation.name": "publish",
                "messaging.destination.name": self.exchange,
                "messaging.batch.message_count": len(events),
            },
        )
        return out, batch


def _carrier(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """The W3C trace headers among ``headers`` that are strings (a row written by plain SQL
    may hold anything there); empty when there is no ``traceparent``."""
    if not headers or not isinstance(headers.get("traceparent"), str):
        return {}
    return {k: headers[k] for k in TRACE_HEADERS if isinstance(headers.get(k), str)}


@contextlib.contextmanager
def consuming(message: Any, queue: str) -> Iterator[Callable[[str], None]]:
    """Handle ``message`` under a CONSUMER span continuing its publish span (when it carries
    a ``traceparent`` and OTel is installed); yields ``note(outcome)`` to record the outcome."""
    api = _api()
    headers: Mapping[str, Any] = getattr(message, "headers", None) or {}
    if api is None or not _carrier(headers):
        yield _ignore
        return
    from opentelemetry.trace import Link, SpanKind

    parent = api.w3c.extract(_carrier(headers))
    publish = api.trace.get_current_span(parent).get_span_context()
    properties = getattr(message, "properties", None) or {}
    delivery = getattr(message, "delivery_info", None) or {}
    tracer = api.trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"process {queue}",
        context=parent,
        kind=SpanKind.CONSUMER,
        links=[Link(publish)],
        attributes={
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": str(delivery.get("exchange") or queue),
            "messaging.consumer.group.name": queue,
            "messaging.message.id": str(properties.get("message_id") or ""),
        },
    ) as span:
        yield lambda outcome: span.set_attribute("relay.outcome", outcome)


def _ignore(_: str) -> None:
    return None


__all__ = ["PublishTracer", "available", "capture", "consuming", "messaging_system"]
