"""Server time of the web console's pages and API beside 1,000,000 outbox rows (PostgreSQL).

The table is filled by one ``INSERT … SELECT generate_series``: a day of history, sent rows
spread evenly over the last 24 h (~25,500 sent in the last hour, which the charts read), 3% of
all rows failed and spread through the history (dead letters of every age), the newest 15,000
pending and the newest 100 processing. Each page is requested in process through Starlette's
test client with a bearer token (no network, no browser): what the server spends, database
included; median of ``reps`` after one warm-up. Page 500 is reached by its keyset cursor.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from bench import services
from bench.timing import median_ms
from relay.config import Settings
from relay.store.engine import create_engine

TOKEN = "bench-console-token-0123456789"  # noqa: S105 (a throw-away bench token)
PAGE = 50

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


def run(n: int, reps: int, far: int) -> dict[str, Any]:
    """The ``console`` section: fill ``n`` rows, then time each page, page ``far`` included."""
    with services.database("console") as url:
        engine = create_engine(url)
        try:
            return _measure(engine, url, n, reps, far)
        finally:
            engine.dispose()


def _measure(engine: sa.Engine, url: str, n: int, reps: int, far: int) -> dict[str, Any]:
    # Imported here: the console extra (Starlette) is needed by this section only.
    from starlette.testclient import TestClient

    from relay import console

    fill_seconds = _fill(engine, n)
    settings = Settings(database_url=url, console_token=TOKEN)
    failed_far = _cursor(engine, far, "failed")
    paths = {
        "overview (/)": "/",
        "/api/status": "/api/status",
        "dead letters, page 1": f"/events?status=failed&limit={PAGE}",
        f"dead letters, page {far}": f"/events?status=failed&limit={PAGE}&after={failed_far}",
        "all events, page 1": f"/events?limit={PAGE}",
        f"all events, page {far}": f"/events?limit={PAGE}&after={_cursor(engine, far, None)}",
        f"/api/events?status=failed, page {far}": (
            f"/api/events?status=failed&limit={PAGE}&after={failed_far}"
        ),
    }
    pages: dict[str, Any] = {}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(console.app(engine, settings)) as client:
        for label, path in paths.items():

            def get(path: str = path) -> None:
                reply = client.get(path, headers=headers)
                assert reply.status_code == 200, (path, reply.status_code)

            timed = median_ms(get, reps)
            pages[label] = {"path": path, **{k: round(v, 1) for k, v in timed.items()}}
    with engine.connect() as conn:
        counts: dict[str, int] = dict(
            conn.execute(sa.text("SELECT status, count(*) FROM outbox GROUP BY 1")).all()
        )
    return {
        "rows": n,
        "counts": {k: int(v) for k, v in counts.items()},
        "fill_seconds": round(fill_seconds, 1),
        "reps": reps,
        "page_size": PAGE,
        "pages": pages,
    }
