"""A Celery application that consumes the relay's events, for the acceptance tests.

``celery -A tests.support.events_app worker`` with ``EVENTS_TEST_*`` variables: the database of
the handled rows and the inbox, the broker, the exchange and the queue. The handler writes one
row per event into ``handled`` (no unique constraint: a duplicate effect would show as two
rows) and raises on a payload marked ``poison`` until its id is listed in ``cured``.
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from celery import Celery

from relay.celery import on_event
from relay.consume.consumer import Event
from relay.store.engine import create_engine

metadata = sa.MetaData()
handled = sa.Table(
    "handled",
    metadata,
    sa.Column("pk", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("message_id", sa.String(64), nullable=False),
    sa.Column("n", sa.Integer, nullable=False),
)
#: Poison events whose id is listed here are cured: the handler processes them (a re-drive).
cured = sa.Table("cured", metadata, sa.Column("message_id", sa.String(64), primary_key=True))

app = Celery("events-test", broker=os.environ.get("EVENTS_TEST_BROKER", "memory://"))
app.conf.update(worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)
engine = create_engine(os.environ.get("EVENTS_TEST_DB", "sqlite://"))


@on_event(
    app,
    "order.*",
    queue=os.environ.get("EVENTS_TEST_QUEUE", "events-test"),
    engine=engine,
    exchange=os.environ.get("EVENTS_TEST_EXCHANGE", "outbox"),
    max_attempts=3,
)
def handle(connection: sa.Connection, event: Event) -> None:
    if event.payload.get("poison"):
        known = sa.select(cured.c.message_id).where(cured.c.message_id == event.id)
        if connection.execute(known).first() is None:
            raise RuntimeError(f"poison event {event.id}")
    connection.execute(sa.insert(handled).values(message_id=event.id, n=event.payload["n"]))
