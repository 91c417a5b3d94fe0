"""``relay inbox purge|dead|redrive``: consumers' inbox retention and dead letters."""

from __future__ import annotations

import argparse

from relay.commands import command
from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import DATABASE_ONLY
from relay.store.operations.filters import parse_duration


def _arguments(p: argparse.ArgumentParser) -> None:
    isub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ip = isub.add_parser("purge", help="delete inbox rows received longer ago than a duration")
    ip.add_argument("--older-than", type=parse_duration, required=True, metavar="DURATION")
    ip.add_argument("--batch-size", type=int, default=1000)
    for name, verb in (("dead", "list the dead letters of"), ("redrive", "re-drive")):
        ip = isub.add_parser(name, help=f"{verb} an event queue (<QUEUE>.dead on the broker)")
        ip.add_argument("queue", metavar="QUEUE", help="the event queue (on_event's queue=)")
        ip.add_argument("--limit", type=int, default=100 if name == "dead" else 1_000_000)


def _run(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "purge":
        return _purge(settings, args)

    from relay.consume import deadletters
    from relay.publishers import transports

    url = settings.events_connection_url
    with transports.kombu_connection(url) as conn:
        if args.action == "redrive":
            moved = deadletters.redrive(conn, args.queue, args.limit)
            print(f"{moved} dead letters back on {args.queue}")
            return 0
        letters = deadletters.peek(conn, args.queue, args.limit)
    if not letters:
        print(f"no dead letters in {deadletters.dead_queue_name(args.queue)}")
    for d in letters:
        print("\t".join((d.message_id, d.routing_key, f"attempts {d.attempts}", d.error)))
    return 0


def _purge(settings: Settings, args: argparse.Namespace) -> int:
    store, deleted = command.store(settings), 0
    try:
        while True:
            n = store.purge_inbox(args.older_than, args.batch_size)
            deleted += n
            if n < args.batch_size:
                break
    finally:
        store.dispose()
    print(f"{deleted} inbox rows deleted")
    return 0


COMMAND = Command(
    "inbox",
    "consumers' inbox retention and dead letters",
    _arguments,
    _run,
    uses=DATABASE_ONLY | {"broker_url", "events_url"},
)
