"""A database per tenant (issue 39): one ``relay dispatch --loop`` over N PostgreSQL databases
(``RELAY_DATABASES``) at the defaults, within its connection budget.

Per run: ``backlog`` events committed into every database before the relay starts, then the
relay started and timed until every one reached the broker (the growth of a queue nobody
reads, as docs/benchmarks.md times throughput); then a trickle of one event a second per
tenant for ``trickle_seconds`` (tenant i commits at i/N s past each second, each commit on a
connection of its own that it closes, as a short-lived web request would), each event's
commit-to-arrival latency noted by a consumer on the same clock. Optionally one noisy tenant
gets ``noisy`` more rows just before the trickle, which it drains meanwhile (the trickle is
then the other tenants').

Sampled every 0.25 s throughout: the relay's RSS (its process and any children) and the
connections to the tenant databases that are not the bench's own (``pg_stat_activity``, by
``application_name``). At the end: connections held once idle, how long SIGTERM took, and
that every row is ``sent`` and reached the broker once (queue depth equals rows).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kombu
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from bench import procs
from bench.services import AMQP_URL, PG_ADMIN_URL, loadavg
from bench.timing import Arrivals, latency_summary
from relay.store.schema import upgrade

#: The bench's own connections say so, to be told apart from the relay's.
APP = "relay-bench-app"
TICK, BACKLOG, NOISY = "tenant.tick", "tenant.backlog", "tenant.noisy"
_INSERT = sa.text(
    "INSERT INTO outbox (event_type, payload) "
    "SELECT :t, jsonb_build_object('n', g) FROM generate_series(1, :k) AS g"
)
_TICK = sa.text(
    "INSERT INTO outbox (event_type, payload) VALUES (:t, '{}') RETURNING CAST(event_id AS TEXT)"
)


@contextlib.contextmanager
def tenant_databases(n: int, admin_url: str = PG_ADMIN_URL) -> Iterator[list[str]]:
    """``n`` migrated PostgreSQL databases (copies of one migrated template), every one of
    them dropped at exit, also on failure."""
    nonce = uuid.uuid4().hex[:8]
    template = f"relay_bench_tpl_{nonce}"
    names = [f"relay_bench_tenant_{nonce}_{i}" for i in range(n)]
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    made: list[str] = []
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{template}"'))
        made.append(template)
        upgrade.upgrade(sa.make_url(admin_url).set(database=template).render_as_string(False))
        for name in names:
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
            made.append(name)
        yield [sa.make_url(admin_url).set(database=x).render_as_string(False) for x in names]
    finally:
        with admin.connect() as conn:
            for name in reversed(made):
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(
        url, poolclass=NullPool, connect_args={"application_name": APP, "prepare_threshold": None}
    )


class Sampler:
    """The relay's RSS and its connections to the tenant databases, every 0.25 s."""

    def __init__(self, pids: Sequence[int], datnames: Sequence[str], admin_url: str) -> None:
        self.pids, self.datnames = list(pids), list(datnames)
        self.admin = sa.create_engine(
            admin_url, poolclass=NullPool, connect_args={"application_name": APP}
        )
        self.peak_rss = self.peak_connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def connections(self) -> int:
        with self.admin.connect() as conn:
            return int(
                conn.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY(:d) "
                        "AND application_name <> :app"
                    ),
                    {"d": self.datnames, "app": APP},
                ).scalar_one()
            )

    def rss(self) -> int:
        """Bytes resident in the relay's process trees."""
        total, todo = 0, list(self.pids)
        while todo:
            pid = todo.pop()
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                todo += [int(c) for c in children]
        return total

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.admin.dispose()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.peak_rss = max(self.peak_rss, self.rss())
            with contextlib.suppress(sa.exc.SQLAlchemyError):
                self.peak_connections = max(self.peak_connections, self.connections())


def _sink(url: str, exchange: str, routing_key: str) -> kombu.Queue:
    with kombu.Connection(url) as conn:
        ex = kombu.Exchange(exchange, type="topic", durable=True)
        queue = kombu.Queue(f"{exchange}.{routing_key}", ex, routing_key=routing_key)
        queue(conn.default_channel).declare()
    return queue


def _depth(url: str, queue: kombu.Queue) -> int:
    with kombu.Connection(url) as conn:
        declared: Any = queue(conn.default_channel).queue_declare(passive=True)
        return int(declared.message_count)


