"""``relay replay --to-queue QUEUE`` (or ``--to-subject SUBJECT`` on NATS JetStream): publish
sent events again to one existing queue (or a subject an existing stream captures) alone,
with the selectors of ``relay failed retry`` (``relay.commands.rows.add_filters``), a dry run,
a rate limit and a resume point (``--after``); see :mod:`relay.replays.replayer`."""

from __future__ import annotations

import argparse
import getpass
import json
import shlex
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from relay.commands import rows
from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import REPLAY_ONLY
from relay.records import Status
from relay.store.operations.actions import Actor


def _arguments(p: argparse.ArgumentParser) -> None:
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument(
        "--to-queue",
        metavar="QUEUE",
        help="the existing queue to publish to (alone: the broker's default exchange)",
    )
    to.add_argument(
        "--to-subject",
        metavar="SUBJECT",
        help="on NATS JetStream: the subject to publish to, which an existing stream captures",
    )
    rows.add_filters(p, action=True)
    p.add_argument(
        "--rate",
        type=_rate,
        default=None,
        metavar="N",
        help="at most N events a second (default: as fast as the broker confirms)",
    )
    p.add_argument(
        "--after",
        type=int,
        default=None,
        metavar="ID",
        help="only ids above ID: resume an interrupted replay from its last id confirmed",
    )


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of events a second")
    return value


def _run(settings: Settings, args: argparse.Namespace) -> int:
    from relay.replays.replayer import replay_selected

    stop = threading.Event()
    with _stopping_on_signals(stop):
        report = replay_selected(
            settings,
            rows.event_filter(args, (Status.SENT,)),
            to_queue=args.to_queue,
            to_subject=args.to_subject,
            after=args.after,
            dry_run=args.dry_run,
            rate=args.rate,
            actor=Actor(getpass.getuser(), "operator", "cli"),
            stop=stop,
        )
    out: dict[str, Any] = report.as_dict()
    resume = None if report.complete else _resume_command(args, report.resume_after)
    if args.json:
        print(json.dumps({**out, "resume": resume}))
    else:
        print(report.describe())
        if resume is not None:
            print(f"resume with: {resume}")
    return 0 if report.complete else 1


@contextmanager
def _stopping_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT stop the replay after the window in flight is confirmed."""

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _resume_command(args: argparse.Namespace, after: int | None) -> str:
    """This replay's command line again, from ``after`` (the last id confirmed)."""
    to = ["--to-subject", args.to_subject] if args.to_subject else ["--to-queue", args.to_queue]
    argv = ["relay", "replay", *to]
    for name in ("event_type", "key", "error"):
        if getattr(args, name) is not None:
            argv += [f"--{name.replace('_', '-')}", getattr(args, name)]
    for name in ("since", "until"):
        when = getattr(args, name)
        if when is not None:
            text = when.isoformat() if hasattr(when, "isoformat") else f"{when.total_seconds():g}s"
            argv += [f"--{name}", text]
    if args.all:
        argv.append("--all")
    if args.rate is not None:
        argv += ["--rate", f"{args.rate:g}"]
    if getattr(args, "source", None):
        argv += ["--source", args.source]
    if after is not None:
        argv += ["--after", str(after)]
    return shlex.join([*argv, *(str(i) for i in args.ids)])


COMMAND = Command(
    "replay",
    "publish sent events again to one existing queue or JetStream subject (and no other)",
    _arguments,
    _run,
    uses=REPLAY_ONLY,
    parser_options={
        "description": (
            "Publish sent events again, to QUEUE (or, on NATS JetStream, SUBJECT) alone, as "
            "they were first sent plus an x-relay-replay header; rows are not changed. "
            "Select with ids, filters or --all (nothing without one); --dry-run counts. An "
            "interrupted replay prints the command that resumes it (--after the last id "
            "confirmed)."
        )
    },
)

__all__ = ["COMMAND"]
