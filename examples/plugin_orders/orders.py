"""An order service whose tests use the relay's pytest plugin (``test_orders.py`` beside it).

``place_order`` writes the order and its ``order.placed`` event in one transaction; an order
over the customer's credit limit is refused after both were written, so the transaction rolls
back and no event exists. Run its tests with::

    pytest examples/plugin_orders            # the relay installed: the plugin is loaded
    pytest -p relay.testing.pytest_plugin examples/plugin_orders   # from a checkout, not installed
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay

metadata = sa.MetaData()
orders = sa.Table(
    "orders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("customer", sa.String(64), nullable=False),
    sa.Column("total_cents", sa.Integer, nullable=False),
)

#: The most one order may cost.
CREDIT_LIMIT_CENTS = 100_000


class OverCreditLimit(Exception):
    """The order costs more than the customer may spend: nothing of it is kept."""


def place_order(engine: sa.Engine, customer: str, total_cents: int) -> int:
    """Write the order and its event in one transaction; returns the order's id."""
    with Session(engine) as session, session.begin():
        order_id = session.execute(
            sa.insert(orders).values(customer=customer, total_cents=total_cents)
        ).inserted_primary_key[0]
        relay.enqueue(
            session,
            "order.placed",
            {"order": order_id, "customer": customer, "total_cents": total_cents},
            ordering_key=f"customer-{customer}",
        )
        if total_cents > CREDIT_LIMIT_CENTS:  # checked last: the rollback undoes both rows
            raise OverCreditLimit(f"{total_cents} cents is over the limit")
        return int(order_id)
