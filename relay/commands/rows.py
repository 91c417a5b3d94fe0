"""The operator's commands over rows: ``relay failed list|retry|purge`` and ``relay pending
list``, with the filters the web console shares (``relay.store.operations.filters``), dry
runs, a table for people and ``--json`` for scripts."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from relay.commands import command
from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import DATABASE_ONLY
from relay.records import Status
from relay.store.operations.filters import EventFilter, parse_duration, parse_when

if TYPE_CHECKING:
    from relay.store.operations.actions import Changed
    from relay.store.operations.store import OperationsStore

#: Columns of the table, with their widths (the last one takes the rest of the line).
_COLUMNS = (("id", 10), ("event_type", 28), ("key", 16), ("status", 10), ("att", 4))


def add_filters(p: argparse.ArgumentParser, *, action: bool) -> None:
    """The selectors every row command takes; an action also takes ids, --all and --dry-run."""
    if action:
        p.add_argument("ids", nargs="*", type=int, help="outbox ids")
        p.add_argument("--all", action="store_true", help="every row of the status")
        p.add_argument(
            "--dry-run", action="store_true", help="say what would change; change nothing"
        )
    else:
        p.add_argument("--limit", type=int, default=100, help="rows per page (default 100)")
        p.add_argument("--after", type=int, default=None, metavar="ID", help="the page after ID")
    p.add_argument("--event-type", metavar="PATTERN", help="glob over the event type: order.*")
    p.add_argument("--key", help="the ordering key")
    p.add_argument("--error", metavar="TEXT", help="text in the last error (any case)")
    p.add_argument("--since", type=parse_when, help="created at or after: a time or 2h (ago)")
    p.add_argument("--until", type=parse_when, help="created before: a time or 2h (ago)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def event_filter(args: argparse.Namespace, statuses: Sequence[Status]) -> EventFilter:
    return EventFilter(
        statuses=tuple(statuses),
        ids=tuple(getattr(args, "ids", ()) or ()),
        event_type=args.event_type,
        key=args.key,
        error=args.error,
        since=args.since,
        until=args.until,
        all=bool(getattr(args, "all", False)),
    )


def failed(store: OperationsStore, args: argparse.Namespace) -> int:
    """``relay failed list|retry|purge``."""
    f = event_filter(args, (Status.FAILED,))
    if args.action == "list":
        return _list(store, f, args, "no failed events")
    act: Callable[..., Changed] = store.purge_failed
    if args.action == "retry":
        act = functools.partial(
            store.retry_failed, expires_in=args.expires_in, no_expiry=args.no_expiry
        )
    if args.dry_run:
        f.for_action(args.action)  # refuse an empty selector before showing anything
        rows = store.list_events(f, limit=20)
        done = act(f, dry_run=True)
        if args.json:
            out = {"matched": done.matched, "changed": 0, "dry_run": True}
            print(json.dumps(out | ({"expired": done.expired} if done.expired else {})))
            return 0
        _table(rows)
        verb = "retry" if args.action == "retry" else "purge"
        more = f" (the first {len(rows)} shown)" if done.matched > len(rows) else ""
        print(f"dry run: would {verb} {done.matched} failed events{more}; nothing changed")
        if done.expired:
            print(
                f"{done.expired} of them are past their deadline: the retry needs "
                "--expires-in DURATION (a new deadline) or --no-expiry (none)"
            )
        return 0
    done = act(f)
    if args.json:
        print(json.dumps({"matched": done.matched, "changed": done.changed}))
    elif args.action == "retry":
        print(f"{done.changed} failed events back to pending")
    else:
        print(f"{done.changed} failed events deleted")
    return 0


def pending(store: OperationsStore, args: argparse.Namespace) -> int:
    """``relay pending list``: the backlog and the leases held (expired ones marked)."""
    statuses = (
        [Status(s) for s in args.status] if args.status else [Status.PENDING, Status.PROCESSING]
    )
    return _list(store, event_filter(args, statuses), args, "no pending or processing events")


def _list(store: OperationsStore, f: EventFilter, args: argparse.Namespace, empty: str) -> int:
    rows = store.list_events(f, limit=args.limit, after=args.after)
    last = rows[-1]["id"] if len(rows) == args.limit else None
    if args.json:
        print(json.dumps({"events": rows, "next": last}, indent=2, default=str))
        return 0
    if not rows:
        print(empty)
        return 0
    _table(rows)
    if last is not None:
        print(f"more: --after {last}")
    return 0


def _table(rows: Sequence[dict[str, Any]]) -> None:
    head = "".join(f"{name:<{width}}" for name, width in _COLUMNS) + "detail"
    print(head)
    for row in rows:
        values = (row["id"], row["event_type"], row["ordering_key"] or "-", row["status"])
        cells = [
            _cut(str(v), w) for v, (_, w) in zip((*values, row["attempt"]), _COLUMNS, strict=True)
        ]
        print(
            "".join(f"{c:<{w}}" for c, (_, w) in zip(cells, _COLUMNS, strict=True)) + _detail(row)
        )


def _detail(row: dict[str, Any]) -> str:
    if row["status"] == Status.PROCESSING.value:
        return f"held by {row['locked_by']} until {row['locked_until']:%Y-%m-%d %H:%M:%S}"
    if row["status"] == Status.FAILED.value:
        return (row["last_error"] or "").replace("\n", " ")[:200]
    due = row["next_retry_at"]
    return "due now" if due is None else f"due {due:%Y-%m-%d %H:%M:%S}"


def _cut(text: str, width: int) -> str:
    return text if len(text) < width else text[: width - 2] + "… "


def _failed_arguments(p: argparse.ArgumentParser) -> None:
    fsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_filters(fsub.add_parser("list", help="list failed events, oldest first"), action=False)
    for name, verb in (("retry", "put back to pending with fresh attempts"), ("purge", "delete")):
        sub = fsub.add_parser(
            name, help=f"{verb} failed events: ids, a filter or --all (nothing without one)"
        )
        add_filters(sub, action=True)
        if name == "retry":
            deadline = sub.add_mutually_exclusive_group()
            deadline.add_argument(
                "--expires-in",
                type=parse_duration,
                metavar="DURATION",
                help="give every retried event a new deadline this long from now (30m, 2h); "
                "needed when the selection holds events past their deadline",
            )
            deadline.add_argument(
                "--no-expiry",
                action="store_true",
                help="clear the retried events' deadline (or use --expires-in)",
            )


def _pending_arguments(p: argparse.ArgumentParser) -> None:
    psub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    pl = psub.add_parser("list", help="pending and processing events, oldest first")
    add_filters(pl, action=False)
    pl.add_argument(
        "--status", action="append", choices=["pending", "processing"], help="only this status"
    )


def _run_failed(settings: Settings, args: argparse.Namespace) -> int:
    return failed(command.store(settings), args)


def _run_pending(settings: Settings, args: argparse.Namespace) -> int:
    return pending(command.store(settings), args)


COMMANDS = (
    Command(
        "failed",
        "inspect and recover dead-lettered events",
        _failed_arguments,
        _run_failed,
        uses=DATABASE_ONLY,
    ),
    Command(
        "pending",
        "inspect the backlog and the leases held",
        _pending_arguments,
        _run_pending,
        uses=DATABASE_ONLY,
    ),
)

__all__ = [
    "COMMANDS",
    "add_filters",
    "event_filter",
    "failed",
    "parse_duration",
    "parse_when",
    "pending",
]