def _delete(url: str, exchange: str, queues: Sequence[kombu.Queue]) -> None:
    with kombu.Connection(url) as conn:
        for q in queues:
            with contextlib.suppress(Exception):
                q(conn.default_channel).delete()
        with contextlib.suppress(Exception):
            kombu.Exchange(exchange, type="topic")(conn.default_channel).delete()


def trickle(
    engines: Sequence[sa.Engine], arrivals: Arrivals, seconds: float
) -> tuple[list[float], int]:
    """One event a second per tenant for ``seconds`` (tenant i at i/N past each second), by 4
    producer threads; the sorted commit-to-arrival ms, and the commits refused."""
    committed: dict[str, float] = {}
    refused = 0
    start = time.monotonic() + 0.5
    n = len(engines)

    def tenant(i: int) -> None:
        nonlocal refused
        for k in range(int(seconds)):
            time.sleep(max(0.0, start + k + i / n - time.monotonic()))
            try:
                with engines[i].connect() as conn:
                    event_id = str(conn.execute(_TICK, {"t": TICK}).scalar_one())
                    began = time.monotonic()
                    conn.commit()
                committed[event_id] = began
            except sa.exc.OperationalError:
                refused += 1

    with ThreadPoolExecutor(max_workers=min(n, 16)) as pool:
        list(pool.map(tenant, range(n)))
    missing = arrivals.wait_for(list(committed), 60.0)
    if missing:
        raise RuntimeError(f"{missing} trickle events never arrived")
    return sorted((arrivals.at[i] - t) * 1000 for i, t in committed.items()), refused


