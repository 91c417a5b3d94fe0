from celery import shared_task

from shop.models import Order


@shared_task(name="shop.send_receipt")
def send_receipt(order_id: int) -> None:
    # Sent through the outbox after the commit, so the order is always there to read.
    order = Order.objects.get(pk=order_id)
    print(f"receipt for order {order.pk}: total {order.total}", flush=True)
