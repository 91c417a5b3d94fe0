from django.core.management.base import BaseCommand

from shop.orders import place_order


class Command(BaseCommand):
    help = "Place an order: the order, its event and its receipt task in one atomic() block."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("total", type=int)

    def handle(self, *args, **options):  # type: ignore[no-untyped-def]
        order = place_order(options["total"])
        self.stdout.write(f"order {order.pk} placed (total {order.total}) with its event and task")
