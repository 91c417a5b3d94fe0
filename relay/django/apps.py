"""The ``relay.django`` application: label ``relay``, its migrations and its system check."""

from __future__ import annotations

from django.apps import AppConfig


class RelayConfig(AppConfig):  # type: ignore[misc]  # Django ships no type information
    name = "relay.django"
    label = "relay"
    verbose_name = "Outbox relay"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from relay.django import checks  # registers the check

        del checks
