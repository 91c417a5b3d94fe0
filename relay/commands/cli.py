"""The ``relay`` command: migrate, status, dispatch, failed, purge-sent, inbox, demo."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from relay.commands import rows as operate
from relay.config import CONSOLE_ONLY, DATABASE_ONLY, Settings
from relay.exceptions import ConfigError, RelayError, SelectorError
from relay.urls import redact

log = logging.getLogger("relay")
parse_duration = operate.parse_duration

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

    p = sub.add_parser("migrate", help="create or upgrade the outbox table")
    p.add_argument("--revision", default="head", help="target revision (default: head)")

    p = sub.add_parser("status", help="rows per status, oldest pending age, failed count")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--watch", action="store_true", help="a live view, refreshed every second")
    p.add_argument("--count", type=int, default=None, help="with --watch: stop after N refreshes")

    p = sub.add_parser("doctor", help="check the deployment; each problem comes with its fix")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("probe", help="health probes for Docker and Kubernetes (exit 0 = healthy)")
    p.add_argument(
        "kind",
        choices=["ready", "live"],
        help="ready: database and broker reachable; live: a dispatch loop's heartbeat is fresh",
    )
    p.add_argument("--heartbeat-file", help="live: the file `relay dispatch --loop` touches")
    p.add_argument("--max-age", type=float, default=60.0, help="live: seconds (default 60)")

    p = sub.add_parser("dispatch", help="run the relay without Celery")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--once", action="store_true", help="drain once and exit")
    mode.add_argument("--loop", action="store_true", help="drain until SIGTERM/SIGINT")
    p.add_argument(
        "--heartbeat-file",
        help="--loop: touch this file on every pass (for `relay probe live`)",
    )

    p = sub.add_parser("failed", help="inspect and recover dead-lettered events")
    fsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    operate.add_filters(
        fsub.add_parser("list", help="list failed events, oldest first"), action=False
    )
    for name, verb in (("retry", "put back to pending with fresh attempts"), ("purge", "delete")):
        operate.add_filters(
            fsub.add_parser(
                name,
                help=f"{verb} failed events: ids, a filter or --all (nothing without one)",
            ),
            action=True,
        )

    p = sub.add_parser("pending", help="inspect the backlog and the leases held")
    psub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    pl = psub.add_parser("list", help="pending and processing events, oldest first")
    operate.add_filters(pl, action=False)
    pl.add_argument(
        "--status", action="append", choices=["pending", "processing"], help="only this status"
    )

    p = sub.add_parser("purge-sent", help="delete sent rows older than a retention")
    p.add_argument(
        "--older-than",
        type=operate.parse_duration,
        required=True,
        metavar="DURATION",
        help="e.g. 7d, 12h, 3600",
    )
    p.add_argument("--batch-size", type=int, default=1000)

    p = sub.add_parser("inbox", help="consumers' inbox retention and dead letters")
    isub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ip = isub.add_parser("purge", help="delete inbox rows received longer ago than a duration")
    ip.add_argument("--older-than", type=operate.parse_duration, required=True, metavar="DURATION")
    ip.add_argument("--batch-size", type=int, default=1000)
    for name, verb in (("dead", "list the dead letters of"), ("redrive", "re-drive")):
        ip = isub.add_parser(name, help=f"{verb} an event queue (<QUEUE>.dead on the broker)")
        ip.add_argument("queue", metavar="QUEUE", help="the event queue (on_event's queue=)")
        ip.add_argument("--limit", type=int, default=100 if name == "dead" else 1_000_000)

    p = sub.add_parser(
        "console",
        help="serve the web console (extra [console]): backlog, leases, dead letters, re-drive",
        description="Serve the operators' web console and its JSON API. Credentials: "
        "RELAY_CONSOLE_TOKEN (operator) and RELAY_CONSOLE_READONLY_TOKEN (view only); with "
        "neither set, a token is made up for this run and a sign-in link printed.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8200, help="port to listen on (default 8200)")

    p = sub.add_parser(
        "demo",
        help="run the whole path in-process on SQLite and memory://, and check it",
        description="Business transactions (some rolled back) -> outbox -> Celery worker "
        "(in-process) -> Kombu exchange on memory:// -> consumer; exits 1 if any event was "
        "lost, duplicated or leaked from a rollback. Needs no server.",
    )
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
    try:
        settings = Settings.from_env(only=_USES.get(args.command))
        return int(_COMMANDS[args.command](settings, args) or 0)
    except RelayError as exc:
        print(f"relay: {redact(str(exc))}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError | SelectorError) else 1


def _cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from relay.publishers import transports
    from relay.store import migrate

    migrate.upgrade(settings.database_url, args.revision)
    print(f"outbox schema at {args.revision} on {redact(settings.database_url)}")
    # A consumer may start before any relay process: give it the embedded broker's folders.
    for url in {settings.broker_url, settings.events_connection_url}:
        folder = transports.create_embedded_folders(url)
        if folder is not None:
            print(f"embedded broker folders ready in {folder}")
    return 0


def _store(settings: Settings) -> Any:
    from relay.store.dispatch import Store

    return Store.from_url(settings.database_url)


def _cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    if args.watch:
        from relay.commands.watch import watch

        return watch(_store(settings), count=args.count)
    report = _store(settings).status().as_dict()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for status, count in report["counts"].items():
        print(f"{status:<12}{count:>12}")
    age = report["oldest_pending_age_seconds"]
    print(f"{'oldest pending':<12} {'-' if age is None else f'{age:.1f}s':>11}")
    print(f"{'expired leases':<12} {report['expired_leases']:>10}")
    return 0


def _cmd_doctor(settings: Settings, args: argparse.Namespace) -> int:
    from relay.commands import doctor

    checks = doctor.run(*doctor.settings_or_error())
    if args.json:
        print(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        for c in checks:
            print(f"{c.status.upper():<5} {c.name}: {c.detail}")
            if c.fix:
                print(f"      fix: {c.fix}")
    return 1 if any(c.status == doctor.FAIL for c in checks) else 0


def _cmd_probe(settings: Settings, args: argparse.Namespace) -> int:
    from relay.commands import probe as probes

    ok, detail = (
        probes.ready(settings)
        if args.kind == "ready"
        else probes.live(args.heartbeat_file, args.max_age)
    )
    print(detail, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def _cmd_dispatch(settings: Settings, args: argparse.Namespace) -> int:
    from relay.dispatch.dispatcher import Dispatcher
    from relay.observe import observers as observe

    dispatcher = Dispatcher.from_settings(settings, observer=observe.for_settings(settings))
    log.info("relay %s starting: %s", dispatcher.worker_id, settings.describe())
    try:
        if args.once:
            report = dispatcher.drain(budget_seconds=float("inf"))
        else:
            if settings.metrics_port is not None:
                from relay.observe import metrics

                metrics.serve(settings.metrics_port, dispatcher.store)
            stop, wake = threading.Event(), threading.Event()

            def on_signal(*_: object) -> None:
                stop.set()
                wake.set()

            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, on_signal)
            listener = _listener(settings, wake)
            try:
                report = dispatcher.loop(
                    stop, wake=wake if listener else None, on_pass=_heartbeat(args.heartbeat_file)
                )
            finally:
                if listener is not None:
                    listener.stop()
    finally:
        dispatcher.close()
        dispatcher.publisher.close()
    log.info("relay %s done: %s", dispatcher.worker_id, report)
    return 0


def _heartbeat(path: str | None) -> Any:
    if not path:
        return None
    from relay.commands import probe as probes

    return lambda: probes.touch(path)


def _listener(settings: Settings, wake: threading.Event) -> Any:
    """On PostgreSQL with ``RELAY_NOTIFY`` on, a started listener that sets ``wake`` on each
    notification; otherwise None (the loop polls adaptively)."""
    from relay.dispatch import listener
    from relay.dispatch.gate import Gate

    if not (settings.notify and listener.supports(settings.database_url)):
        log.info(
            "no LISTEN/NOTIFY here: polling every %gs to %gs",
            settings.poll_floor_seconds,
            settings.tick_seconds,
        )
        return None
    gate = Gate.from_settings(settings)
    return listener.Listener(settings.database_url, wake.set, gate=gate).start()


def _cmd_failed(settings: Settings, args: argparse.Namespace) -> int:
    return operate.failed(_store(settings), args)


def _cmd_pending(settings: Settings, args: argparse.Namespace) -> int:
    return operate.pending(_store(settings), args)


def _cmd_purge_sent(settings: Settings, args: argparse.Namespace) -> int:
    deleted = _store(settings).purge_sent(args.older_than, batch_size=args.batch_size)
    print(f"{deleted} sent rows deleted")
    return 0


def _cmd_inbox(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "purge":
        from relay.consume import inbox
        from relay.store.engine import create_engine

        engine, deleted = create_engine(settings.database_url), 0
        try:
            while True:
                with engine.begin() as conn:
                    n = inbox.purge(conn, args.older_than, batch_size=args.batch_size)
                deleted += n
                if n < args.batch_size:
                    break
        finally:
            engine.dispose()
        print(f"{deleted} inbox rows deleted")
        return 0
    import kombu

    from relay.consume import deadletters
    from relay.publishers import transports

    url = settings.events_connection_url
    with kombu.Connection(url, transport_options=transports.transport_options(url)) as conn:
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


def _cmd_console(settings: Settings, args: argparse.Namespace) -> int:
    try:
        from relay.console.serve import serve
    except ImportError as exc:
        raise ConfigError(
            f"relay console needs the [console] extra: pip install 'celery-outbox-relay[console]' "
            f"({exc.name} is missing)"
        ) from exc
    return serve(settings, args.host, args.port)


def _cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    if not args.verbose:
        # A log line per Celery task would drown the progress line; warnings still show.
        logging.getLogger().setLevel(logging.WARNING)
    from relay.commands import demo

    options = demo.DemoOptions(
        events=args.events,
        database_url=args.database_url,
        rollback_ratio=args.rollback_ratio,
        producers=args.producers,
        timeout_seconds=args.timeout,
        seed=args.seed,
    )
    return 0 if demo.run(options).ok else 1


#: The settings each command reads (None: all of them); see ``Settings.from_env(only=...)``.
_USES: dict[str, frozenset[str] | None] = {
    "migrate": DATABASE_ONLY | {"broker_url", "events_url"},
    "status": DATABASE_ONLY,
    # The doctor reads every variable itself and reports a bad one as a failed check.
    "doctor": frozenset(),
    "probe": DATABASE_ONLY | {"broker_url", "events_url"},
    "failed": DATABASE_ONLY,
    "pending": DATABASE_ONLY,
    "purge-sent": DATABASE_ONLY,
    "inbox": DATABASE_ONLY | {"broker_url", "events_url"},
    "console": CONSOLE_ONLY,
    # The demo builds its own settings: a throw-away database and the in-memory transport.
    "demo": frozenset(),
}

_COMMANDS = {
    "migrate": _cmd_migrate,
    "status": _cmd_status,
    "doctor": _cmd_doctor,
    "probe": _cmd_probe,
    "dispatch": _cmd_dispatch,
    "failed": _cmd_failed,
    "pending": _cmd_pending,
    "purge-sent": _cmd_purge_sent,
    "inbox": _cmd_inbox,
    "console": _cmd_console,
    "demo": _cmd_demo,
}
