"""Fairness of one fleet over several databases (issue 23): the commit-to-arrival latency of a
quiet database's events while another database of the same fleet drains a large backlog,
against the quiet database alone, same relay processes, same run.

``relay dispatch --loop`` (one process over both databases within its connection budget,
``RELAY_DATABASES``; :mod:`relay.runners.many.workers`) over two PostgreSQL databases, ``busy``
and ``quiet``, at the defaults (the wake-up on). A producer commits one ``quiet.tick`` row
every ``1/rate`` s into ``quiet``, noting ``time.monotonic()`` just before each COMMIT; a
consumer bound to ``quiet.#`` notes each arrival on the same clock. Phase "alone": ``busy`` is
empty. Phase "beside a backlog": ``backlog`` rows are committed into ``busy`` at once, and the
quiet producer runs while they drain (the busy database must still have rows left when the
phase ends, or the phase did not overlap the drain: reported).
Every message also lands in a queue bound with ``#`` that nobody consumes, deleted at the end.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from bench import procs, rows, services
from bench.timing import Arrivals, latency_summary, ratio
from relay.store.engine import create_engine

QUIET_TYPE = "quiet.tick"


def produce(engine: sa.Engine, arrivals: Arrivals, rate: float, seconds: float) -> list[float]:
    """One single-row commit into ``engine``'s outbox every ``1/rate`` s for ``seconds``; the
    sorted commit-to-arrival times in ms (every event must arrive within 60 s)."""
    committed: dict[str, float] = {}
    sql = sa.text(
        "INSERT INTO outbox (event_type, payload) VALUES (:t, '{}') "
        "RETURNING CAST(event_id AS TEXT)"
    )
    start = time.monotonic()
    with engine.connect() as conn:
        for n in range(max(1, int(rate * seconds))):
            time.sleep(max(0.0, start + n / rate - time.monotonic()))
            event_id = str(conn.execute(sql, {"t": QUIET_TYPE}).scalar_one())
            began = time.monotonic()
            conn.commit()
            committed[event_id] = began
    missing = arrivals.wait_for(list(committed), 60.0)
    if missing:
        raise RuntimeError(f"{missing} quiet events never arrived")
    return sorted((arrivals.at[i] - t) * 1000 for i, t in committed.items())


@contextlib.contextmanager
def fleet(
    busy_url: str, quiet_url: str, amqp_url: str, exchange: str, processes: int
) -> Iterator[None]:
    """``processes`` x ``relay dispatch --loop`` over both databases, ready."""
    env = {
        "RELAY_DATABASES": f"busy={busy_url},quiet={quiet_url}",
        "RELAY_BROKER_URL": amqp_url,
        "RELAY_EXCHANGE": exchange,
    }
    with procs.workers(procs.relay_command(), env, processes, ready=procs.RELAY_READY):
        yield


def measure(
    busy_url: str,
    quiet_url: str,
    amqp_url: str,
    exchange: str,
    *,
    backlog: int,
    rate: float,
    seconds: float,
    processes: int = 1,
) -> dict[str, Any]:
    """Both phases on one fleet (see the module doc); the quiet database's latencies in ms."""
    busy, quiet = create_engine(busy_url), create_engine(quiet_url)
    try:
        with (
            Arrivals(amqp_url, exchange, routing_key="quiet.#", key="message_id") as arrivals,
            fleet(busy_url, quiet_url, amqp_url, exchange, processes),
        ):
            produce(quiet, arrivals, rate, 1.0)  # warm-up: every relay thread has its channel
            alone = produce(quiet, arrivals, rate, seconds)
            rows.insert_rows(busy, backlog, status="pending", chunk=backlog)
            committed = time.monotonic()
            beside = produce(quiet, arrivals, rate, seconds)
            left = rows.unfinished(busy)
            while rows.unfinished(busy):
                time.sleep(0.05)
            drained_in = time.monotonic() - committed
    finally:
        busy.dispose()
        quiet.dispose()
    a, b = latency_summary(alone), latency_summary(beside)
    return {
        "backlog": backlog,
        "rate": rate,
        "seconds": seconds,
        "processes": processes,
        "mode": "one process over both databases",
        "quiet_alone": a,
        "quiet_beside_backlog": b,
        "p99_ratio": ratio(b["p99_ms"], a["p99_ms"]),
        "busy_left_at_end": left,
        "busy_drain_rate": round(backlog / drained_in),
    }


def run(backlog: int, rate: float, seconds: float, processes: list[int]) -> dict[str, Any]:
    """The section: :func:`measure` for each process count, fresh databases each time."""
    out: dict[str, Any] = {"runs": []}
    for n in processes:
        with (
            services.database("fair_busy") as busy_url,
            services.database("fair_quiet") as quiet_url,
            services.route(services.AMQP_URL, "fairness") as route,
        ):
            out["runs"].append(
                measure(
                    busy_url,
                    quiet_url,
                    services.AMQP_URL,
                    route.exchange_name,
                    backlog=backlog,
                    rate=rate,
                    seconds=seconds,
                    processes=n,
                )
            )
    return out
