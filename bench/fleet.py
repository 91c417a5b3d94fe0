"""Fleet throughput: events/s through 1, 2 and 3 ``celery -A relay worker`` processes and one
beat, beside the raw Kombu confirmed publish rate (windowed confirms) measured in the same run.

Each fleet gets a fresh database and exchange; the workers are started and ready before the
backlog is committed, and the clock runs from that commit until every row is ``sent``. The
queue depth at the end proves each event was delivered exactly once.

    python -m bench.fleet [--quick]
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu

from bench import ceiling, fixtures, procs, rows, services
from relay import message
from relay.engine import create_engine

CELERY = str(Path(sys.executable).with_name("celery"))
BATCH_SIZE = 100
TICK_SECONDS = 0.5


def celery_env(
    database_url: str, broker_url: str, exchange: str, **extra: object
) -> dict[str, str]:
    """The ``RELAY_*`` environment of one fleet, with its own Celery queue."""
    env = {
        "RELAY_DATABASE_URL": database_url,
        "RELAY_BROKER_URL": broker_url,
        "RELAY_EXCHANGE": exchange,
        "RELAY_QUEUE": f"bench.relay.{uuid.uuid4().hex[:8]}",
        "RELAY_BATCH_SIZE": str(BATCH_SIZE),
        "RELAY_TICK_SECONDS": str(TICK_SECONDS),
    }
    env.update({f"RELAY_{k.upper()}": str(v) for k, v in extra.items()})
    return env


@contextlib.contextmanager
def celery_fleet(env: dict[str, str], workers: int) -> Iterator[None]:
    """One beat and ``workers`` solo-pool workers, all ready; stopped (then killed) at exit."""
    queue = env["RELAY_QUEUE"]
    common = ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        beat = [CELERY, "-A", "relay", "beat", "-l", "INFO", "-s", f"{tmp}/schedule"]
        stack.enter_context(procs.workers(beat, env, 1, ready="beat: Starting..."))
        for i in range(workers):
            argv = [CELERY, "-A", "relay", "worker", "-n", f"b{i}.{queue}@%h", "-Q", queue]
            argv += ["--pool", "solo", *common]
            stack.enter_context(procs.workers(argv, env, 1, ready=" ready."))
        try:
            yield
        finally:
            stack.close()
            with (
                kombu.Connection(env["RELAY_BROKER_URL"]) as conn,
                contextlib.suppress(Exception),
            ):
                kombu.Queue(queue, channel=conn.default_channel).delete()


def fleet_rate(amqp_url: str, workers: int, events: int) -> dict[str, Any]:
    """Events/s of one fleet draining ``events`` committed rows."""
    with fixtures.database("fleet") as db, fixtures.route(amqp_url, "fleet") as route:
        env = celery_env(db, amqp_url, route.exchange_name, max_fanout=max(2, workers))
        engine = create_engine(db)
        try:
            with celery_fleet(env, workers):
                rows.insert_pending(engine, events)
                start = time.monotonic()
                deadline = start + 600
                while rows.count_status(engine, "sent") < events:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{workers} workers did not drain {events} in 600s")
                    time.sleep(0.05)
                seconds = time.monotonic() - start
            delivered = route.depth()
        finally:
            engine.dispose()
    return {
        "workers": workers,
        "events": events,
        "seconds": round(seconds, 3),
        "events_per_s": round(events / seconds),
        "delivered": delivered,
    }


def run(quick: bool = False) -> dict[str, Any]:
    """Fleet events/s for 1, 2, 3 workers and the Kombu confirmed-publish ceiling, one run."""
    amqp_url = services.AMQP_URL
    events = 3_000 if quick else 20_000
    msgs = [message.build(rows.claimed(n)) for n in range(1, events + 1)]
    kombu_rates: dict[str, float] = {}
    with fixtures.route(amqp_url, "fleet-ceiling") as route:
        ceiling.kombu_windowed(route, msgs[:200], 100)  # warm the connection path
        for window in (BATCH_SIZE, 1000):
            route.purge()
            kombu_rates[f"window_{window}"] = round(ceiling.kombu_windowed(route, msgs, window))
        route.purge()
    fleets = [fleet_rate(amqp_url, n, events) for n in ((1,) if quick else (1, 2, 3))]
    return {
        "events": events,
        "batch_size": BATCH_SIZE,
        "tick_seconds": TICK_SECONDS,
        "pool": "solo",
        "kombu_confirmed_msgs_per_s": kombu_rates,
        "fleet": fleets,
        "loadavg": services.loadavg(),
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
