"""``relay purge-sent``: delete sent rows older than a retention."""

from __future__ import annotations

import argparse

from relay.commands import command
from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import DATABASE_ONLY
from relay.store.operations.filters import parse_duration


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--older-than",
        type=parse_duration,
        required=True,
        metavar="DURATION",
        help="e.g. 7d, 12h, 3600",
    )
    p.add_argument("--batch-size", type=int, default=1000)


def _run(settings: Settings, args: argparse.Namespace) -> int:
    deleted = command.store(settings).purge_sent(args.older_than, batch_size=args.batch_size)
    print(f"{deleted} sent rows deleted")
    return 0


COMMAND = Command(
    "purge-sent", "delete sent rows older than a retention", _arguments, _run, uses=DATABASE_ONLY
)
