"""The ``replay`` section (issue 41): live delivery's latency while ``relay replay`` re-sends a
large history at its ``--rate``, against the same live load without it, in one run.

One fresh PostgreSQL database, one ``relay dispatch --loop`` at the defaults, and a producer
committing ``live_rate`` events a second as plain SQL (a transaction every 10 ms), timed from
just before COMMIT to arrival at a consumer of the relay's exchange (``bench.latency``). The
table also holds ``rows`` sent rows. Three windows of ``seconds`` each: live alone; live while
``relay replay --to-queue Q --all --rate RATE`` runs in its own process (the window opens two
seconds after the replay started and closes before it ends); live alone again once the replay
finished. Q is a durable queue bound to nothing, which nobody reads; its depth afterwards must be
``rows`` (every replayed event, once), and the consumer of the live events must see no replayed
message.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import kombu

from bench import latency, procs, services
from bench import rows as bench_rows
from relay.store.engine import create_engine

#: Seconds between the replay's start and the window measured beside it.
WARM_UP_SECONDS = 2.0


def run(rows: int, rate: int, live_rate: int, seconds: float) -> dict[str, Any]:
    setup = latency.Setup("postgresql", "postgresql", latency.DISPATCH, 1)
    with latency.running(setup) as live:
        engine = create_engine(live.env["RELAY_DATABASE_URL"])
        filled = time.monotonic()
        try:
            bench_rows.insert_rows(engine, rows, status="sent")
        finally:
            engine.dispose()
        fill_seconds = time.monotonic() - filled
        queue = f"{live.env['RELAY_EXCHANGE']}.replayed"
        with kombu.Connection(services.AMQP_URL) as conn:
            kombu.Queue(queue, durable=True)(conn.default_channel).declare()
        try:
            before = latency.one_load(live, "plain SQL", live_rate, seconds, 0.01)
            replayed, during = _beside_replay(live, queue, rows, rate, live_rate, seconds)
            after = latency.one_load(live, "plain SQL", live_rate, seconds, 0.01)
            depth = _depth(queue)
        finally:
            services.delete_queue(queue)
    baseline_p99 = max(before["p99_ms"], after["p99_ms"])
    return {
        "rows": rows,
        "rate": rate,
        "live_rate": live_rate,
        "seconds": seconds,
        "fill_seconds": round(fill_seconds, 1),
        "without_replay": {"before": before, "after": after},
        "with_replay": during,
        "replay": {**replayed, "queue_depth_after": depth},
        "p99_ratio": round(during["p99_ms"] / baseline_p99, 2) if baseline_p99 else None,
        "p99_ratio_vs_before": (
            round(during["p99_ms"] / before["p99_ms"], 2) if before["p99_ms"] else None
        ),
        "loadavg": services.loadavg(),
    }


def _beside_replay(
    live: Any, queue: str, rows: int, rate: int, live_rate: int, seconds: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The live window measured while the replay runs, and the replay's own figures."""
    relay = procs.relay_command()[0]
    argv = [relay, "replay", "--to-queue", queue, "--all", "--rate", str(rate), "--json"]
    env = {**os.environ, **live.env}
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(WARM_UP_SECONDS)  # the window opens once the replay is under way
        during = latency.one_load(live, "plain SQL", live_rate, seconds, 0.01)
        overlapped = proc.poll() is None
        out, err = proc.communicate(timeout=rows / rate * 3 + 300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"relay replay failed ({proc.returncode}): {err.decode()[-2000:]}")
    report = json.loads(out)
    return {
        "sent": report["sent"],
        "matched": report["matched"],
        "complete": report["complete"],
        "wall_seconds": round(wall, 1),
        "achieved_per_s": round(report["sent"] / wall),
        "window_inside_replay": overlapped,
    }, during


def _depth(queue: str) -> int:
    with kombu.Connection(services.AMQP_URL) as conn:
        declared: Any = kombu.Queue(queue, durable=True)(conn.default_channel).queue_declare(
            passive=True
        )
        return int(declared.message_count)


if __name__ == "__main__":
    print(json.dumps(run(20_000, 5_000, 200, 2.0), indent=2))
