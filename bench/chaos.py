"""``python -m bench.chaos --minutes N``: the chaos soak. A producer commits events to
PostgreSQL while 2-3 ``relay dispatch --loop`` relay them to RabbitMQ through fault proxies
(``tests/support/proxy.py``), and faults drawn at random from a menu hit them every few seconds:
the database or the broker cut off or frozen, a relay SIGKILLed or SIGTERMed and started again
(:mod:`bench.chaos_menu`). With ``--failover`` the database is a throw-away PostgreSQL primary
and synchronous standby behind the relays' proxy, which acts as the writer endpoint, and the
menu fails it over (stale or silent endpoint) and back; with ``--alarm`` the broker is a
throw-away RabbitMQ node, and the menu raises its memory alarm (:mod:`bench.chaos_servers`).
Both are on when this machine has the servers' binaries. With ``--bad-rows`` (the default)
rows no message can carry are written by plain SQL among the good ones (issue 37's). With
``--jetstream`` the relays publish to a NATS JetStream stream of the soak's own instead
(:mod:`bench.chaos_stream`; no alarm), and a message the stream stored twice fails the soak.

Then it checks, and prints as JSON: every good event whose commit was acknowledged delivered
(ids consumed from a bound queue) and no row left pending or processing, duplicates counted,
every bad row ``failed`` with a ``last_error``, no relay exited on its own (they are restarted,
and counted), each SIGTERM obeyed within ``timing.STOP_SECONDS``, delivery again within 30 s
of a failover's endpoint answering from the new primary and within 15 s of an alarm's clear.
Exit 0 when all of that held, 1 otherwise. It also reports when ``relay probe live`` found a
relay stale and for how long (``hung``; the relay is sent SIGUSR1 then, so its log shows what
it waited on: ``--logs DIR`` keeps the logs), and restarts it as Kubernetes would on a failed
liveness probe (``--no-restart-hung``: leaves it).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kombu
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from bench import chaos_stream, services
from bench.chaos_menu import (
    ALARM,
    BAD_ROWS,
    FAILOVER,
    Injector,
    Relay,
    menu,
    stop_all,
    write_bad_row,
)
from bench.chaos_servers import (
    Pair,
    alarm_possible,
    failover_pair,
    failover_possible,
    sent_count,
)
from relay.config import timing
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox
from tests.support.proxy import TcpProxy
from tests.support.rabbitserver import started_node

#: The relays' settings: short leases and backoffs, so a soak of minutes sees many recoveries.
SETTINGS = {
    "RELAY_LEASE_SECONDS": "10",
    "RELAY_MAX_ATTEMPTS": "3",
    "RELAY_BACKOFF_BASE_SECONDS": "0.2",
    "RELAY_BACKOFF_MAX_SECONDS": "2",
}


@dataclass
class _Producer:
    """Commits good events at ``rate`` a second, ten per transaction, to ``url`` (straight to
    the server, or through the writer endpoint a failover moves) until ``until``. Only a commit
    the server acknowledged counts (``acknowledged``): the events of one that raised at its
    commit are ``uncertain`` (it may have landed); a refused transaction (the endpoint on a
    read-only server, or none) is counted and tried again on a new connection soon after."""

    url: str
    rate: float
    until: threading.Event
    acknowledged: list[int] = field(default_factory=list)
    uncertain: list[int] = field(default_factory=list)
    refused: int = 0

    def run(self) -> None:
        engine = create_engine(self.url)
        start, n = time.monotonic(), 0
        while not self.until.is_set():
            batch: list[int] = []
            try:
                with Session(engine) as session, session.begin():
                    batch = [relay.enqueue(session, "chaos.good", {"n": n + i}) for i in range(10)]
            except sa.exc.SQLAlchemyError:
                self.uncertain.extend(batch)
                self.refused += 1
                engine.dispose()
                self.until.wait(0.2)  # a refused transaction: again soon, on a new connection
                continue
            self.acknowledged.extend(batch)
            n += len(batch)
            # Pacing, not a synchronisation.
            self.until.wait(max(0.0, start + n / self.rate - time.monotonic()))
        engine.dispose()


def _consume(url: str, queue: str, quiet: float = 3.0) -> collections.Counter[int]:
    """Every message in ``queue`` (until it stays empty ``quiet`` seconds), by outbox id."""
    got: collections.Counter[int] = collections.Counter()

    def take(message: Any) -> None:  # undecoded: a bad row's body may not decode
        got[int(message.headers["outbox_id"])] += 1
        message.ack()

    with kombu.Connection(url) as conn:
        q = kombu.Queue(queue, channel=conn.default_channel)
        with kombu.Consumer(conn, [q], on_message=take, prefetch_count=1000):
            while True:
                try:
                    conn.drain_events(timeout=quiet)
                except TimeoutError:
                    return got


def _tend(
    fleet: list[Relay],
    restart_hung: bool,
    restarted: collections.Counter[str],
    stops: list[float | None],
) -> None:
    """Restart a relay that exited on its own (counted), note stale spells, and with
    ``restart_hung`` restart a stale relay as Kubernetes would on a failed liveness probe (a
    second after its stack dump)."""
    for r in fleet:
        r.check()
        r.look()
        if restart_hung and r.stale_for() > 1.0:
            stops.append(r.stop(signal.SIGTERM, wait=timing.STOP_SECONDS + 30))
            r.start()
            restarted[r.name] += 1


def _close_soon(proxy: TcpProxy) -> None:
    """Let every connection through ``proxy`` flow again and close it from a daemon thread:
    its ``close()`` joins each pump thread for up to 5 s, and a pump blocked in ``recv`` on a
    socket another thread closed is not woken by the close (minutes for a soak's many)."""
    proxy.restore()
    threading.Thread(target=proxy.close, name="proxy-close", daemon=True).start()


def _rows(engine: sa.Engine, ids: list[int]) -> dict[int, tuple[str, str | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(outbox.c.id, outbox.c.status, outbox.c.last_error).where(outbox.c.id.in_(ids))
        )
        return {int(i): (str(s), e) for i, s, e in rows}


def _unfinished(engine: sa.Engine, fleet: list[Relay]) -> list[dict[str, Any]]:
    """Rows still pending or processing (the first 20): who holds each, which process of
    which relay (alive or not), and how far its lease or retry lies from now."""
    owner = {pid: (r.name, pid == r.pids[-1] and r.alive()) for r in fleet for pid in r.pids}
    c = outbox.c
    now = sa.func.now()
    query = (
        sa.select(
            c.id,
            c.status,
            c.attempt,
            c.locked_by,
            sa.func.extract("epoch", c.locked_until - now),
            sa.func.extract("epoch", c.next_retry_at - now),
        )
        .where(c.status.in_(["pending", "processing"]))
        .order_by(c.id)
        .limit(20)
    )
    out = []
    with engine.connect() as conn:
        for i, status, attempt, by, lease_left, retry_in in conn.execute(query):
            pid = int(str(by).split(":")[1]) if by else None
            name, running = owner.get(pid or -1, (None, False))
            out.append(
                {
                    "id": i,
                    "status": status,
                    "attempt": attempt,
                    "locked_by": by,
                    "relay": name,
                    "holder_running": running,
                    "lease_left_seconds": None if lease_left is None else float(lease_left),
                    "retry_in_seconds": None if retry_in is None else float(retry_in),
                }
            )
    return out


def _statuses(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        q = sa.select(outbox.c.status, sa.func.count()).group_by(outbox.c.status)
        return {str(s): int(n) for s, n in conn.execute(q)}


def run(
    minutes: float,
    relays: int,
    rate: float,
    bad_rows: bool,
    seed: int,
    keep_logs: str | None = None,
    restart_hung: bool = True,
    failover: bool = False,
    alarm: bool = False,
    jetstream: bool = False,
) -> dict[str, Any]:
    rng = random.Random(seed)
    faults = menu(failover=failover, alarm=alarm)
    began, began_at = time.monotonic(), time.time()
    with contextlib.ExitStack() as servers:
        tmp = servers.enter_context(tempfile.TemporaryDirectory(prefix="relay-chaos-"))
        if failover:
            primary, standby, url = servers.enter_context(failover_pair())
        else:
            url = servers.enter_context(services.database("chaos"))
        rabbit = servers.enter_context(started_node()) if alarm else None
        amqp_url = rabbit.url if rabbit is not None else services.AMQP_URL
        if jetstream:
            stream = servers.enter_context(chaos_stream.stream())
            amqp_url, exchange = stream.url, stream.exchange
        else:
            route = servers.enter_context(services.route(amqp_url, "chaos"))
            exchange = route.exchange_name
        db_at = sa.make_url(url)
        amqp = urlsplit(amqp_url)
        db = TcpProxy((db_at.host or "127.0.0.1", db_at.port or 5432))
        broker = TcpProxy((amqp.hostname or "127.0.0.1", amqp.port or 5672))
        proxies = [db, broker]
        pair: Pair | None = None
        if failover:
            # The producer's own way to the writer endpoint: moved with the relays' by a
            # failover, never cut, stalled or frozen by the relays' faults.
            app = TcpProxy((db_at.host or "127.0.0.1", db_at.port or 5432))
            proxies.append(app)
            pair = Pair(primary, standby, (db, app))
            produce_url, engine_now = app.url_for(url), pair.engine
        else:
            produce_url, direct = url, create_engine(url)
            engine_now = lambda: direct  # noqa: E731 (one engine for the whole soak)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        env |= SETTINGS | {
            "RELAY_DATABASE_URL": db.url_for(url),
            "RELAY_BROKER_URL": broker.url_for(amqp_url),
            "RELAY_EXCHANGE": exchange,
            "PYTHONUNBUFFERED": "1",
        }
        if jetstream:
            env |= {"RELAY_EVENTS_URL": broker.url_for(amqp_url), "RELAY_NATS_STREAM": stream.name}
        fleet = [Relay(f"relay-{i}", env, Path(tmp)) for i in range(relays)]
        injector = Injector(
            fleet,
            db,
            broker,
            rng,
            faults,
            pair=pair,
            node=rabbit,
            sent=lambda: sent_count(engine_now()),
        )
        done = threading.Event()
        produced = _Producer(produce_url, rate, done)
        good, uncertain = produced.acknowledged, produced.uncertain
        bad: dict[int, str] = {}
        restarted: collections.Counter[str] = collections.Counter()
        producer = threading.Thread(target=produced.run, daemon=True)
        try:
            for r in fleet:
                r.start()
            producer.start()
            started = time.monotonic()
            end = started + minutes * 60
            next_fault = started + rng.uniform(3, 8)
            next_bad = started + 5
            while time.monotonic() < end:
                if bad_rows and time.monotonic() >= next_bad:
                    kind = rng.choice(list(BAD_ROWS))
                    bad[write_bad_row(engine_now(), kind)] = kind
                    next_bad += rng.uniform(5, 15)
                if time.monotonic() >= next_fault:
                    injector.one(lambda: time.monotonic() >= end)
                    next_fault = time.monotonic() + rng.uniform(3, 10)
                _tend(fleet, restart_hung, restarted, injector.stop_seconds)
                time.sleep(0.5)  # the soak's own pace: a look at the relays twice a second
            done.set()
            producer.join(30)
            faults_over = time.monotonic()
            # Drained: nothing pending or processing (bad rows fail within their attempts).
            drain_deadline = faults_over + 180
            while time.monotonic() < drain_deadline:
                _tend(fleet, restart_hung, restarted, injector.stop_seconds)
                s = _statuses(engine_now())
                if not s.get("pending") and not s.get("processing"):
                    break
                time.sleep(0.5)
            drain_seconds = time.monotonic() - faults_over
            for r in fleet:
                r.look(alive=False)
            unfinished = _unfinished(engine_now(), fleet)
            final_stop = stop_all(fleet)
        finally:
            done.set()
            for r in fleet:
                if r.alive() and r.proc is not None:
                    r.proc.send_signal(signal.SIGKILL)
            for proxy in proxies:
                _close_soon(proxy)
        stored = chaos_stream.read(stream) if jetstream else None
        received = stored.by_outbox_id if stored else _consume(amqp_url, route.queue_name)
        rows = _rows(engine_now(), list(bad))
        statuses = _statuses(engine_now())
        engine_now().dispose()
        logs = {r.name: r.log.read_text(errors="replace") for r in fleet}
        if keep_logs:
            Path(keep_logs).mkdir(parents=True, exist_ok=True)
            for r in fleet:
                shutil.copy(r.log, Path(keep_logs) / r.log.name)
    good_set = set(good)
    missing = sorted(good_set - set(received))
    # An uncertain commit may have landed (a commit the server made and could not confirm):
    # delivering it is no fault, and it is no stray.
    stray = sorted(set(received) - good_set - set(bad) - set(uncertain))
    bad_report = {
        str(i): {
            "kind": kind,
            "status": rows.get(i, ("gone", None))[0],
            "last_error": rows.get(i, ("", None))[1],
        }
        for i, kind in bad.items()
    }
    bad_not_failed = [
        i for i, b in bad_report.items() if b["status"] != "failed" or not b["last_error"]
    ]
    own_exits = [
        {"relay": r.name, "code": code, "log_tail": tail}
        for r in fleet
        for code, tail in r.own_exits
    ]
    stops = injector.stop_seconds + final_stop
    # Delivery again after a failover's endpoint answered from the new primary, after an
    # alarm cleared (None: not within the bound).
    resumed = {
        kind: [e.get("resumed_seconds") for e in injector.log if e["fault"] == kind]
        for kind in (FAILOVER, ALARM)
        if kind in faults
    }
    slow_stops = [t for t in stops if t is None or t > timing.STOP_SECONDS]
    result = {
        "minutes": minutes,
        "relays": relays,
        "rate": rate,
        "seed": seed,
        "bad_rows": bad_rows,
        "revision": services.git_revision(),
        "failover": failover,
        "alarm": alarm,
        "broker": "jetstream" if jetstream else "rabbitmq",
        "faults": injector.counts(),
        "fault_log": [e | {"at": round(float(str(e["at"])) - began_at, 1)} for e in injector.log],
        "good_events": len(good_set),
        "delivered": len(good_set & set(received)),
        "missing": len(missing),
        "missing_ids": missing[:50],
        "duplicates": sum(n - 1 for i, n in received.items() if i in good_set),
        "refused_transactions": produced.refused,
        "uncertain_commits": len(set(uncertain) - good_set),
        "uncertain_delivered": len((set(uncertain) - good_set) & set(received)),
        "stray_messages": len(stray),
        "bad_rows_written": len(bad),
        "bad_rows_not_failed": len(bad_not_failed),
        "bad_row_outcomes": bad_report,
        "exited_on_their_own": own_exits,
        "sigterm_exit_seconds": [None if t is None else round(t, 1) for t in stops],
        "sigterm_slower_than_bound": len(slow_stops),
        # When relay probe live found a relay stale, and how long: seconds from the start.
        "restarted_hung": dict(restarted),
        "hung": {
            r.name: [[round(a - began_at, 1), round(b - a, 1)] for a, b in r.hung]
            for r in fleet
            if r.hung
        },
        "resumed_seconds": resumed,
        "resumed_slower_than_bound": sum(t is None for ts in resumed.values() for t in ts),
        "drain_after_faults_seconds": round(drain_seconds, 1),
        "statuses": statuses,
        "unfinished_after_drain": unfinished,
        "wall_seconds": round(time.monotonic() - began, 1),
        "forced_stops_logged": sum(log.count("still stopping") for log in logs.values()),
    }
    if stored is not None:
        # On JetStream "duplicates" are messages the stream *stored* twice (the goal: 0);
        # the republishes the faults caused show in those it dropped as already stored.
        result["stream_messages"] = sum(stored.by_outbox_id.values())
        result["stream_same_message_id"] = stored.same_message_id
        result["republishes_dropped_by_stream"] = chaos_stream.dropped_republishes(logs)
    slow_resumes = result["resumed_slower_than_bound"]
    in_stream_twice = jetstream and (result["duplicates"] or result["stream_same_message_id"])
    result["ok"] = not (
        missing or own_exits or slow_stops or stray or unfinished or slow_resumes or in_stream_twice
    ) and (not bad_rows or not bad_not_failed)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--relays", type=int, default=3, help="relay dispatch --loop processes")
    p.add_argument("--rate", type=float, default=100.0, help="good events committed a second")
    p.add_argument(
        "--bad-rows",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write issue 37's bad rows among the good ones (--no-bad-rows: good rows only)",
    )
    p.add_argument("--seed", type=int, default=38)
    p.add_argument("--out", help="also write the JSON result to this file")
    p.add_argument("--logs", help="copy the relays' logs into this directory")
    p.add_argument(
        "--restart-hung",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="SIGTERM and restart a relay `relay probe live` finds stale, as Kubernetes would "
        "(--no-restart-hung: leave it, and see what its leases hold)",
    )
    p.add_argument(
        "--failover",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the database is a throw-away PostgreSQL primary and standby, failed over at random "
        "(default: when this machine has PostgreSQL's server binaries)",
    )
    p.add_argument(
        "--jetstream",
        action="store_true",
        help="the relays publish to a NATS JetStream stream of the soak's own "
        "(RELAY_TEST_NATS_URL) instead of RabbitMQ; a message stored twice fails the soak",
    )
    p.add_argument(
        "--alarm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the broker is a throw-away RabbitMQ node, its memory alarm raised at random "
        "(default: when this machine has rabbitmq-server and erl)",
    )
    ns = p.parse_args(argv)
    failover = failover_possible() if ns.failover is None else ns.failover
    alarm = (alarm_possible() and not ns.jetstream) if ns.alarm is None else ns.alarm
    if alarm and ns.jetstream:
        p.error("--alarm raises a RabbitMQ node's alarm: not with --jetstream")
    if failover and not failover_possible():
        p.error("--failover needs PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup)")
    if alarm and not alarm_possible():
        p.error("--alarm needs rabbitmq-server and erl")
    # A stopped soak (SIGTERM) still kills its relays, closes its proxies, drops its database.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(
        ns.minutes,
        ns.relays,
        ns.rate,
        ns.bad_rows,
        ns.seed,
        ns.logs,
        restart_hung=ns.restart_hung,
        failover=failover,
        alarm=alarm,
        jetstream=ns.jetstream,
    )
    text = json.dumps(result, indent=2, default=str)
    if ns.out:
        Path(ns.out).write_text(text + "\n")
    print(text)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
