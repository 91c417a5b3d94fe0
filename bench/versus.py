"""The relay against raw Kombu, measured as issue 14 does: N processes each, in the same run,
read from the growth of a bound queue's depth while no consumer runs.

- Raw Kombu: ``processes`` publishers, each a Kombu channel in confirm mode publishing its
  share of the relay's messages (built before the clock) with confirms awaited per 1,000
  (:func:`bench.baselines.kombu_windowed`). The clock starts when all are told to go.
- The relay's publisher alone (``relay_publisher``): as many processes, each publishing its
  share of the same events (claimed before the clock, no database) through
  :class:`relay.publishers.amqp.AmqpPublisher` in batches of 1,000, the relay's largest claim
  at the defaults. It tells the publishing path's share of the relay's rate from the
  database's.
- The relay: as many ``relay dispatch --loop`` at the defaults (the tick too); the clock
  starts at the commit of ``events`` pending rows.
- Optional baselines: ``relay dispatch --loop`` from another git revision's source
  (``git archive`` into a temporary folder, first on ``PYTHONPATH``), each on a database of
  its own that its own migration chain created (so it reads the indexes it was written for).

One connection polls the queue depth (passive ``queue_declare``) every 20 ms. ``rate`` is the
growth from the first poll that saw messages to the one that saw all of them over the time
between; ``rate_from_start`` is ``events`` over the time from the go signal or the commit. The
CPU is read from ``/proc`` at the same two moments, per message: the mode's processes
(``cpu_publishers``), the database's (``cpu_postgres``, see below) and every RabbitMQ process
(``cpu_rabbitmq``; whoever else uses it counts too), and ``cpu_vs_raw`` = the raw side's total
over this side's: the ratio the rates would show where the CPU is the only limit. The
modes take turns within each repetition (each repetition starts with the next mode), and only
one mode's processes run at a time. Every run must leave exactly ``events`` messages in the
queue.

On PostgreSQL each relay mode also reports ``wal_bytes_per_event``: the WAL the relay wrote
(``pg_current_wal_lsn()`` from the commit of the pending rows to the last outcome) over the
events; ``--variant RELAY_DELETE_ON_SEND=1`` sets delete on send against the default.

On PostgreSQL the database's CPU (``cpu_postgres``) is that of the backends serving the
measure's database; the server's own processes (WAL writer, checkpointer, ...) are read as
``cpu_postgres_server``, outside the total (they serve every database of the shared server);
other databases' backends are not read. MariaDB is one process, counted whole
(``cpu_mariadb``), whoever it served.

``python -m bench.versus [--events 20000] [--processes 4] [--reps 3] [--baseline REV ...]
[--variant RELAY_BATCH_SIZE=500 ...] [--database postgresql|mariadb]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kombu
import sqlalchemy as sa

from bench import baselines, procs, rows, services
from bench.timing import Workload, summarize
from relay.publishers import message

#: The confirm window of the raw publishers.
WINDOW = 1000
POLL_SECONDS = 0.02
ROOT = Path(__file__).resolve().parent.parent


class _Depth:
    """The queue's depth over one long-lived connection."""

    def __init__(self, route: services.Route) -> None:
        self._conn = kombu.Connection(route.url)
        self._channel: Any = self._conn.channel()
        self._queue = route.queue_name

    def __call__(self) -> int:
        return int(self._channel.queue_declare(queue=self._queue, passive=True).message_count)

    def close(self) -> None:
        self._conn.release()


#: The servers whose CPU a message costs besides the publishers' own (pgrep patterns), by the
#: name of the database the relay runs on; MariaDB's is one process for every client.
SERVERS = {
    "postgresql": {"postgres": "postgres", "rabbitmq": "beam.smp"},
    "mariadb": {"mariadb": "mariadbd", "rabbitmq": "beam.smp"},
}


