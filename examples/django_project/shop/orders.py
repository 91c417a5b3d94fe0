"""Placing an order: the order, its event and its receipt task commit together or not at all."""

from django.db import transaction

import relay.django
from shop.models import Order
from shop.tasks import send_receipt


def place_order(total: int) -> Order:
    with transaction.atomic():
        order = Order.objects.create(total=total)
        relay.django.enqueue(
            "shop.order.placed", {"id": order.pk, "total": total}, ordering_key=f"order-{order.pk}"
        )
        send_receipt.delay_on_outbox(order.pk)
    return order