def measure(
    urls: Sequence[str],
    amqp_url: str = AMQP_URL,
    *,
    backlog: int = 100,
    trickle_seconds: float = 10.0,
    noisy: int = 0,
    extra: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    admin_url: str = PG_ADMIN_URL,
    timeout: float = 300.0,
    celery_workers: int = 0,
) -> dict[str, Any]:
    """One run over ``urls`` (see the module doc); ``extra`` adds ``name=URL`` databases that
    are not measured (one that is down, say), ``env`` more ``RELAY_*`` settings. With
    ``celery_workers``, the Celery fleet instead: beat and that many solo-pool workers."""
    exchange = f"bench.tenants.{uuid.uuid4().hex[:8]}"
    names = {f"t{i}": url for i, url in enumerate(urls)}
    datnames = [str(sa.make_url(u).database) for u in urls]
    engines = [_engine(u) for u in urls]
    sinks = [_sink(amqp_url, exchange, BACKLOG), _sink(amqp_url, exchange, NOISY)]
    logdir = Path(tempfile.mkdtemp(prefix="relay-bench-tenants-"))
    try:
        for eng in engines:
            with eng.begin() as conn:
                conn.execute(_INSERT, {"t": BACKLOG, "k": backlog})
        spec = ",".join(f"{k}={v}" for k, v in {**names, **(extra or {})}.items())
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
        full_env.update(RELAY_DATABASES=spec, RELAY_BROKER_URL=amqp_url, RELAY_EXCHANGE=exchange)
        full_env.update(env or {})
        if celery_workers:
            full_env["RELAY_QUEUE"] = exchange + ".relay"
        with (
            Arrivals(amqp_url, exchange, routing_key=TICK, key="message_id") as arrivals,
            (logdir / "relay.log").open("wb") as log,
            contextlib.ExitStack() as stack,
        ):
            started = time.monotonic()
            if celery_workers:
                running = stack.enter_context(procs.celery_fleet(full_env, celery_workers))
            else:
                argv = procs.relay_command()
                running = [subprocess.Popen(argv, env=full_env, stdout=log, stderr=log)]
                stack.callback(_reap, running[0])
            with Sampler([p.pid for p in running], datnames, admin_url) as sampler:
                expected = backlog * len(urls)
                while _depth(amqp_url, sinks[0]) < expected:
                    procs.check_alive(running)
                    if time.monotonic() - started > timeout:
                        raise RuntimeError(_tail(logdir / "relay.log"))
                    time.sleep(0.05)
                drain = time.monotonic() - started
                if noisy:
                    with engines[0].begin() as conn:
                        conn.execute(_INSERT, {"t": NOISY, "k": noisy})
                # The noisy tenant's own events wait behind its backlog (oldest first): the
                # quiet tenants' are the measure.
                quiet = engines[1:] if noisy else engines
                cpu_before = procs.cpu_seconds(_tree([p.pid for p in running]))
                ms, refused = trickle(quiet, arrivals, trickle_seconds)
                trickle_cpu = procs.cpu_seconds(_tree([p.pid for p in running])) - cpu_before
                noisy_left = _unfinished(engines[0]) if noisy else 0
                deadline = time.monotonic() + timeout
                while noisy and _unfinished(engines[0]) and time.monotonic() < deadline:
                    time.sleep(0.2)
                idle = _settled_connections(sampler)
                if os.environ.get("BENCH_TENANTS_DEBUG"):
                    with sampler.admin.connect() as conn:
                        for row in conn.execute(
                            sa.text(
                                "SELECT pid, datname, state, application_name, left(query, 60) "
                                "FROM pg_stat_activity WHERE datname = ANY(:d)"
                            ),
                            {"d": datnames},
                        ):
                            print("idle connection:", tuple(row), flush=True)
                rss, peak = sampler.peak_rss, sampler.peak_connections
            stop_began = time.monotonic()
            code: int | None = None
            if not celery_workers:
                running[0].send_signal(signal.SIGTERM)
                code = running[0].wait(timeout=60)
                if os.environ.get("BENCH_TENANTS_DEBUG"):
                    print(_tail(logdir / "relay.log", 3), flush=True)
        stopped_in = time.monotonic() - stop_began
        delivered = _depth(amqp_url, sinks[0])
        left = sum(_unfinished(e) for e in engines)
    finally:
        for eng in engines:
            eng.dispose()
        _delete(amqp_url, exchange, sinks)
    return {
        "runner": f"celery beat + {celery_workers} workers" if celery_workers else "dispatch",
        "databases": len(urls),
        "backlog_per_database": backlog,
        "drain_seconds": round(drain, 2),
        "drain_events_per_second": round(backlog * len(urls) / drain),
        "delivered": delivered,
        "expected": backlog * len(urls),
        "unfinished_rows_at_end": left,
        "peak_connections": peak,
        "idle_connections": idle,
        "peak_rss_mib": round(rss / 2**20, 1),
        "trickle": {"seconds": trickle_seconds, "events": len(ms), **latency_summary(ms)},
        "refused_commits": refused,
        "relay_cpu_share_during_trickle": round(trickle_cpu / trickle_seconds, 2),
        "noisy_backlog": noisy,
        "noisy_left_after_trickle": noisy_left,
        "sigterm_seconds": round(stopped_in, 2),
        "exit_code": code,
        "loadavg": loadavg(),
    }


def _tree(pids: Sequence[int]) -> list[int]:
    """``pids`` and their descendants."""
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        with contextlib.suppress(OSError):
            todo += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return found


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _settled_connections(sampler: Sampler, settle: float = 15.0, floor: int = 1) -> int:
    """Connections the relay holds once idle: the fewest seen over ``settle`` seconds (the
    last busy databases give theirs back after one more empty look), down to ``floor``."""
    fewest = sampler.connections()
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline and fewest > floor:
        time.sleep(0.5)
        fewest = min(fewest, sampler.connections())
    return fewest


def _unfinished(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT count(*) FROM outbox WHERE status IN ('pending', 'processing')")
            ).scalar_one()
        )


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run(
    counts: Sequence[int],
    backlog: int,
    trickle_seconds: float,
    noisy: int,
    celery_workers: int = 0,
) -> dict[str, Any]:
    """The section: each database count alone; then at 100 databases (the issue's size; else
    the largest count) beside one noisy tenant, and through the Celery fleet (beat and
    ``celery_workers`` solo workers)."""
    out: dict[str, Any] = {"runs": []}
    size = 100 if 100 in counts else max(counts)
    plans = [(n, 0, 0) for n in counts]
    if noisy:
        plans.append((size, noisy, 0))
    if celery_workers:
        plans.append((size, 0, celery_workers))
    for n, rows, workers in plans:
        with tenant_databases(n) as urls:
            out["runs"].append(
                measure(
                    urls,
                    backlog=backlog,
                    trickle_seconds=trickle_seconds,
                    noisy=rows,
                    celery_workers=workers,
                )
            )
    return out
