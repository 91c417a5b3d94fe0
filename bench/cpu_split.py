"""Where the CPU goes per event: PostgreSQL, RabbitMQ and the relay, from /proc, on one drain.

``python -m bench.cpu_split [--events N] [--batch B] [--processes P]``

The rows are written first (not claimable), the relay processes start and idle, then one UPDATE
makes the rows claimable and the clock starts; CPU time of every ``postgres`` and ``beam.smp``
process and of the relay processes is read from ``/proc/<pid>/stat`` before and after. The
UPDATE that releases the rows is counted in PostgreSQL's share (about 10-20 µs per row).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import fixtures, services
from relay.engine import create_engine

_HZ = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / _HZ


def _pids(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def measure(events: int, batch: int, processes: int) -> dict[str, Any]:
    amqp = services.AMQP_URL
    with fixtures.database("cpu") as db, fixtures.route(amqp, "cpu") as route:
        engine = create_engine(db)
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (event_type, payload, headers, next_retry_at) "
                    "SELECT 'order.created', jsonb_build_object('n', g, 'x', repeat('y', 150)), "
                    "'{\"tenant\": \"t\"}'::jsonb, now() + interval '1 day' "
                    f"FROM generate_series(1, {int(events)}) g"
                )
            )
            conn.execute(sa.text("ANALYZE outbox"))
        env = {
            **os.environ,
            "RELAY_DATABASE_URL": db,
            "RELAY_BROKER_URL": amqp,
            "RELAY_EXCHANGE": route.exchange_name,
            "RELAY_BATCH_SIZE": str(batch),
            "RELAY_TICK_SECONDS": "0.05",
        }
        relays = [
            subprocess.Popen(
                [sys.executable, "-m", "relay", "dispatch", "--loop"],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(processes)
        ]
        try:
            time.sleep(2)  # started and idle before the clock starts
            groups = {
                "postgresql": _pids("postgres"),
                "rabbitmq": _pids("beam.smp"),
                "relay": [p.pid for p in relays],
            }
            before = {k: _cpu_seconds(v) for k, v in groups.items()}
            start = time.perf_counter()
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE outbox SET next_retry_at = NULL"))
            while True:
                time.sleep(0.05)  # polling the outcome with a cheap query, bounded below
                with engine.connect() as conn:
                    if not conn.execute(
                        sa.text(
                            "SELECT EXISTS (SELECT 1 FROM outbox "
                            "WHERE status IN ('pending', 'processing'))"
                        )
                    ).scalar():
                        break
                if time.perf_counter() - start > 300:
                    raise RuntimeError("drain did not finish in 300 s")
            wall = time.perf_counter() - start
            used = {k: _cpu_seconds(v) - before[k] for k, v in groups.items()}
        finally:
            for p in relays:
                p.terminate()
                p.wait(timeout=30)
            engine.dispose()
    return {
        "events": events,
        "batch": batch,
        "processes": processes,
        "rows_per_s": round(events / wall),
        "cpu_us_per_event": {k: round(v / events * 1e6) for k, v in used.items()},
        "cpu_busy_of_2_cores": round(sum(used.values()) / wall / 2, 2),
        "loadavg": services.loadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(measure(args.events, args.batch, args.processes)))


if __name__ == "__main__":
    main()
