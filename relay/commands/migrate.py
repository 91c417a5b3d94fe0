"""``relay migrate``: create or upgrade the outbox schema online, print its SQL for a DBA
(``--sql``), or say whether it is at head (``--check``, for deploy pipelines)."""

from __future__ import annotations

import argparse

from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import DATABASE_ONLY
from relay.config.urls import redact


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--revision", default="head", help="target revision (default: head)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--sql",
        action="store_true",
        help="print the SQL from the database's revision (or --from) to the target; change nothing",
    )
    mode.add_argument(
        "--check",
        action="store_true",
        help="exit 0 when the schema is at head, 1 when older, 2 when a later release's "
        "(naming both revisions); change nothing",
    )
    p.add_argument(
        "--from",
        dest="start",
        metavar="REVISION",
        help="with --sql: the revision the database is at (default: read it; base if none)",
    )
    p.add_argument(
        "--lock-timeout",
        type=int,
        default=300,
        metavar="MS",
        help="the longest one DDL statement waits for a lock, and so the longest a writer "
        "waits behind it (default 300; MariaDB: whole seconds, rounded down)",
    )
    p.add_argument(
        "--max-lock-wait",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="give up after retrying lock timeouts this long in all (default 300)",
    )


def _run(settings: Settings, args: argparse.Namespace) -> int:
    from relay.publishers import transports
    from relay.store.schema import upgrade

    if args.check:
        return _check(settings.database_url)
    if args.sql:
        start = args.start if args.start is not None else upgrade.current(settings.database_url)
        upgrade.write_sql(settings.database_url, start, args.revision)
        return 0
    upgrade.upgrade(
        settings.database_url,
        args.revision,
        lock_timeout_ms=args.lock_timeout,
        max_lock_wait_seconds=args.max_lock_wait,
    )
    print(f"outbox schema at {args.revision} on {redact(settings.database_url)}")
    # A consumer may start before any relay process: give it the embedded broker's folders.
    for url in {settings.broker_url, settings.events_connection_url}:
        folder = transports.create_embedded_folders(url)
        if folder is not None:
            print(f"embedded broker folders ready in {folder}")
    return 0


def _check(database_url: str) -> int:
    from relay.store.schema import upgrade

    at, head = upgrade.current(database_url), upgrade.head()
    where = redact(database_url)
    if at == head:
        print(f"outbox schema at head ({head}) on {where}")
        return 0
    if at is not None and at not in upgrade.known_revisions():
        # A later release migrated it: this release's relays still run on it
        # (docs/compatibility.md), which a pipeline may accept by this exit code.
        print(f"outbox schema at {at}, newer than this release's head {head}, on {where}")
        return 2
    print(
        f"outbox schema at {at or 'nothing (never migrated)'}, head is {head}, on {where}:"
        " run `relay migrate`"
    )
    return 1


COMMAND = Command(
    "migrate",
    "create or upgrade the outbox table",
    _arguments,
    _run,
    uses=DATABASE_ONLY | {"broker_url", "events_url"},
)
