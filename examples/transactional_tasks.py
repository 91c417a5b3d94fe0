"""Transactional Celery tasks on the embedded defaults (SQLite + ``filesystem://``), no server.

In an empty directory::

    python examples/transactional_tasks.py      # two orders: one commits, one rolls back
    relay dispatch --once                       # the relay publishes the committed task
    celery -A transactional_tasks worker -P solo -Q shop --loglevel=INFO
                                                # (with examples/ on PYTHONPATH) runs it:
                                                # "charged order 1", never order 2

The task is a row of the order's transaction (``charge.delay_in(conn, order_id)``): it exists
exactly when the order does, and the worker always finds the order committed.
"""

from __future__ import annotations

import sqlalchemy as sa
from celery import Celery

from relay import create_engine, migrate, transport_options

DATABASE_URL = "sqlite:///relay.sqlite3"  # the relay's default RELAY_DATABASE_URL
BROKER_URL = "filesystem://"  # the relay's default RELAY_BROKER_URL: ./relay-broker

app = Celery("shop", broker=BROKER_URL, task_cls="relay.celery:TransactionalTask")
app.conf.update(
    task_default_queue="shop",
    broker_transport_options=transport_options(BROKER_URL),
    task_ignore_result=True,
)
engine = create_engine(DATABASE_URL)
orders = sa.Table(
    "orders",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("total", sa.Integer, nullable=False),
)


@app.task(name="shop.charge")
def charge(order_id: int) -> None:
    with engine.connect() as conn:
        total = conn.execute(sa.select(orders.c.total).where(orders.c.id == order_id)).scalar()
    print(f"charged order {order_id}: {total}", flush=True)


def place_orders() -> None:
    migrate(DATABASE_URL)
    orders.metadata.create_all(engine)
    with engine.begin() as conn:  # commits: the order and its task
        order_id = conn.execute(sa.insert(orders).values(id=1, total=42)).inserted_primary_key[0]
        charge.delay_in(conn, order_id)
    with engine.connect() as conn, conn.begin() as tx:  # rolls back: neither exists
        conn.execute(sa.insert(orders).values(id=2, total=7))
        charge.delay_in(conn, 2)
        tx.rollback()
    print("order 1 committed with its task; order 2 rolled back with its task")


if __name__ == "__main__":
    place_orders()
