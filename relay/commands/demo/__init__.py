"""``relay demo``: the whole path in-process on SQLite and memory://, checked
(the run itself is :mod:`relay.commands.demo.run`, loaded only by this command: it loads Celery)."""

from __future__ import annotations

import argparse
import logging

from relay.commands.command import Command
from relay.config import Settings


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, default=3000, help="committed events (default 3000)")
    p.add_argument(
        "--database-url",
        default=None,
        help="outbox database (default: a throw-away SQLite file; never RELAY_DATABASE_URL)",
    )
    p.add_argument(
        "--rollback-ratio", type=float, default=0.1, help="share of transactions abandoned"
    )
    p.add_argument("--producers", type=int, default=2, help="producer threads")
    p.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    p.add_argument("--seed", type=int, default=None, help="seed of the simulated business")


def _run(settings: Settings, args: argparse.Namespace) -> int:
    if not args.verbose:
        # A log line per Celery task would drown the progress line; warnings still show.
        logging.getLogger().setLevel(logging.WARNING)
    from relay.commands.demo import run as demo_run

    options = demo_run.DemoOptions(
        events=args.events,
        database_url=args.database_url,
        rollback_ratio=args.rollback_ratio,
        producers=args.producers,
        timeout_seconds=args.timeout,
        seed=args.seed,
    )
    return 0 if demo_run.run(options).ok else 1


COMMAND = Command(
    "demo",
    "run the whole path in-process on SQLite and memory://, and check it",
    _arguments,
    _run,
    # The demo builds its own settings: a throw-away database and the in-memory transport.
    uses=frozenset(),
    parser_options={
        "description": "Business transactions (some rolled back) -> outbox -> Celery worker "
        "(in-process) -> Kombu exchange on memory:// -> consumer; exits 1 if any event was "
        "lost, duplicated or leaked from a rollback. Needs no server."
    },
)
