"""``relay dispatch --once|--loop``: run the relay without Celery
(the process itself is built by :func:`relay.runners.loop.run`)."""

from __future__ import annotations

import argparse

from relay.commands.command import Command
from relay.config import Settings


def _arguments(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true", help="drain once and exit")
    mode.add_argument("--loop", action="store_true", help="drain until SIGTERM/SIGINT")
    p.add_argument(
        "--process-per-database",
        action="store_true",
        help="RELAY_DATABASES: a child process per database (each with its own connections) "
        "instead of one process within RELAY_MAX_CONNECTIONS",
    )
    p.add_argument(
        "--heartbeat-file",
        help="--loop: touch this file on every pass (for `relay probe live`)",
    )


def _run(settings: Settings, args: argparse.Namespace) -> int:
    if settings.databases is not None and args.process_per_database:
        from relay.runners import supervisor

        supervisor.run(settings, once=args.once, heartbeat_file=args.heartbeat_file)
        return 0
    if settings.databases is not None:  # RELAY_DATABASES: one process within the budget
        from relay.runners.many import workers as tenants

        tenants.run(settings, once=args.once, heartbeat_file=args.heartbeat_file)
        return 0
    from relay.runners import loop as runner

    runner.run(settings, once=args.once, heartbeat_file=args.heartbeat_file)
    return 0


COMMAND = Command("dispatch", "run the relay without Celery", _arguments, _run)
