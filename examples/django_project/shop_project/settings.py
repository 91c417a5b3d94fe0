"""Settings of the example shop.

One variable points Django, Celery and the relay at the same database: ``RELAY_DATABASE_URL``
(a SQLAlchemy URL, as ``relay`` reads it), default ``sqlite:///relay.sqlite3`` in the current
directory, which is also the relay's own default. ``RELAY_BROKER_URL`` (default
``filesystem://``, the relay's embedded broker in ``./relay-broker``) is Celery's broker.
"""

import os
from pathlib import Path

import django
from sqlalchemy import make_url

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"  # noqa: S105  # an example project, never deployed
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
ROOT_URLCONF = "shop_project.urls"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "relay.django",  # the relay's tables (manage.py migrate), its system check
    "shop",
]

RELAY_DATABASE_URL = os.environ.setdefault("RELAY_DATABASE_URL", "sqlite:///relay.sqlite3")
RELAY_BROKER_URL = os.environ.setdefault("RELAY_BROKER_URL", "filesystem://")


def _django_database(url: str) -> dict[str, object]:
    """Django's DATABASES entry for the relay's SQLAlchemy URL."""
    u = make_url(url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        # One writer at a time on SQLite: take the lock at BEGIN and wait for it, as the relay
        # does (transaction_mode needs Django 5.1).
        options: dict[str, object] = {"timeout": 30}
        if django.VERSION >= (5, 1):
            options["transaction_mode"] = "IMMEDIATE"
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": u.database, "OPTIONS": options}
    engines = {"postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}
    return {
        "ENGINE": f"django.db.backends.{engines[backend]}",
        "NAME": u.database,
        "USER": u.username or "",
        "PASSWORD": u.password or "",
        "HOST": u.host or "",
        "PORT": str(u.port or ""),
    }


DATABASES = {"default": _django_database(RELAY_DATABASE_URL)}