def _server_pids(engine: sa.Engine) -> dict[str, list[int]]:
    """The server processes whose CPU this measure reads. On PostgreSQL, ``postgres``: the
    backends (and autovacuum workers) of the measure's own database, which count in the total;
    ``postgres_server``: the server's own processes (WAL writer, checkpointer, ...), reported
    beside it but left out of the total, since on the shared machine they work for every
    database (raw Kombu, which uses none, read up to 16 µs a message of them under load).
    Other databases' backends are not read at all."""
    kind = engine.dialect.name if engine.dialect.name == "postgresql" else "mariadb"
    pids = {name: procs.pids_of(pattern) for name, pattern in SERVERS[kind].items()}
    if kind == "postgresql":
        sessions = sa.text(
            "SELECT pid, datname = current_database() FROM pg_stat_activity "
            "WHERE datname IS NOT NULL"
        )
        with engine.connect() as conn:
            ours: dict[int, bool] = dict(conn.execute(sessions).tuples().all())
        server = pids.pop("postgres")
        pids["postgres"] = [pid for pid in server if ours.get(pid)]
        pids[SERVER_ONLY] = [pid for pid in server if pid not in ours]
    return pids


#: The part read beside the others but left out of ``cpu_total`` (:func:`_server_pids`).
SERVER_ONLY = "postgres_server"


def _cpu(
    running: Sequence[subprocess.Popen[bytes]], servers: dict[str, list[int]]
) -> dict[str, dict[int, float]]:
    """CPU seconds so far of each process, by part: a process that ended in between drops out
    of the difference instead of taking its whole life's CPU away from it."""
    parts = {**servers, "publishers": [p.pid for p in running]}
    return {name: {pid: procs.cpu_seconds([pid]) for pid in pids} for name, pids in parts.items()}


def _spent(
    before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]
) -> dict[str, float]:
    """CPU seconds each part spent between two readings, over the processes alive at both."""
    return {
        name: sum(after[name][pid] - start for pid, start in pids.items() if after[name].get(pid))
        for name, pids in before.items()
    }


def _watch(
    depth: _Depth,
    events: int,
    started: float,
    running: Sequence[subprocess.Popen[bytes]],
    engine: sa.Engine,
) -> dict[str, float]:
    """Poll until the queue holds ``events`` messages; the rates (see the module doc), and the
    CPU each part spent meanwhile in µs a message (``cpu_*``): the publishers (relay or raw),
    the database (:func:`_server_pids`, of ``engine``'s database) and RabbitMQ (every process,
    whoever it served)."""
    servers = _server_pids(engine)
    before = _cpu(running, servers)
    first: tuple[float, int] | None = None
    deadline = started + 300
    while True:
        seen, now = depth(), time.perf_counter()
        if first is None and seen > 0:
            first = (now, seen)
        if seen >= events:
            break
        if now > deadline:
            raise TimeoutError(f"queue held {seen} of {events} messages after 300 s")
        if all(p.poll() is not None for p in running) and seen < events:
            time.sleep(0.5)  # the last confirms are in; the depth follows at once
            if depth() < events:
                raise RuntimeError(f"every worker exited with {depth()} of {events} delivered")
        time.sleep(POLL_SECONDS)
    assert first is not None
    growth = (events - first[1]) / (now - first[0]) if now > first[0] else float("nan")
    spent = _spent(before, _cpu(running, servers))
    cpu = {f"cpu_{k}": seconds / events * 1e6 for k, seconds in spent.items()}
    cpu["cpu_total"] = sum(v for k, v in cpu.items() if k != f"cpu_{SERVER_ONLY}")
    return {"rate": growth, "rate_from_start": events / (now - started), **cpu}


def _raw(
    route: services.Route,
    depth: _Depth,
    events: int,
    processes: int,
    engine: sa.Engine,
    kind: str = "raw",
) -> dict[str, float]:
    """``processes`` publishers of ``kind`` (raw Kombu, or the relay's publisher), prepared
    before the clock and told to go at once."""
    share = events // processes
    argv = [sys.executable, "-m", "bench.versus", kind, route.url, route.exchange_name]
    with contextlib.ExitStack() as stack:
        running: list[subprocess.Popen[bytes]] = []
        for i in range(processes):
            count = share if i < processes - 1 else events - share * (processes - 1)
            running += stack.enter_context(
                procs.workers([*argv, str(count), str(i * share)], {}, 1, ready=procs.BENCH_READY)
            )
        started = time.perf_counter()
        for p in running:
            p.send_signal(signal.SIGUSR1)
        rates = _watch(depth, events, started, running, engine)
        for p in running:
            p.send_signal(signal.SIGUSR1)  # read: it may exit now
        for p in running:
            if p.wait(timeout=60) != 0:
                raise procs.WorkerFailed(f"raw publisher exited with {p.returncode}")
    return rates


