"""Celery tasks sent through the outbox: :func:`send_task` writes a task message into the
caller's transaction, and :class:`TransactionalTask` gives every task of an app the
transactional twins of ``delay`` and ``apply_async``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from celery import Celery, Task, current_app
from celery.utils import uuid
from kombu.common import Broadcast
from kombu.utils import json as kombu_json
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from relay.exceptions import EventError
from relay.produce import enqueue as producer
from relay.produce import sync_adapter
from relay.produce.core import Row


def send_task(
    session_or_connection: Session | Connection,
    name: str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    countdown: float | None = None,
    eta: datetime | None = None,
    expires: float | datetime | None = None,
    queue: str | None = None,
    routing_key: str | None = None,
    headers: Mapping[str, Any] | None = None,
    ordering_key: str | None = None,
    app: Celery | None = None,
) -> str:
    """Write Celery task ``name`` into the outbox in the caller's transaction; returns its
    task id. The relay publishes it once the transaction committed and the countdown or
    ``eta`` is due, as a standard protocol-2 message routed as ``app.send_task`` would route
    it (resolved now, from ``app``, default the current app), with the same task id on every
    attempt. ``expires`` becomes the row's ``expires_at``: a task claimed past it is
    dead-lettered (``failed``, "expired at …") unpublished, as any event past its deadline.
    """
    options = TaskOptions(
        countdown=countdown, eta=eta, expires=expires, queue=queue, routing_key=routing_key
    )
    task_id, row = task_row(
        name, args, kwargs, options, headers=headers, ordering_key=ordering_key, app=app
    )
    sync_adapter.write(session_or_connection, row.statement, row.values, producer.default().wake)
    return task_id


class TaskOptions(NamedTuple):
    """How ``send_task`` times and routes a task: the options of ``app.send_task`` that the
    outbox keeps (every transactional form takes them, with the same names and defaults)."""

    countdown: float | None = None
    eta: datetime | None = None
    expires: float | datetime | None = None
    queue: str | None = None
    routing_key: str | None = None


class TaskMessage(NamedTuple):
    """A Celery task as the outbox stores it: what every transactional ``send_task`` writes."""

    task_id: str
    #: The protocol-2 body ``[args, kwargs, embed]`` as JSON will carry it.
    body: Any
    #: The route, protocol headers and properties (the row's task header).
    task: dict[str, Any]
    #: Seconds until due (countdown or eta), or None.
    delay: float | None
    #: The task's ``expires`` as an aware time (the row's ``expires_at``), or None.
    expires_at: datetime | None = None


def task_message(
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    options: TaskOptions,
    app: Celery | None = None,
) -> TaskMessage:
    """Build task ``name``'s message as :func:`send_task` writes it (routed now, from
    ``app``, default the current app); EventError naming the field for bad input."""
    app = current_app if app is None else app
    if app.conf.task_serializer != "json":
        raise EventError(
            "task_serializer", f"is {app.conf.task_serializer!r}: only json is relayed"
        )
    call_args, call_kwargs = tuple(_sequence(args)), dict(kwargs or {})
    _json_ready("args", call_args)  # refused here, naming the field, before anything is built
    _json_ready("kwargs", call_kwargs)
    delay = _delay_of(options.countdown, options.eta)
    given = {"queue": options.queue, "routing_key": options.routing_key}
    route = _route(
        app,
        app.amqp.router.route({k: v for k, v in given.items() if v}, name, call_args, call_kwargs),
    )
    task_id = uuid()
    message = app.amqp.as_task_v2(task_id, name, call_args, call_kwargs, expires=options.expires)
    task = {**route, "headers": message.headers, "properties": message.properties}
    body = _json_ready("args", list(message.body))
    return TaskMessage(task_id, body, task, delay, _deadline(message.headers.get("expires")))


def task_row(
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    options: TaskOptions,
    *,
    headers: Mapping[str, Any] | None,
    ordering_key: str | None,
    app: Celery | None,
) -> tuple[str, Row]:
    """Task ``name``'s message (:func:`task_message`) as the outbox row every transactional
    ``send_task`` writes, through its own adapter: (the task id, the row)."""
    message = task_message(name, args, kwargs, options, app)
    row = producer.default().task(
        name,
        message.body,
        message.task,
        headers=headers,
        ordering_key=ordering_key,
        delay=message.delay,
        expires_at=message.expires_at,
    )
    return message.task_id, row


class TransactionalTask(Task):  # type: ignore[type-arg]  # any task's arguments and result
    """A task class with outbox shortcuts: ``app = Celery(..., task_cls=TransactionalTask)``
    (or ``"relay.celery:TransactionalTask"``) gives every task of the app
    ``add.delay_in(session, 2, 3)`` and ``add.apply_async_in(session, (2, 3), countdown=60)``,
    the transactional twins of ``delay`` and ``apply_async`` (see :func:`send_task`)."""

    def delay_in(
        self, session_or_connection: Session | Connection, *args: Any, **kwargs: Any
    ) -> str:
        return self.apply_async_in(session_or_connection, args, kwargs)

    def apply_async_in(
        self,
        session_or_connection: Session | Connection,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> str:
        return send_task(session_or_connection, self.name, args, kwargs, app=self.app, **options)


def _sequence(args: Sequence[Any]) -> Sequence[Any]:
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise EventError("args", f"must be a list or tuple, not {type(args).__name__}")
    return args


def _json_ready(field: str, value: Any) -> Any:
    """``value`` as the app's JSON serializer (Kombu's) will write it; EventError if it cannot."""
    try:
        return json.loads(kombu_json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise EventError(
            field, f"is not serializable with the task serializer (json): {exc}"
        ) from None


def _delay_of(countdown: float | None, eta: datetime | None) -> float | None:
    if countdown is not None and eta is not None:
        raise EventError("eta", "and countdown are exclusive")
    if eta is None:
        return countdown
    if eta.tzinfo is None:
        raise EventError("eta", "must be timezone-aware")
    return max(0.0, (eta - datetime.now(UTC)).total_seconds())


def _deadline(expires: str | None) -> datetime | None:
    """The ``expires`` header Celery wrote (ISO 8601) as an aware time; a naive one is UTC, as
    the relay has always read it."""
    if not expires:
        return None
    deadline = datetime.fromisoformat(expires)
    return deadline if deadline.tzinfo is not None else deadline.replace(tzinfo=UTC)


def _route(app: Celery, options: Mapping[str, Any]) -> dict[str, Any]:
    """Exchange, routing key and the queue to declare, resolved as ``send_task`` resolves them
    (an unnamed exchange or key on a direct exchange becomes the queue's name on the default
    exchange)."""
    queue: Any = options.get("queue")
    exchange = options.get("exchange")
    routing_key, exchange_type = options.get("routing_key"), options.get("exchange_type")
    name = None
    if queue is None and exchange is None:
        queue = app.amqp.default_queue
    if queue is not None:
        name, queue = (
            (queue, app.amqp.queues[queue]) if isinstance(queue, str) else (queue.name, queue)
        )
    if exchange_type is None:
        exchange_type = getattr(getattr(queue, "exchange", None), "type", None) or "direct"
    exchange_name = getattr(exchange, "name", exchange)
    if (not exchange_name or not routing_key) and exchange_type == "direct":
        exchange_name, routing_key = "", name
    elif exchange_name is None:
        exchange_name = queue.exchange.name or app.amqp.default_exchange.name
        routing_key = routing_key or queue.routing_key or app.conf.task_default_routing_key
    declare = None
    if queue is not None and not isinstance(queue, Broadcast):
        declare = {
            "queue": queue.name,
            "exchange": queue.exchange.name if queue.exchange else "",
            "exchange_type": queue.exchange.type if queue.exchange else "direct",
            "routing_key": queue.routing_key or "",
            "durable": bool(queue.durable),
            "arguments": dict(queue.queue_arguments or {}),
        }
    return {"exchange": exchange_name, "routing_key": routing_key, "declare": declare}
