"""The example shop: a Django project whose orders and their events share one transaction."""

from shop_project.celery import app

__all__ = ["app"]