def _relay(work: Workload, engine: sa.Engine, depth: _Depth, events: int) -> dict[str, float]:
    with procs.workers(procs.relay_command(), work.env(), work.processes, ready=work.ready) as w:
        time.sleep(0.3)  # every worker has finished its first, empty claim
        rows.insert_pending(engine, events)
        started = time.perf_counter()
        wal_start = _wal_lsn(engine)
        rates = _watch(depth, events, started, w, engine)
        deadline = time.monotonic() + 30
        while rows.unfinished(engine) and time.monotonic() < deadline:
            time.sleep(0.05)  # the last outcomes are recorded after the confirms
        wal_end = _wal_lsn(engine)
    if wal_start is not None and wal_end is not None:
        # The relay's own WAL (claims and outcomes; the producer's inserts came before).
        rates["wal_bytes_per_event"] = (wal_end - wal_start) / events
    return rates


def _wal_lsn(engine: sa.Engine) -> int | None:
    """PostgreSQL's current WAL position in bytes (None elsewhere)."""
    if engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        lsn = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"
        return int(conn.execute(sa.text(lsn)).scalar_one())


def run(
    amqp_url: str,
    events: int,
    reps: int,
    processes: int,
    baselines: Sequence[str] = (),
    variants: Sequence[str] = (),
    database: str = "postgresql",
) -> dict[str, Any]:
    """Every mode ``reps`` times, taking turns; rates in msg/s and relay/raw ratios per rep;
    the relay on ``database`` (``postgresql`` or ``mariadb``).

    ``variants`` are the checkout's relay with other settings, each ``KEY=VALUE[,KEY=VALUE]``
    (``RELAY_BATCH_SIZE=500``), measured as one more mode named ``relay[KEY=VALUE]``."""
    runs: dict[str, list[dict[str, float]]] = {"raw_kombu": [], "relay_publisher": [], "relay": []}
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(services.database("versus", database))
        route = stack.enter_context(services.route(amqp_url, "versus"))
        engine = sa.create_engine(url)
        stack.callback(engine.dispose)
        depth = _Depth(route)
        stack.callback(depth.close)
        # At the defaults: the drain harness's 50 ms tick (RELAY_TICK_SECONDS) is left out, an
        # empty value being the default; the wake-up finds the committed rows.
        defaults = {"RELAY_TICK_SECONDS": ""}
        ours = Workload([], procs.RELAY_READY, processes, None, url, route, defaults)
        relays = {"relay": (ours, engine)}
        for rev in baselines:
            # Its own database, migrated by its own chain: its claim reads the indexes it made.
            path = stack.enter_context(services.source_of(rev))
            own = stack.enter_context(services.database("versus", database, source=path))
            own_engine = sa.create_engine(own)
            stack.callback(own_engine.dispose)
            runs[f"relay@{rev}"] = []
            here = {"PYTHONPATH": path}
            relays[f"relay@{rev}"] = (
                Workload([], procs.RELAY_READY, processes, None, own, route, {**defaults, **here}),
                own_engine,
            )
        for variant in variants:
            extra = defaults | dict(pair.split("=", 1) for pair in variant.split(","))
            runs[f"relay[{variant}]"] = []
            relays[f"relay[{variant}]"] = (
                Workload([], procs.RELAY_READY, processes, None, url, route, extra),
                engine,
            )
        modes: list[str | None] = [None, PUBLISHER, *relays]  # None: raw Kombu
        for _, mode_engine in relays.values():
            rows.clear(mode_engine)
        route.purge()
        for rep in range(reps):
            # Each repetition starts with another mode, so none always runs first.
            for name in modes[rep % len(modes) :] + modes[: rep % len(modes)]:
                if name is None:
                    runs["raw_kombu"].append(_raw(route, depth, events, processes, engine))
                elif name == PUBLISHER:
                    runs[name].append(_raw(route, depth, events, processes, engine, PUBLISHER))
                else:
                    work, mode_engine = relays[name]
                    runs[name].append(_relay(work, mode_engine, depth, events))
                    rows.clear(mode_engine)
                _check(route, events)
    out: dict[str, Any] = {"events": events, "processes": processes, "window": WINDOW}
    out["database"] = database
    raw = [r["rate"] for r in runs["raw_kombu"]]
    for name, measured in runs.items():
        rates = [r["rate"] for r in measured]
        out[name] = summarize(rates)
        out[name]["from_start"] = summarize([r["rate_from_start"] for r in measured])
        for key in sorted(k for k in measured[0] if k.startswith(("cpu_", "wal_"))):
            out[name][key] = statistics.median(r[key] for r in measured)
            out[name].setdefault("cpu_runs", {})[key] = [round(r[key], 1) for r in measured]
        if name != "raw_kombu":
            ratios = [a / b for a, b in zip(rates, raw, strict=True)]
            out[name]["vs_raw"] = {"median": statistics.median(ratios), "runs": ratios}
            # What the rates would be where the CPU is the only limit (2 shared cores, nothing
            # else running): the raw side's CPU per message over this side's.
            # A side whose processes all exited before their CPU was read (a smoke run's few
            # events) reads 0: no ratio rather than a division by zero.
            if out[name].get("cpu_total", 0.0) > 0:
                out[name]["cpu_vs_raw"] = out["raw_kombu"]["cpu_total"] / out[name]["cpu_total"]
    return out


