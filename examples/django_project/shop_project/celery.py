"""The shop's Celery app: its own tasks, the relay's (``relay.celery.install``) and a handler of
the shop's events, on the broker and database of the settings, so one
``celery -A shop_project worker -B`` runs all of them."""

import os

from celery import Celery

from relay import create_engine, transport_options
from relay.celery import install, on_event
from relay.config import Settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_project.settings")

from django.conf import settings

app = Celery("shop", task_cls="relay.django:TransactionalTask")
app.conf.update(
    broker_url=settings.RELAY_BROKER_URL,
    broker_transport_options=transport_options(settings.RELAY_BROKER_URL),
    task_default_queue="shop",
    task_ignore_result=True,
)
# The relay's tasks, and the wake-up: a commit that enqueued events asks a worker to relay them.
install(app, Settings.from_env())
app.autodiscover_tasks(["shop"])


@on_event(
    app, "shop.order.#", queue="shop.events", engine=create_engine(settings.RELAY_DATABASE_URL)
)
def order_placed(connection, event):  # type: ignore[no-untyped-def]
    print(f"event {event.event_type}: {event.payload}", flush=True)
