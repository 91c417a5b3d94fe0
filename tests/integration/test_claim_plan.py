"""The claim stays constant-time as history grows: PostgreSQL plans it on the partial index."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa

from relay.store.dialects import operations_for
from relay.store.dialects.postgresql import PostgresDialect
from relay.store.engine import create_engine


def test_claim_uses_the_partial_index_even_as_a_generic_prepared_plan(pg_url: str) -> None:
    """With 200k rows sent two days ago and a few pending ones, the claim (bounded by bytes or
    not) reads ix_outbox_pending and ix_outbox_leases, also when the server uses a generic plan (as
    psycopg's prepared statements lead it to); the console's last hour and the ordered probe
    read their (partial) indexes."""
    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (event_type, payload, status, sent_at) "
                    "SELECT 'old', '{}'::jsonb, 'sent', now() - interval '2 days' "
                    "FROM generate_series(1, 200000)"
                )
            )
            _insert_pending(conn, 50)
            conn.execute(sa.text("ANALYZE outbox"))
        dialect = PostgresDialect()
        # The claim bounded by bytes (RELAY_BATCH_MAX_BYTES) reads the same indexes.
        for sized, late in ((False, False), (True, False), (True, True)):
            stmt = dialect.claim_statement(
                worker="w", limit=10, lease_seconds=30, sized=sized, sized_late=late
            )
            plan = _generic_plan(engine, stmt, dialect.bound_params(2**24 if sized else None, True))
            assert "ix_outbox_pending" in plan, plan
            assert "ix_outbox_leases" in plan, plan
            assert "Seq Scan on outbox" not in plan, plan
        # The partial indexes (0008) still serve the queries that need them.
        plan = _generic_plan(engine, operations_for(dialect).sent_per_minute())
        assert "ix_outbox_sent_at" in plan, plan
        run = dialect.run_statement()
        plan = _generic_plan(engine, run, dialect.run_params([("k", 1), ("k", 2)]))
        assert "uq_outbox_ordering_key_seq" in plan, plan
    finally:
        engine.dispose()


def test_claim_updates_through_the_primary_key_on_a_young_table(pg_url: str) -> None:
    """A table about the size of the batches (a fresh deployment, a bench): the claim's
    UPDATE (bounded by bytes or not) still finds its rows through the primary key, never by
    hashing the whole table."""
    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            _insert_pending(conn, 20000)
            conn.execute(sa.text("ANALYZE outbox"))
        dialect = PostgresDialect()
        for sized, late in ((False, False), (True, False), (True, True)):
            stmt = dialect.claim_statement(
                worker="w", limit=1000, lease_seconds=30, sized=sized, sized_late=late
            )
            params = dialect.bound_params(2**24 if sized else None, True)
            for mode in ("force_custom_plan", "force_generic_plan"):
                plan = _generic_plan(engine, stmt, params, mode=mode)
                assert "Seq Scan" not in plan, plan
                assert "Index Scan using pk_outbox on outbox" in plan, plan
    finally:
        engine.dispose()


def test_outcomes_are_recorded_through_the_primary_key_before_any_analyze(pg_url: str) -> None:
    """A young table nobody has analyzed, midway through a drain: the fenced statements that
    record a batch (mark sent, renew, release, held) reach their rows by primary key. Read
    through ix_outbox_unsent, a bitmap scan visited every processing entry the index held, dead
    versions of rows sent long ago included, so each batch cost more than the last."""
    from relay.store.dispatch_path.store import DispatchStore

    store = DispatchStore.from_url(pg_url)
    try:
        with store.engine.begin() as conn:
            _insert_pending(conn, 20000)
        batch = store.claim("w", 1000, 30)
        for _ in range(8):
            _, batch = store.complete_and_claim("w", sent=batch, limit=1000, lease_seconds=30)
        dialect = PostgresDialect()
        params = {
            **dialect.fence_params([(e.id, e.attempt) for e in batch]),
            "lease_seconds": 30.0,
            "delay": 0.0,
            "error": "e",
        }
        for name in ("mark_sent", "renew", "release", "held"):
            stmt = getattr(dialect, name)("w")
            for mode in ("force_custom_plan", "force_generic_plan"):
                plan = _generic_plan(store.engine, stmt, params, mode=mode)
                assert "ix_outbox_unsent" not in plan, (name, mode, plan)
                assert "Seq Scan" not in plan, (name, mode, plan)
                assert "pk_outbox" in plan, (name, mode, plan)
    finally:
        store.engine.dispose()


def test_a_claim_skips_the_leases_still_running_without_reading_them(pg_url: str) -> None:
    """Midway through a drain by several workers, thousands of rows are leased and their
    leases run: the next claim reads the pending rows it takes, not the leased rows in front
    of them (one index over both statuses made every claim read each of those from the
    table to see that its lease still ran)."""
    from relay.store.dispatch_path.store import DispatchStore

    store = DispatchStore.from_url(pg_url)
    try:
        with store.engine.begin() as conn:
            _insert_pending(conn, 12000)
        for n in range(8):  # 4 workers x 2 batches in flight
            assert len(store.claim(f"w{n % 4}", 1000, 30)) == 1000
        stmt = PostgresDialect().claim_statement(worker="w", limit=1000, lease_seconds=30)
        compiled = stmt.compile(dialect=store.engine.dialect)
        with store.engine.connect() as conn, conn.begin():
            explain = f"EXPLAIN (ANALYZE, BUFFERS) {compiled.string}"
            plan = [row[0] for row in conn.exec_driver_sql(explain, compiled.params)]
            conn.rollback()
        text = "\n".join(plan)
        removed = sum(int(line.split(":")[1]) for line in plan if "Rows Removed by" in line)
        assert removed == 0, text
        assert "ix_outbox_leases" in text, text
        assert _pending_scan_rows(plan) == 1000, text
    finally:
        store.engine.dispose()


def test_the_hot_path_claim_does_not_read_the_leases_of_rows_sent_since_the_last_vacuum(
    pg_url: str,
) -> None:
    """20,000 rows relayed with no vacuum since (autovacuum off on this test's table): each
    claimed row left an entry in ix_outbox_leases whose lease is now in the past. The claim of
    the lane of expired leases reads them all (a bitmap scan over every such entry, 9 ms a
    claim after a minute at 3,000 events a second); the claim a dispatcher makes between two
    sweeps (``expired=False``) and the wake-up's look for new rows read a few pages."""
    from relay.store.dispatch_path.store import DispatchStore

    store = DispatchStore.from_url(pg_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE outbox SET (autovacuum_enabled = off)"))
            _insert_pending(conn, 20000)
        batch = store.claim("w", 1000, 0.001)  # leases that end at once, as 30 s later
        while batch:
            _, batch = store.complete_and_claim("w", sent=batch, limit=1000, lease_seconds=0.001)
        with store.engine.begin() as conn:
            _insert_pending(conn, 10)
        _wait_for_the_horizon(store.engine)
        dialect = PostgresDialect()
        sweep = _buffers(store.engine, dialect.unordered_ids(100, expired=True))
        hot = _buffers(store.engine, dialect.unordered_ids(100, expired=False))
        look = _buffers(store.engine, dialect.backlog(1, expired=False))
        # The sweep reads the 20,000 dead entries and their rows (466 pages when written); the
        # others the few leaf pages of ix_outbox_pending those rows left (57-67 pages).
        assert sweep > 3 * max(hot, look), (sweep, hot, look)
        assert hot < 100, hot
        assert look < 100, look
        assert len(store.claim("w", 100, 30, expired=False)) == 10
    finally:
        store.engine.dispose()


def _wait_for_the_horizon(engine: sa.Engine, timeout: float = 60.0) -> None:
    """Wait until no other session on the server holds a snapshot or a transaction older than
    now: until then the rows this test sent are not dead to everyone, no scan may mark their
    index entries dead, and the hot path reads them all. Any session does (an open transaction
    in another database holds it too): tests running beside this one keep transactions open on
    purpose, and the fresh-clone CI run saw 375 pages instead of about 60 once for that."""
    held = sa.text(
        "SELECT pid, datname, state, age(backend_xmin), age(backend_xid) FROM pg_stat_activity"
        " WHERE pid <> pg_backend_pid() AND (age(backend_xmin) >= age(CAST(:mark AS xid))"
        " OR age(backend_xid) >= age(CAST(:mark AS xid)))"
    )
    with engine.connect() as conn:
        mark = str(conn.execute(sa.text("SELECT txid_current() % 4294967296")).scalar_one())
        conn.commit()
        deadline = time.monotonic() + timeout
        while rows := conn.execute(held, {"mark": mark}).all():
            conn.commit()
            assert time.monotonic() < deadline, f"sessions holding the horizon: {rows}"
            time.sleep(0.2)


def _buffers(engine: sa.Engine, stmt: Any) -> int:
    """Shared buffers ``stmt`` touched (EXPLAIN ANALYZE's top line), rolled back."""
    compiled = stmt.compile(dialect=engine.dialect)
    with engine.connect() as conn, conn.begin():
        explain = f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {compiled.string}"
        plan = conn.exec_driver_sql(explain, compiled.params).scalar_one()
        conn.rollback()
    top = plan[0]["Plan"]
    return int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))


def _pending_scan_rows(plan: list[str]) -> int:
    """The rows the scan of ix_outbox_pending returned (its ``actual … rows=N``)."""
    line = next(line for line in plan if "Index Scan using ix_outbox_pending" in line)
    return int(line.split("actual")[1].split("rows=")[1].split()[0])


def _insert_pending(conn: sa.Connection, count: int) -> None:
    """``count`` pending unordered rows, written in one statement."""
    conn.execute(
        sa.text(
            "INSERT INTO outbox (event_type, payload) "
            "SELECT 'new', '{}'::jsonb FROM generate_series(1, :count)"
        ),
        {"count": count},
    )


def _generic_plan(
    engine: sa.Engine,
    stmt: Any,
    params: dict[str, Any] | None = None,
    mode: str = "force_generic_plan",
) -> str:
    """EXPLAIN of ``stmt`` as a server-side prepared statement with a generic plan (or the
    plan ``mode`` asks for)."""
    compiled = stmt.compile(dialect=engine.dialect)
    with engine.begin() as conn:
        conn.execute(sa.text(f"SET LOCAL plan_cache_mode = {mode}"))
        raw = conn.connection.driver_connection
        assert raw is not None
        with raw.cursor() as cur:
            cur.execute(
                f"EXPLAIN {compiled.string}", {**compiled.params, **(params or {})}, prepare=True
            )
            return "\n".join(row[0] for row in cur.fetchall())


def test_the_purge_reads_the_oldest_sent_rows_by_index_whatever_the_statistics(
    pg_url: str,
) -> None:
    """Statistics taken while a tenth of the rows were sent (as on a queue table between
    analyzes), then every row sent a day ago: the purge's batch and its count of the rows left
    past the retention read the first entries of ix_outbox_sent_at. With the retention tested
    inside the LIMIT the planner took the matching rows for a few, read the whole table and
    sorted it for every batch (0.17 s a batch of 2,000 at 270,000 rows, against 0.01 s)."""
    from relay.store.dialects.purge import RetentionStatements

    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("ALTER TABLE outbox SET (autovacuum_enabled = off)"))
            _insert_pending(conn, 100_000)
            sent = (
                "UPDATE outbox SET status = 'sent', attempt = 1, "
                "sent_at = now() - interval '1 day' + id * interval '1 ms' WHERE {}"
            )
            conn.execute(sa.text(sent.format("id % 10 = 0")))  # a tenth sent when analyzed
            conn.execute(sa.text("ANALYZE outbox"))
            conn.execute(sa.text(sent.format("id % 10 <> 0")))
        dialect = PostgresDialect()
        statements = (
            operations_for(dialect).purge_sent(60.0, 2000),
            RetentionStatements(dialect).past_retention(60.0, 100_000),
        )
        for stmt in statements:
            compiled = stmt.compile(dialect=engine.dialect)
            with engine.connect() as conn:
                rows = conn.exec_driver_sql(f"EXPLAIN {compiled.string}", compiled.params)
                plan = "\n".join(row[0] for row in rows)
            assert "ix_outbox_sent_at" in plan, plan
            assert "Seq Scan on outbox" not in plan, plan
    finally:
        engine.dispose()


