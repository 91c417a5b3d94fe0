"""An asyncio endpoint that writes an order and its event in one transaction (``relay.aio``).

Starlette on SQLAlchemy's asyncio API; any async driver relay.aio supports. In an empty
directory, with ``pip install "celery-outbox-relay[asyncio]" starlette uvicorn``::

    relay migrate                                  # the outbox, in ./relay.sqlite3
    python path/to/examples/async_orders.py bind   # a queue for order.* events, ./relay-broker
    uvicorn --app-dir path/to/examples async_orders:app
    curl -X POST localhost:8000/orders -d '{"customer": "c-1", "total": "9.90"}'
    relay dispatch --once                          # publishes order.placed
    python path/to/examples/async_orders.py read   # customer-c-1 1 {'order_id': 1, ...}

``ORDERS_DATABASE_URL`` picks the database (default ``sqlite+aiosqlite:///relay.sqlite3``, the
file ``relay migrate`` uses by default; ``postgresql+asyncpg://…``, ``postgresql+psycopg://…``
or ``mysql+asyncmy://…`` work the same once ``relay migrate`` ran there). A customer's events
are its ordering key: the relay publishes them in the order their transactions committed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal, InvalidOperation

import kombu
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import relay.aio
from relay import transport_options
from relay.exceptions import EventError

DATABASE_URL = os.environ.get("ORDERS_DATABASE_URL", "sqlite+aiosqlite:///relay.sqlite3")
BROKER_URL = os.environ.get("RELAY_BROKER_URL", "filesystem://")  # the relay's defaults
EXCHANGE = os.environ.get("RELAY_EXCHANGE", "outbox")

metadata = sa.MetaData()
orders = sa.Table(
    "shop_orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("customer", sa.String(64), nullable=False),
    sa.Column("total", sa.Numeric(10, 2), nullable=False),
)

engine = create_async_engine(DATABASE_URL)
sessions = async_sessionmaker(engine, expire_on_commit=False)


async def place_order(request: Request) -> JSONResponse:
    """``POST /orders {"customer": …, "total": …}``: the order and ``order.placed`` commit
    together, or neither does."""
    try:
        body = await request.json()
        customer, total = str(body["customer"]), Decimal(str(body["total"]))
    except (ValueError, KeyError, TypeError, InvalidOperation):
        return JSONResponse({"error": 'expected {"customer": str, "total": number}'}, 400)
    session: AsyncSession
    try:
        async with sessions() as session, session.begin():
            inserted = await session.execute(orders.insert().values(customer=customer, total=total))
            order_id = int(inserted.inserted_primary_key[0])  # type: ignore[index]
            event_id = await relay.aio.enqueue(
                session,
                "order.placed",
                {"order_id": order_id, "customer": customer, "total": str(total)},
                ordering_key=f"customer-{customer}",
            )
    except EventError as exc:  # e.g. a customer id too long for a key: the order rolled back
        return JSONResponse({"error": str(exc)}, 400)
    return JSONResponse({"order_id": order_id, "event_id": event_id}, 201)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Create the example's own table (the outbox is ``relay migrate``'s)."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    yield
    await engine.dispose()


app = Starlette(routes=[Route("/orders", place_order, methods=["POST"])], lifespan=lifespan)


def _events_queue(channel: object) -> kombu.Queue:
    exchange = kombu.Exchange(EXCHANGE, "topic", durable=True)
    return kombu.Queue("shop-events", exchange, routing_key="order.#", durable=True)(channel)


def main(command: str) -> None:
    """``bind``: declare the queue the relay's ``order.*`` events land in; ``read``: print and
    remove what is in it."""
    options = transport_options(BROKER_URL)
    with kombu.Connection(BROKER_URL, transport_options=options) as conn:
        queue = _events_queue(conn.default_channel)
        if command == "bind":
            queue.declare()
            return
        while (message := queue.get(no_ack=True)) is not None:
            headers = message.headers
            print(headers.get("ordering_key"), headers.get("ordering_seq"), message.payload)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "read")
