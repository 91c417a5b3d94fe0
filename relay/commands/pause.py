"""``relay pause``, ``relay resume`` and ``relay paused``: hold back an event-type pattern, a
key or a whole database, fleet-wide within two seconds, and lift it again.

A pause is a row of the database's ``relay_pauses`` (``relay.store.operations.pausing``).
``--event-type``/``--key`` act on every configured database, or on the one ``--source``
names; ``--source NAME`` alone pauses that database (with one database configured, NAME
names it, whatever its name).
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
from typing import TYPE_CHECKING

from relay.commands.command import Command
from relay.config import Settings
from relay.config.databases import each, pick, several_databases
from relay.config.settings import DATABASE_ONLY
from relay.exceptions import SelectorError
from relay.store.dispatch_path.holds import DATABASE, EVENT_TYPE, KEY

if TYPE_CHECKING:
    from relay.store.operations.pausing import PauseStore


def _selectors(p: argparse.ArgumentParser, verb: str) -> None:
    p.add_argument(
        "--event-type",
        metavar="PATTERN",
        help=f"{verb} event types matching this glob (* any run, ? one character)",
    )
    p.add_argument("--key", metavar="KEY", help=f"{verb} this ordering key (it keeps its order)")
    p.add_argument(
        "--source",
        metavar="NAME",
        help=f"alone: {verb} this database (RELAY_DATABASES name); with --event-type or --key: "
        "only in this database (default: every configured database)",
    )


#: The databases a command acts on: each one's name and settings.
Databases = list[tuple[str, Settings]]


def _pause_arguments(p: argparse.ArgumentParser) -> None:
    _selectors(p, "hold back")
    p.add_argument("--reason", metavar="TEXT", help="why, shown by relay paused and status")


def _resume_arguments(p: argparse.ArgumentParser) -> None:
    _selectors(p, "resume")


def _paused_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--source", metavar="NAME", help="only this database")


def _target(
    settings: Settings, args: argparse.Namespace
) -> tuple[str, str, list[tuple[str, Settings]]]:
    """The pause's kind and value and the databases it goes to."""
    chosen = [x for x in (args.event_type, args.key) if x is not None]
    if len(chosen) > 1:
        raise SelectorError("name one of --event-type or --key, not both")
    if not chosen and args.source is None:
        raise SelectorError("name what to pause: --event-type PATTERN, --key KEY or --source NAME")
    if chosen:
        kind, value = (
            (EVENT_TYPE, args.event_type) if args.event_type is not None else (KEY, args.key)
        )
        return kind, value, _databases(settings, args.source)
    return DATABASE, args.source, _databases(settings, args.source)


def _databases(settings: Settings, name: str | None) -> Databases:
    if name is None:
        return list(each(settings))
    if not several_databases(settings):
        return [(name, next(iter(each(settings)))[1])]
    return [pick(settings, name)]


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} (relay pause)"


def _store(settings: Settings) -> PauseStore:
    from relay.store.operations.pausing import PauseStore

    return PauseStore.from_url(settings.database_url)


def _pause(settings: Settings, args: argparse.Namespace) -> int:
    kind, value, databases = _target(settings, args)
    for name, s in databases:
        new = _store(s).pause(kind, value, reason=args.reason, paused_by=_who())
        state = "paused" if new else "already paused"
        print(f"{name}: {kind} {value!r} {state}")
    return 0


def _resume(settings: Settings, args: argparse.Namespace) -> int:
    kind, value, databases = _target(settings, args)
    for name, s in databases:
        lifted = _store(s).resume(kind, value)
        print(f"{name}: {kind} {value!r} {'resumed' if lifted else 'was not paused'}")
    return 0


def _paused(settings: Settings, args: argparse.Namespace) -> int:
    listed = {name: _store(s).paused() for name, s in _databases(settings, args.source)}
    if args.json:
        doc = {name: [p.as_dict() for p in pauses] for name, pauses in listed.items()}
        print(json.dumps({"databases": doc}, indent=2))
        return 0
    for name, pauses in listed.items():
        if not pauses:
            print(f"{name}: no pause in force")
        for p in pauses:
            why = f" ({p.reason})" if p.reason else ""
            who = p.paused_by or "?"
            print(f"{name}: {p.kind} {p.value!r} for {p.age_seconds:.0f}s by {who}{why}")
    return 0


COMMANDS = (
    Command(
        "pause",
        "hold back an event type, a key or a database",
        _pause_arguments,
        _pause,
        uses=DATABASE_ONLY,
    ),
    Command("resume", "lift a pause", _resume_arguments, _resume, uses=DATABASE_ONLY),
    Command("paused", "list the pauses in force", _paused_arguments, _paused, uses=DATABASE_ONLY),
)
