"""``relay migrate``: create or upgrade the outbox table."""

from __future__ import annotations

import argparse

from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import DATABASE_ONLY
from relay.config.urls import redact


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--revision", default="head", help="target revision (default: head)")


def _run(settings: Settings, args: argparse.Namespace) -> int:
    from relay.publishers import transports
    from relay.store.schema import upgrade

    upgrade.upgrade(settings.database_url, args.revision)
    print(f"outbox schema at {args.revision} on {redact(settings.database_url)}")
    # A consumer may start before any relay process: give it the embedded broker's folders.
    for url in {settings.broker_url, settings.events_connection_url}:
        folder = transports.create_embedded_folders(url)
        if folder is not None:
            print(f"embedded broker folders ready in {folder}")
    return 0


COMMAND = Command(
    "migrate",
    "create or upgrade the outbox table",
    _arguments,
    _run,
    uses=DATABASE_ONLY | {"broker_url", "events_url"},
)
