"""The ``relay`` command line: one module per command, each declaring its parser and handler in
one :class:`~relay.commands.command.Command`, all found through :data:`COMMANDS`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from relay.commands import (
    console,
    demo,
    dispatch,
    doctor,
    inbox,
    migrate,
    pause,
    probe,
    purge_sent,
    replay,
    rows,
    sources,
    status,
)
from relay.commands.command import Command
from relay.config import Settings
from relay.config.urls import redact
from relay.exceptions import ConfigError, RelayError, ReplayRefused, SelectorError
from relay.store.operations.filters import parse_duration

#: Every ``relay`` command, in the order ``relay --help`` lists them.
COMMANDS: tuple[Command, ...] = (
    migrate.COMMAND,
    status.COMMAND,
    doctor.COMMAND,
    probe.COMMAND,
    dispatch.COMMAND,
    *rows.COMMANDS,
    replay.COMMAND,
    purge_sent.COMMAND,
    *pause.COMMANDS,
    inbox.COMMAND,
    console.COMMAND,
    demo.COMMAND,
)

#: What ``relay --help`` says first: plain words, not the module docstring's markup.
DESCRIPTION = (
    "Operate the transactional-outbox relay: create the outbox table, watch it, relay its "
    "events to the broker without Celery, and recover dead letters. Settings come from the "
    "RELAY_* environment variables; each command reads only the ones it uses."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relay", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        parser_of = sub.add_parser(command.name, help=command.help, **command.parser_options)
        command.arguments(parser_of)
        sources.add_option(command.name, parser_of)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # Alembic narrates each plugin and step at INFO; `relay migrate` prints its own result.
        logging.getLogger("alembic").setLevel(logging.WARNING)
    command = next(c for c in COMMANDS if c.name == args.command)
    try:
        settings = Settings.from_env(only=command.uses)
        return sources.run(command.name, command.handler, settings, args)
    except RelayError as exc:
        print(f"relay: {redact(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError | SelectorError | ReplayRefused) else 1
    except BrokenPipeError:
        # The reader went away (`relay status | head`): stop quietly, as other tools do; what
        # is still buffered goes nowhere instead of into a second traceback at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


__all__ = ["COMMANDS", "DESCRIPTION", "Command", "build_parser", "main", "parse_duration"]
