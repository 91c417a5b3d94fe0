"""What an idle relay costs (issue 51), and how soon it delivers the first event after a quiet
spell.

For each runner, ``relay dispatch --loop`` at the defaults, the Celery fleet (beat + one
solo-pool worker), each on a fresh PostgreSQL database of its own, and ``relay dispatch --loop``
over two such databases of one server (``RELAY_DATABASES``: the many-databases runner, its
server watch's looks counted in the first database), with nothing to send:

- CPU: the user + system CPU of all the runner's processes (and their children) from
  ``/proc/PID/stat`` over ``seconds`` of quiet, as % of one core;
- transactions: the growth of ``xact_commit + xact_rollback`` of the runner's own databases in
  ``pg_stat_database`` over the same window, read from the server's ``postgres`` database, so
  the reads themselves count nothing there (and nothing else uses the runner's database: the
  consumer reads the broker);
- first event: one event committed (plain SQL, the time noted just before ``COMMIT``) after
  that minute of silence, commit to consumer; then ``samples`` more, each after
  ``gap`` seconds of silence (long enough for any back-off to reach its slowest look) plus up
  to 0.5 s at random, so that the commits fall at any moment between two looks.

The runner is started, one event is delivered to warm it, and it rests ``settle`` seconds
before the window opens. With ``--baseline REV`` the relay of that git revision runs the same
way beside the checkout (its own database, migrated by its own chain: ``bench.versus``'s
mechanism; Celery runs in that source folder, as it imports ``-A relay`` from there).

``python -m bench.idle [--seconds 60] [--samples 5] [--gap 3] [--baseline REV ...]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import procs, services
from bench.timing import Arrivals

DISPATCH, CELERY = "relay dispatch --loop", "beat + 1 Celery worker"
MANY = "relay dispatch --loop, RELAY_DATABASES of 2"
RUNNERS = (DISPATCH, CELERY, MANY)
#: Seconds the runner rests after its warm-up event before the window opens.
SETTLE_SECONDS = 5.0
#: Up to this much is added at random to each sample's silence (a fixed seed).
JITTER_SECONDS = 0.5


def descendants(pids: Sequence[int]) -> list[int]:
    """``pids`` and every process below them (a prefork pool's children, say)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += parents.get(pid, [])
    return found


def transactions(admin: sa.Engine, databases: Sequence[str]) -> int:
    """Transactions the server counted in ``databases`` so far (commits and rollbacks)."""
    with admin.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database"
                    " WHERE datname IN :d"
                ).bindparams(sa.bindparam("d", expanding=True)),
                {"d": list(databases)},
            ).scalar_one()
        )


def _commit_one(engine: sa.Engine, n: int) -> tuple[int, float]:
    """One event in a transaction of its own (plain SQL); its id and the time before COMMIT."""
    with engine.connect() as conn:
        stmt = "INSERT INTO outbox (event_type, payload) VALUES ('bench.idle', :p) RETURNING id"
        row_id = int(conn.execute(sa.text(stmt), {"p": json.dumps({"n": n})}).scalar_one())
        began = time.monotonic()
        conn.commit()
    return row_id, began


def _first_event(engine: sa.Engine, arrivals: Arrivals, n: int) -> float:
    """Commit one event and wait for it: its commit-to-consumer latency in ms."""
    row_id, began = _commit_one(engine, n)
    if arrivals.wait_for([row_id], 30):
        raise RuntimeError("an event committed after the quiet spell never arrived")
    return round((arrivals.at[row_id] - began) * 1000, 1)


@contextlib.contextmanager
def _runner(runner: str, env: dict[str, str], source: str | None) -> Iterator[list[int]]:
    if runner in (DISPATCH, MANY):
        started = procs.workers(procs.relay_command(), env, 1, ready=procs.RELAY_READY)
    else:
        # Celery puts its working directory first on sys.path: run it in the revision's source.
        started = procs.celery_fleet(env, 1, workdir=source)
    with started as running:
        yield [p.pid for p in running]