def test_a_claim_of_large_rows_sizes_only_the_rows_it_locked_before_any_analyze(
    pg_url: str,
) -> None:
    """A backlog of large rows in a table never analyzed: PostgreSQL may plan the pending lane
    as a sort over every pending row, and sized there the claim rendered the JSON of the whole
    backlog; sized after the lanes locked their rows (``sized_late``), it sizes the rows it
    locked and no other."""
    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (event_type, payload) SELECT 'large', "
                    "jsonb_build_object('s', repeat(md5(i::text), 1000)) "
                    "FROM generate_series(1, 300) AS i"
                )
            )
        dialect = PostgresDialect()
        stmt = dialect.claim_statement(
            worker="w", limit=4, lease_seconds=30, expired=False, sized=True, sized_late=True
        )
        compiled = stmt.compile(engine)
        params = {**compiled.params, **dialect.bound_params(2**24, True)}
        with engine.connect() as conn:
            raw: Any = conn.connection.driver_connection
            with raw.cursor() as cur:
                cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + str(compiled), params)
                plan = cur.fetchone()[0][0]["Plan"]
            raw.rollback()
        sized = [n for n in _nodes(plan) if n.get("Alias") == "sized_row"]
        assert sized, plan
        assert sum(n["Actual Loops"] * n["Actual Rows"] for n in sized) == 4
    finally:
        engine.dispose()


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)
