"""Large events (issue 51): a backlog of 600 events of 900 KiB each through one
``relay dispatch --loop`` at the defaults (``RELAY_BATCH_MAX_BYTES`` 16 MiB), PostgreSQL +
RabbitMQ (a durable queue, persistent messages): the drain's time and the relay's peak RSS.

The backlog is written by plain SQL (as another team's service would: no producer cap on that
path) before the relay starts; the clock starts when the relay has logged that it is ready and
stops when no row is pending or processing. Peak RSS is the relay process's ``VmHWM`` from
``/proc`` at the end. Two cases: the table as the backlog left it (**fresh**: never analyzed,
as on a new deployment or right after a burst into a small table) and after ``ANALYZE``. With
``--baseline REV`` the relay of git revision REV drains the same backlog on a database its own
migrations made, the modes taking turns; every run gets a new database.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import procs, rows, services
from bench.timing import relay_env
from relay.store.engine import create_engine

#: 900 KiB of JSON text per event (a repeated 32-character block: PostgreSQL stores it
#: compressed, the relay still reads and publishes it whole).
EVENT_CHARS = 900 * 1024
CASES = ("fresh", "analyzed")


def _insert(engine: sa.Engine, count: int, chunk: int = 50) -> None:
    for start in range(0, count, chunk):
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (event_type, payload) SELECT 'large.event', "
                    "jsonb_build_object('s', repeat(md5(i::text), CAST(:chars AS int) / 32), "
                    "'i', i) FROM generate_series(CAST(:a AS int), CAST(:b AS int)) AS i"
                ),
                {"chars": EVENT_CHARS, "a": start, "b": min(start + chunk, count) - 1},
            )


def _peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _drain(count: int, case: str, source: str | None) -> dict[str, Any]:
    """One run on a database of its own: seconds from the relay's ready to drained, its peak
    RSS, and the messages the queue held."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(services.database("large", source=source))
        route = stack.enter_context(services.route(services.AMQP_URL, "large"))
        engine = create_engine(url)
        stack.callback(engine.dispose)
        _insert(engine, count)
        if case == "analyzed":
            with engine.begin() as conn:
                conn.execute(sa.text("ANALYZE outbox"))
        env = relay_env(url, route, None, {} if source is None else {"PYTHONPATH": source})
        env.pop("RELAY_TICK_SECONDS")
        argv, ready = procs.relay_command(), procs.RELAY_READY
        with procs.workers(argv, env, 1, ready=ready) as running, engine.connect() as poll:
            started = time.perf_counter()
            while rows.unfinished(poll):
                procs.check_alive(running)
                time.sleep(0.02)
            seconds = time.perf_counter() - started
            peak = _peak_mib(running[0].pid)
        delivered = route.purge()
    return {"seconds": seconds, "peak_rss_mib": peak, "delivered": delivered}


def run(count: int, reps: int, baselines: Sequence[str] = ()) -> dict[str, Any]:
    """The ``large`` section: each case ``reps`` times for the checkout and each baseline."""
    names = ["relay", *(f"relay@{rev}" for rev in baselines)]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {n: {c: [] for c in CASES} for n in names}
    with contextlib.ExitStack() as stack:
        sources: dict[str, str | None] = {"relay": None}
        for rev in baselines:
            sources[f"relay@{rev}"] = stack.enter_context(services.source_of(rev))
        for rep in range(reps):
            for case in CASES:
                for name in names[rep % len(names) :] + names[: rep % len(names)]:
                    runs[name][case].append(_drain(count, case, sources[name]))
    out: dict[str, Any] = {"events": count, "event_kib": EVENT_CHARS // 1024, "reps": reps}
    mib = count * EVENT_CHARS / 1_048_576
    for name in names:
        out[name] = {}
        for case in CASES:
            measured = runs[name][case]
            seconds = statistics.median(r["seconds"] for r in measured)
            out[name][case] = {
                "seconds": round(seconds, 1),
                "runs": [round(r["seconds"], 1) for r in measured],
                "mib_per_s": round(mib / seconds, 1),
                "peak_rss_mib": round(max(r["peak_rss_mib"] for r in measured)),
                "delivered": [r["delivered"] for r in measured],
            }
    return out