def one(
    runner: str,
    source: str | None,
    seconds: float,
    samples: int,
    gap: float,
) -> dict[str, Any]:
    """One runner of one revision (``source``: its unpacked ``relay``; None: the checkout)."""
    admin = sa.create_engine(services.PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with contextlib.ExitStack() as dbs:
        urls = [
            dbs.enter_context(services.database("idle", source=source))
            for _ in range(2 if runner == MANY else 1)
        ]
        url = urls[0]  # where the events are committed
        names = [str(sa.make_url(u).database) for u in urls]
        exchange = f"bench.idle.{uuid.uuid4().hex[:8]}"
        where = (
            {"RELAY_DATABASES": ",".join(f"db{i}={u}" for i, u in enumerate(urls))}
            if runner == MANY
            else {"RELAY_DATABASE_URL": url}
        )
        env = {
            **where,
            "RELAY_BROKER_URL": services.AMQP_URL,
            "RELAY_EXCHANGE": exchange,
            "RELAY_QUEUE": f"bench.idle.tasks.{uuid.uuid4().hex[:8]}",
        }
        if source is not None:
            env["PYTHONPATH"] = source
        engine = sa.create_engine(url)
        try:
            with (
                Arrivals(services.AMQP_URL, exchange) as arrivals,
                _runner(runner, env, source) as pids,
            ):
                warm = _first_event(engine, arrivals, 0)
                time.sleep(SETTLE_SECONDS)  # the quiet before the window, not synchronization
                every = descendants(pids)
                cpu0, xact0 = procs.cpu_seconds(every), transactions(admin, names)
                t0 = time.monotonic()
                time.sleep(seconds)  # the idle window measured
                elapsed = time.monotonic() - t0
                cpu = procs.cpu_seconds(every) - cpu0
                xacts = transactions(admin, names) - xact0
                first = _first_event(engine, arrivals, 1)
                later = []
                jitter = random.Random(51)
                for n in range(samples):
                    # Silence before each sample, jittered so that the commits do not keep one
                    # phase against a watcher's periodic looks (an arrival, then exactly gap).
                    time.sleep(gap + jitter.random() * JITTER_SECONDS)
                    later.append(_first_event(engine, arrivals, 2 + n))
        finally:
            engine.dispose()
            admin.dispose()
    return {
        "runner": runner,
        "processes": len(every),
        "seconds": round(elapsed, 1),
        "cpu_pct": round(cpu / elapsed * 100, 2),
        "transactions": xacts,
        "transactions_per_s": round(xacts / elapsed, 2),
        "warm_ms": warm,
        "first_event_ms": first,
        "later_ms": later,
        "later_median_ms": statistics.median(later) if later else None,
        "later_max_ms": max(later) if later else None,
    }


def run(
    seconds: float,
    samples: int,
    gap: float,
    baselines: Sequence[str] = (),
    runners: Sequence[str] = RUNNERS,
) -> dict[str, Any]:
    """Every runner, for the checkout and each baseline revision."""
    out: dict[str, Any] = {"seconds": seconds, "samples": samples, "gap_seconds": gap, "runs": []}
    revisions: list[str | None] = [None, *baselines]
    for rev in revisions:
        with contextlib.ExitStack() as stack:
            source = None if rev is None else stack.enter_context(services.source_of(rev))
            for runner in runners:
                result = one(runner, source, seconds, samples, gap)
                result["relay"] = "relay" if rev is None else f"relay@{rev}"
                out["runs"].append(result)
    out["loadavg"] = services.loadavg()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--gap", type=float, default=3.0)
    p.add_argument("--baseline", action="append", default=[], metavar="REV")
    p.add_argument("--runner", action="append", choices=RUNNERS, help="default: all")
    ns = p.parse_args(argv)
    result = run(ns.seconds, ns.samples, ns.gap, ns.baseline, ns.runner or RUNNERS)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
