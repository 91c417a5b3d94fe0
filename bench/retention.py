"""Retention at volume (issue 25): does the table level off under a sustained producer, and does
a backlog of sent rows past the retention get purged while delivery goes on?

- ``sustained``: per database, a producer process commits ``rate`` rows a second (transactions
  of ``rate * 0.05`` rows, plain multi-row INSERTs) for ``minutes``, drained by ``processes`` x
  ``relay dispatch --loop`` with ``RELAY_RETENTION_SECONDS=60``; once with the purger every
  ``interval`` seconds, once with it never due for ``baseline_minutes`` (the two runs take
  turns). Every ``sample``
  seconds: rows in the table, its size on disk (``pg_total_relation_size``; on MariaDB
  ``information_schema.tables``' data + index length, InnoDB's estimate), events sent since the
  last sample and their commit-to-sent lag (``sent_at - created_at`` of the rows sent in the
  window; p99 over the run's second half). Nobody consumes: the bound queue is purged at each
  sample.
- ``catchup``: the same database kind filled with ``backlog`` sent rows sent a day ago, then
  the same producer and relays with the purger on: how long until no row of that backlog is
  left, and the rate and lag meanwhile, against the sustained run without purges. It ends
  :data:`CATCHUP_MARGIN_SECONDS` after that (or after ``minutes`` if it never catches up).
  (Not "until no row is past the retention": with a purge every 10 s, up to 10 s of the
  producer's rows are past a 60 s retention at any moment, so that count never reaches 0.)

PostgreSQL runs on a throw-away server of the benchmark's own (:mod:`tools.pgserver`) with
PostgreSQL's defaults, durable (``fsync`` on), unless ``--postgres shared``: the shared server
of this machine runs with ``autovacuum = off``, under which no deleted row's space is ever
reused and no purge can hold a table's size (the first 20-minute run here measured 4.5 GB and
6.4 million dead row versions after 16 minutes of a table that held about 200,000 live rows).

``python -m bench --only retention [--minutes M] [--baseline-minutes B] [--backlog N]
[--rate R]`` or ``python -m bench.retention --minutes 20 --backlog 10000000 --rate 10000``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import signal
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from bench import procs, rows, services
from bench.timing import percentile, relay_env
from relay.store.operations.retention import RetentionStore
from relay.store.schema.tables import outbox
from tools import mariaserver, pgserver

RETENTION_SECONDS = 60
PERIOD = 0.05
#: How long the catch-up run goes on once no row of the backlog is left (the table then holds
#: what the sustained run holds).
CATCHUP_MARGIN_SECONDS = 60.0
KINDS = {"postgresql": "postgresql", "mariadb": "mariadb"}
#: The MariaDB server's settings the results record.
MARIADB_SHOWN = (
    "version",
    "innodb_buffer_pool_size",
    "innodb_log_file_size",
    "innodb_io_capacity",
    "innodb_flush_log_at_trx_commit",
    "innodb_flush_method",
    "innodb_purge_threads",
)
#: What the bench runs: ``sustained`` (with purges and without) and ``catchup`` (from a backlog).
SCENARIOS = ("sustained", "catchup")
#: The benchmark's own PostgreSQL: the server's defaults (autovacuum on), durable commits.
OWN_POSTGRES_SETTINGS: dict[str, str] = {}
#: PostgreSQL's view of the outbox's dead row versions and vacuums, sampled beside its size.
_VACUUM = (
    "SELECT n_dead_tup, autovacuum_count + vacuum_count FROM pg_stat_user_tables "
    "WHERE relname = 'outbox'"
)
#: InnoDB's view, sampled beside the size on MariaDB: the undo history its background purge has
#: not yet removed, the redo written since the last checkpoint, and (as counts since the last
#: sample) pages read from disk, waits for a free page, row lock waits.
_INNODB_LEVELS = {
    "Innodb_history_list_length": "history_len",
    "Innodb_checkpoint_age": "checkpoint_age",
}
_INNODB_COUNTS = {
    "Innodb_buffer_pool_reads": "disk_reads",
    "Innodb_buffer_pool_wait_free": "wait_free",
    "Innodb_row_lock_waits": "lock_waits",
}
_INNODB = "SHOW GLOBAL STATUS WHERE Variable_name IN ({})".format(
    ", ".join(f"'{n}'" for n in [*_INNODB_LEVELS, *_INNODB_COUNTS])
)

_LAG = {
    "postgresql": "extract(epoch from sent_at - created_at)",
    "mariadb": "timestampdiff(MICROSECOND, created_at, sent_at) / 1e6",
}
_SIZE = {
    "postgresql": "SELECT pg_total_relation_size('outbox')",
    "mariadb": "SELECT data_length + index_length FROM information_schema.tables "
    "WHERE table_schema = DATABASE() AND table_name = 'outbox'",
}
#: The statistics' row count, read instead of ``count(*)`` on a large table (a count of 10,000,000
#: rows every sample would cost the catch-up run a good share of a core it measures).
_ESTIMATE = {
    "postgresql": "SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'outbox'",
    "mariadb": "SELECT table_rows FROM information_schema.tables "
    "WHERE table_schema = DATABASE() AND table_name = 'outbox'",
}
#: Tables up to this many rows (by the statistics) are counted exactly, every EXACT_EVERY-th
#: sample (a minute at the default 5 s); the other samples read the statistics' count.
EXACT_ROWS_UP_TO = 1_000_000
EXACT_EVERY = 12
#: Sent rows past the retention are counted up to this many at every sample (the catch-up's
#: backlog shows in the table's rows; "caught up" needs only zero): each counted row is read
#: from the table (its status), 100,000 of them took 0.12 s of the server a sample.
BEHIND_COUNTED_UP_TO = 10_000
_OLD = {
    "postgresql": "now() - interval '1 day'",
    "mariadb": "UTC_TIMESTAMP(6) - INTERVAL 1 DAY",
}
#: The catch-up's backlog left: its rows were sent a day ago, the producer's within the run.
#: Counted up to BEHIND_COUNTED_UP_TO, from the start of ``ix_outbox_sent_at``.
_BACKLOG_LEFT = {
    kind: "SELECT count(*) FROM (SELECT 1 AS one FROM outbox WHERE sent_at < "
    f"{cutoff} ORDER BY sent_at LIMIT {BEHIND_COUNTED_UP_TO}) AS backlog"
    for kind, cutoff in {
        "postgresql": "now() - interval '1 hour'",
        "mariadb": "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR",
    }.items()
}


def _produce(
    url: str, rate: int, seconds: float, ready: Any, go: Any, stop: Any, done: Any
) -> None:
    """Commit ``rate`` rows a second for ``seconds`` from ``go`` (a transaction every PERIOD),
    or until ``stop``, as plain SQL; report the rows committed and the seconds taken."""
    engine = sa.create_engine(url)
    per_tx = max(1, round(rate * PERIOD))
    values = [
        {"event_type": rows.EVENT_TYPE, "payload": rows.payload(n), "headers": rows.HEADERS}
        for n in range(per_tx)
    ]
    stmt = sa.insert(outbox)
    with engine.connect():
        pass  # connected before the clock
    ready.set()
    go.wait()
    committed, start = 0, time.monotonic()
    next_at = start
    while time.monotonic() - start < seconds and not stop.is_set():
        with engine.begin() as conn:
            conn.execute(stmt, values)
        committed += per_tx
        next_at += PERIOD
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    elapsed = time.monotonic() - start
    engine.dispose()
    done.put((committed, elapsed))


def _prefill(url: str, kind: str, count: int) -> float:
    """``count`` sent rows sent a day ago; returns the seconds it took."""
    started = time.perf_counter()
    engine = sa.create_engine(url)
    chunk = 200_000 if kind == "postgresql" else 20_000
    series = (
        "generate_series(1, :n) AS g"
        if kind == "postgresql"
        else "(SELECT seq AS g FROM seq_1_to_{n}) AS s"
    )
    cast = "CAST(:payload AS jsonb)" if kind == "postgresql" else ":payload"
    hcast = "CAST(:headers AS jsonb)" if kind == "postgresql" else ":headers"
    done = 0
    while done < count:
        n = min(chunk, count - done)
        sql = (
            "INSERT INTO outbox (event_type, payload, headers, status, attempt, created_at, "
            f"updated_at, sent_at) SELECT :event_type, {cast}, {hcast}, 'sent', 1, {_OLD[kind]}, "
            f"{_OLD[kind]}, {_OLD[kind]} FROM {series.format(n=n)}"
        )
        with engine.begin() as conn:
            conn.execute(
                sa.text(sql),
                {
                    "event_type": rows.EVENT_TYPE,
                    "payload": json.dumps(rows.PAYLOAD),
                    "headers": json.dumps(rows.HEADERS),
                    "n": n,
                },
            )
        done += n
    if kind == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE outbox"))
    engine.dispose()
    return time.perf_counter() - started


class _Sampler:
    """The table's rows, size, and the rows sent since the last look with their lags.

    It shares the 2 cores with what it measures, so every look is cheap: the rows sent since
    the last look through ``ix_outbox_sent_at``, the size and the statistics' row count from
    the catalog; an exact ``count(*)`` only every :data:`EXACT_EVERY` looks (and never above
    :data:`EXACT_ROWS_UP_TO` rows), and the rows past the retention only where a purger runs.
    Each sample records what the look itself took (``sample_ms``)."""

    def __init__(self, url: str, kind: str, *, purging: bool, backlog: bool = False) -> None:
        self.engine, self.kind, self.purging = sa.create_engine(url), kind, purging
        self.backlog = backlog
        self.retention = RetentionStore.from_url(url)
        self.since = self._now()
        self.looks = 0
        self.innodb_before: dict[str, int] = {}

    def _now(self) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.text("SELECT max(sent_at) FROM outbox")).scalar()

    def sample(self) -> tuple[dict[str, Any], list[float]]:
        lag = _LAG[self.kind]
        where = "sent_at > :since" if self.since is not None else "sent_at IS NOT NULL"
        exact = self.looks % EXACT_EVERY == 0
        self.looks += 1
        with self.engine.connect() as conn:
            found = conn.execute(
                sa.text(f"SELECT sent_at, {lag} FROM outbox WHERE {where}"), {"since": self.since}
            ).all()
            count = int(conn.execute(sa.text(_ESTIMATE[self.kind])).scalar() or 0)
            exact = exact and count <= EXACT_ROWS_UP_TO
            if exact:
                count = int(conn.execute(sa.text("SELECT count(*) FROM outbox")).scalar_one())
            size = int(conn.execute(sa.text(_SIZE[self.kind])).scalar() or 0)
            vacuum = conn.execute(sa.text(_VACUUM)).one() if self.kind == "postgresql" else None
            innodb = (
                {str(k): int(v) for k, v in conn.execute(sa.text(_INNODB)).all()}
                if self.kind == "mariadb"
                else None
            )
            left = (
                conn.execute(sa.text(_BACKLOG_LEFT[self.kind])).scalar() if self.backlog else None
            )
        if found:
            self.since = max(r[0] for r in found)
        lags = [float(r[1]) for r in found]
        figures: dict[str, Any] = {"rows": count, "rows_exact": exact, "bytes": size}
        figures["sent"] = len(lags)
        if vacuum is not None:
            figures.update(dead_rows=int(vacuum[0]), vacuums=int(vacuum[1]))
        if left is not None:
            figures["backlog_left"] = int(left)
        if innodb is not None:
            figures.update({label: innodb.get(n) for n, label in _INNODB_LEVELS.items()})
            for n, label in _INNODB_COUNTS.items():
                if n in self.innodb_before and n in innodb:
                    figures[label] = innodb[n] - self.innodb_before[n]
            self.innodb_before = innodb
        if self.purging:
            behind = self.retention.past_retention(RETENTION_SECONDS, BEHIND_COUNTED_UP_TO)
            figures["past_retention"] = behind
        return figures, lags

    def close(self) -> None:
        self.engine.dispose()
        self.retention.dispose()


def _run(
    url: str,
    kind: str,
    route: services.Route,
    *,
    rate: int,
    seconds: float,
    processes: int,
    interval: float | None,
    sample_seconds: float,
    until_caught_up: bool = False,
) -> dict[str, Any]:
    """One producer + relays run; the samples and its summary (second half, or the catch-up)."""
    extra = {
        "RELAY_RETENTION_SECONDS": str(RETENTION_SECONDS),
        # Never due within the run: the purger's first run (at start) finds nothing to delete.
        "RELAY_PURGE_INTERVAL_SECONDS": str(interval or 10**9),
    }
    env = relay_env(url, route, None, extra)
    sampler = _Sampler(url, kind, purging=interval is not None, backlog=until_caught_up)
    samples: list[dict[str, Any]] = []
    lags: list[tuple[float, list[float]]] = []
    ctx = mp.get_context("spawn")
    done: Any = ctx.Queue()
    ready, go, stop = ctx.Event(), ctx.Event(), ctx.Event()
    producer = ctx.Process(target=_produce, args=(url, rate, seconds, ready, go, stop, done))
    producer.start()
    if not ready.wait(120):
        raise RuntimeError("the producer did not start")
    with procs.workers(procs.relay_command(), env, processes, ready=procs.RELAY_READY):
        go.set()
        started = time.monotonic()
        caught_up_at: float | None = None
        last = started
        while producer.is_alive() or not samples:
            time.sleep(max(0.0, last + sample_seconds - time.monotonic()))
            now = time.monotonic()
            figures, window = sampler.sample()
            route.purge()
            t = now - started
            figures.update(
                t=round(t, 1),
                rate=figures["sent"] / (now - last),
                # The sampler's own statements share the machine with what it measures.
                sample_ms=round((time.monotonic() - now) * 1000, 1),
            )
            ordered = sorted(window)
            figures["p50_ms"] = percentile(ordered, 0.5) * 1000 if window else None
            figures["p99_ms"] = percentile(ordered, 0.99) * 1000 if window else None
            samples.append(figures)
            lags.append((t, window))
            last = now
            if until_caught_up and caught_up_at is None and figures.get("backlog_left") == 0:
                caught_up_at = t
            if caught_up_at is not None and t >= caught_up_at + CATCHUP_MARGIN_SECONDS:
                stop.set()
            if not producer.is_alive():
                break
        producer.join()
        committed, produced_for = done.get(timeout=10)
    sampler.close()
    if until_caught_up:
        chosen = [w for t, w in lags if caught_up_at is None or t <= caught_up_at]
        chosen_samples = [s for s in samples if caught_up_at is None or s["t"] <= caught_up_at]
    else:
        chosen = [w for t, w in lags if t > produced_for / 2]
        chosen_samples = [s for s in samples if s["t"] > produced_for / 2]
    flat = sorted(x for w in chosen for x in w)
    steady = _steady(samples, produced_for, caught_up_at)
    counted = [s for s in steady if s["rows_exact"]]
    return {
        "offered_rate": rate,
        "produced_rate": committed / produced_for,
        "seconds": round(produced_for, 1),
        "rate": statistics.median(s["rate"] for s in chosen_samples) if chosen_samples else None,
        "p50_ms": percentile(flat, 0.5) * 1000 if flat else None,
        "p99_ms": percentile(flat, 0.99) * 1000 if flat else None,
        "rows_end": samples[-1]["rows"],
        "rows_max": max(s["rows"] for s in samples),
        "bytes_end": samples[-1]["bytes"],
        "bytes_max": max(s["bytes"] for s in samples),
        # The steady state: the range over the run's second half (the catch-up: after it), of
        # the exact counts where there are any.
        "rows_steady": _span([s["rows"] for s in (counted or steady)]),
        "bytes_steady": _span([s["bytes"] for s in steady]),
        "caught_up_s": caught_up_at,
        "sample_ms_median": statistics.median(s["sample_ms"] for s in samples),
        "samples": samples,
    }


def _steady(
    samples: list[dict[str, Any]], produced_for: float, caught_up_at: float | None
) -> list[dict[str, Any]]:
    """The samples of the steady state: the second half, or after the catch-up."""
    start = produced_for / 2 if caught_up_at is None else caught_up_at
    return [s for s in samples if s["t"] > start]


def _span(values: list[int]) -> list[int] | None:
    return [min(values), max(values)] if values else None


@contextlib.contextmanager
def _fresh(kind: str, admin_url: str | None) -> Iterator[str]:
    with services.database("retention", KINDS[kind], admin_url=admin_url) as url:
        yield url


def _autovacuum(url: str) -> str:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        setting = str(conn.execute(sa.text("SHOW autovacuum")).scalar_one())
    engine.dispose()
    return setting


def run(
    amqp_url: str,
    minutes: float,
    backlog: int,
    rate: int,
    *,
    baseline_minutes: float | None = None,
    processes: int = 2,
    interval: float = 10.0,
    kinds: Sequence[str] = ("postgresql", "mariadb"),
    sample_seconds: float = 5.0,
    own_postgres: bool = True,
    mariadb_settings: str | None = None,
    scenarios: Sequence[str] = SCENARIOS,
) -> dict[str, Any]:
    """The scenarios (both unless told) on each database kind (see the module doc)."""
    seconds = minutes * 60
    baseline = (minutes if baseline_minutes is None else baseline_minutes) * 60
    out: dict[str, Any] = {
        "minutes": minutes,
        "baseline_minutes": baseline / 60,
        "backlog": backlog,
        "rate": rate,
        "processes": processes,
        "purge_interval_seconds": interval,
        "retention_seconds": RETENTION_SECONDS,
        "postgres_server": "own" if own_postgres else "shared",
        "mariadb_server": "shared" if mariadb_settings is None else f"own ({mariadb_settings})",
    }
    with services.route(amqp_url, "retention") as route, contextlib.ExitStack() as stack:
        admin: dict[str, str] = {}
        if own_postgres and "postgresql" in kinds:
            server = stack.enter_context(pgserver.server(OWN_POSTGRES_SETTINGS))
            admin["postgresql"] = server.admin_url
        if mariadb_settings is not None and "mariadb" in kinds:
            maria = stack.enter_context(mariaserver.server(mariaserver.PRESETS[mariadb_settings]))
            admin["mariadb"] = maria.admin_url
            out["mariadb_settings"] = maria.settings(*MARIADB_SHOWN)
        for i, kind in enumerate(kinds):
            res: dict[str, Any] = {}
            order = [True, False] if i % 2 == 0 else [False, True]
            if "sustained" not in scenarios:
                order = []  # the catch-up alone: no run without purges, so no ratios
            for purging in order:
                with _fresh(kind, admin.get(kind)) as url:
                    if kind == "postgresql":
                        res["autovacuum"] = _autovacuum(url)
                    name = "with_purges" if purging else "without_purges"
                    res[name] = _run(
                        url,
                        kind,
                        route,
                        rate=rate,
                        seconds=seconds if purging else baseline,
                        processes=processes,
                        interval=interval if purging else None,
                        sample_seconds=sample_seconds,
                    )
            if "catchup" in scenarios:
                with _fresh(kind, admin.get(kind)) as url:
                    prefill = _prefill(url, kind, backlog)
                    res["catchup"] = _run(
                        url,
                        kind,
                        route,
                        rate=rate,
                        seconds=seconds,
                        processes=processes,
                        interval=interval,
                        sample_seconds=sample_seconds,
                        until_caught_up=True,
                    )
                    res["catchup"]["prefill_s"] = prefill
            base = res.get("without_purges")
            for name in ("with_purges", "catchup"):
                if base and name in res:
                    r = res[name]
                    r["rate_vs_without"] = _ratio(r["rate"], base["rate"])
                    r["p99_vs_without"] = _ratio(r["p99_ms"], base["p99_ms"])
            out[kind] = res
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else a / b


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__)
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--baseline-minutes", type=float, help="the run without purges (default: M)")
    p.add_argument("--backlog", type=int, default=10_000_000)
    p.add_argument("--rate", type=int, default=10_000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--interval", type=float, default=10.0, help="RELAY_PURGE_INTERVAL_SECONDS")
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    p.add_argument(
        "--postgres",
        choices=["own", "shared"],
        default="own",
        help="a throw-away server with PostgreSQL's defaults (own), or BENCH_POSTGRES_URL's",
    )
    p.add_argument(
        "--mariadb",
        choices=["shared", *mariaserver.PRESETS],
        default="shared",
        help="BENCH_MARIADB_URL's server (shared), or a throw-away one with MariaDB's defaults "
        "(tools/mariaserver.py)",
    )
    p.add_argument(
        "--scenarios",
        nargs="+",
        default=list(SCENARIOS),
        choices=list(SCENARIOS),
        help="sustained (with and without purges) and/or catchup",
    )
    ns = p.parse_args(argv)
    # A stopped run (SIGTERM) still kills its throw-away servers and drops its databases.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(
        services.AMQP_URL,
        ns.minutes,
        ns.backlog,
        ns.rate,
        baseline_minutes=ns.baseline_minutes,
        processes=ns.processes,
        interval=ns.interval,
        kinds=ns.kinds,
        own_postgres=ns.postgres == "own",
        mariadb_settings=None if ns.mariadb == "shared" else ns.mariadb,
        scenarios=ns.scenarios,
    )
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