def _check(route: services.Route, events: int) -> None:
    held = route.purge()
    if held != events:
        raise RuntimeError(f"the queue held {held} messages, expected {events}")


def _ready() -> None:
    """Tell the harness this publisher is ready, and wait for its go (SIGUSR1)."""
    print(procs.BENCH_READY, flush=True)
    signal.sigwait({signal.SIGUSR1})


def _raw_worker(url: str, exchange: str, count: int, offset: int) -> int:
    """One raw publisher: build the messages, connect, say ready, wait for SIGUSR1, publish,
    wait for SIGUSR1 again (its CPU is read while it lives)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    msgs = [message.build(rows.claimed(n)) for n in range(offset + 1, offset + count + 1)]
    route = services.Route(url, exchange, "")
    baselines.kombu_windowed(route, msgs, WINDOW, before_clock=_ready)
    signal.sigwait({signal.SIGUSR1})  # alive until the harness has read its CPU
    return 0


def _publisher_worker(url: str, exchange: str, count: int, offset: int) -> int:
    """The relay's publisher alone: the same events as claimed rows, published in batches of
    ``WINDOW`` after the go, each batch's confirms awaited as the relay awaits them."""
    from relay.publishers.amqp import AmqpPublisher

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    events = [rows.claimed(n) for n in range(offset + 1, offset + count + 1)]
    publisher = AmqpPublisher(url, exchange)
    try:
        publisher.connect()
        _ready()
        for start in range(0, len(events), WINDOW):
            batch = events[start : start + WINDOW]
            result = publisher.publish(batch)
            if len(result.confirmed) != len(batch):
                raise RuntimeError(f"confirmed {len(result.confirmed)} of {len(batch)}")
        signal.sigwait({signal.SIGUSR1})  # alive until the harness has read its CPU
    finally:
        publisher.close()
    return 0


#: The mode name of the relay's publisher alone.
PUBLISHER = "relay_publisher"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    workers = {"raw": _raw_worker, PUBLISHER: _publisher_worker}
    if args[:1] and args[0] in workers:
        return workers[args[0]](args[1], args[2], int(args[3]), int(args[4]))
    p = argparse.ArgumentParser(prog="python -m bench.versus", description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--baseline", action="append", default=[], metavar="REV")
    p.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]")
    p.add_argument("--database", choices=["postgresql", "mariadb"], default="postgresql")
    p.add_argument("--out", type=Path, help="also write the result here as JSON")
    ns = p.parse_args(args)
    result = run(
        services.AMQP_URL, ns.events, ns.reps, ns.processes, ns.baseline, ns.variant, ns.database
    )
    text = json.dumps(result, indent=2)
    print(text)
    if ns.out is not None:
        ns.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
