"""Server time of the web console's pages and API beside 1,000,000 outbox rows (PostgreSQL).

The table is filled by one ``INSERT … SELECT generate_series``: a day of history, sent rows
spread evenly over the last 24 h (~25,500 sent in the last hour, which the charts read), 3% of
all rows failed and spread through the history (dead letters of every age), the newest 15,000
pending and the newest 100 processing. Each page is requested in process through Starlette's
test client with a bearer token (no network, no browser): what the server spends, database
included; median of ``reps`` after one warm-up. Page 500 is reached by its keyset cursor.

Alone: ``python -m bench --only console`` or ``python -m bench.console [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import sqlalchemy as sa

from bench import fixtures
from relay.config import Settings
from relay.engine import create_engine

TOKEN = "bench-console-token-0123456789"  # noqa: S105 (a throw-away bench token)
PAGE = 50
TARGET_MS = 200

FILL = """
INSERT INTO outbox (event_type, payload, status, attempt, created_at, updated_at, sent_at,
                    last_error, locked_by, locked_until)
SELECT (ARRAY['order.created', 'order.paid', 'invoice.issued', 'user.signed_up'])[g % 4 + 1],
       jsonb_build_object('n', g, 'customer', 'c-' || (g % 997), 'total', g % 1000),
       s.status,
       CASE s.status WHEN 'failed' THEN 10 WHEN 'pending' THEN 0 ELSE 1 END,
       s.created, s.created,
       CASE s.status WHEN 'sent' THEN s.created + interval '80 milliseconds' END,
       CASE s.status WHEN 'failed' THEN 'Unroutable: no queue bound to ' || (g % 7) END,
       CASE s.status WHEN 'processing' THEN 'worker-' || (g % 4) END,
       CASE s.status WHEN 'processing' THEN now() + interval '30 seconds' END
FROM generate_series(1, :n) g
CROSS JOIN LATERAL (
    SELECT now() - make_interval(secs => (:n - g) * 86400.0 / :n) AS created,
           CASE WHEN g % 33 = 0 THEN 'failed'
                WHEN g > :n - 100 THEN 'processing'
                WHEN g > :n - 15000 THEN 'pending'
                ELSE 'sent' END AS status
) s
"""


def _fill(engine: sa.Engine, n: int) -> float:
    started = time.perf_counter()
    with engine.begin() as conn:
        conn.execute(sa.text(FILL), {"n": n})
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text("VACUUM ANALYZE outbox"))
    return time.perf_counter() - started


def _cursor(engine: sa.Engine, page: int, status: str | None) -> int:
    """The ``after`` id of keyset page ``page`` (setup only: found once with OFFSET)."""
    where = "WHERE status = :status" if status else ""
    sql = f"SELECT id FROM outbox {where} ORDER BY id OFFSET :skip LIMIT 1"
    with engine.connect() as conn:
        params = {"status": status, "skip": (page - 1) * PAGE - 1}
        return int(conn.execute(sa.text(sql), params).scalar_one())


def measure(url: str, n: int, reps: int, far: int = 500) -> dict[str, Any]:
    from starlette.testclient import TestClient

    from relay import console

    engine = create_engine(url)
    try:
        fill_seconds = _fill(engine, n)
        settings = Settings(database_url=url, console_token=TOKEN)
        paths = {
            "overview (/)": "/",
            "/api/status": "/api/status",
            "dead letters, page 1": f"/events?status=failed&limit={PAGE}",
            f"dead letters, page {far}": (
                f"/events?status=failed&limit={PAGE}&after={_cursor(engine, far, 'failed')}"
            ),
            "all events, page 1": f"/events?limit={PAGE}",
            f"all events, page {far}": f"/events?limit={PAGE}&after={_cursor(engine, far, None)}",
            f"/api/events?status=failed, page {far}": (
                f"/api/events?status=failed&limit={PAGE}&after={_cursor(engine, far, 'failed')}"
            ),
        }
        out: dict[str, Any] = {}
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with TestClient(console.app(engine, settings)) as client:
            for label, path in paths.items():
                assert client.get(path, headers=headers).status_code == 200, path  # warm-up
                times = []
                for _ in range(reps):
                    started = time.perf_counter()
                    r = client.get(path, headers=headers)
                    times.append((time.perf_counter() - started) * 1000)
                    assert r.status_code == 200, (path, r.status_code)
                times.sort()
                out[label] = {
                    "path": path,
                    "median_ms": round(times[len(times) // 2], 1),
                    "min_ms": round(times[0], 1),
                    "max_ms": round(times[-1], 1),
                }
        with engine.connect() as conn:
            counts = dict(
                conn.execute(sa.text("SELECT status, count(*) FROM outbox GROUP BY 1")).all()
            )
        return {
            "rows": n,
            "counts": {k: int(v) for k, v in counts.items()},
            "fill_seconds": round(fill_seconds, 1),
            "reps": reps,
            "page_size": PAGE,
            "pages": out,
        }
    finally:
        engine.dispose()


def run(plan: Any) -> dict[str, Any]:
    quick = getattr(plan, "name", "") == "quick"
    n, reps, far = (60_000, 3, 20) if quick else (1_000_000, 9, 500)
    with fixtures.database("console") as url:
        return measure(url, n, reps, far)


def render(data: dict[str, Any]) -> str:
    """The report's section on the console's server time (Markdown)."""
    counts = ", ".join(f"{k} {v:,}" for k, v in sorted(data["counts"].items()))
    lines = [
        "## Web console server time (`bench/console.py`)",
        "",
        f"{data['rows']:,} rows in the outbox on PostgreSQL ({counts});"
        f" pages of {data['page_size']}, each request timed in process (Starlette's test client,"
        f" bearer token, database included), median (min-max) of {data['reps']} after a warm-up."
        f" Target: under {TARGET_MS} ms each.",
        "",
        "| page | median | min-max |",
        "| --- | --- | --- |",
    ]
    for label, p in data["pages"].items():
        flag = "" if p["median_ms"] < TARGET_MS else " (over target)"
        lines.append(
            f"| {label} | {p['median_ms']:g} ms{flag} | {p['min_ms']:g}-{p['max_ms']:g} ms |"
        )
    lines += [
        "",
        "Pages follow their keyset cursor (`after` = the last id shown), never OFFSET, so page 500"
        " costs what page 1 does. The overview is `relay status`'s counts (the unsent statuses"
        " from the partial index, the total from the primary key, sent = the difference) plus one"
        " statement for both charts over the last hour's sent rows through `ix_outbox_sent_at`:"
        " its cost grows with that hour's rows, not with the history. Run:"
        " `python -m bench --only console`.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    data = run(argparse.Namespace(name="quick" if args.quick else "full"))
    print(json.dumps(data, indent=2))
    print(render(data))


if __name__ == "__main__":
    main()
