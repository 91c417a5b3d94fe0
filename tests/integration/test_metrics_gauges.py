"""The outbox gauges of relay.observe.metrics on every database: capped counts, read once per
interval."""

from __future__ import annotations

import sqlalchemy as sa
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from relay.observe.metrics import OutboxCollector
from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.store import OperationsStore
from relay.store.schema.tables import outbox
from tests.support import databases
from tests.support.rows import enqueue_many, expire_leases


def _values(collector: OutboxCollector) -> dict[tuple[str, str], float]:
    metrics: list[Metric] = list(collector.collect())
    return {(s.name, s.labels.get("status", "")): s.value for m in metrics for s in m.samples}


def _backlog(engine: sa.Engine, store: DispatchStore) -> None:
    """2 pending, 2 processing with expired leases, 1 failed."""
    ids = enqueue_many(engine, 5, "gauge.event")
    store.claim("worker-1", 2, 30)
    expire_leases(engine)
    with engine.begin() as conn:
        conn.execute(sa.update(outbox).where(outbox.c.id == ids[-1]).values(status="failed"))


def test_gauges_count_each_unfinished_status_and_expired_leases(
    engine: sa.Engine, store: DispatchStore
) -> None:
    """Rows per unfinished status, expired leases and the oldest pending age, from one read."""
    _backlog(engine, store)
    values = _values(OutboxCollector(OperationsStore(engine), min_interval=0))
    assert values[("relay_outbox_up", "")] == 1
    assert values[("relay_outbox_rows", "pending")] == 2
    assert values[("relay_outbox_rows", "processing")] == 2
    assert values[("relay_outbox_rows", "failed")] == 1
    assert values[("relay_expired_leases", "")] == 2
    assert 0 <= values[("relay_oldest_pending_age_seconds", "")] < 600
    assert values[("relay_outbox_read_seconds", "")] >= 0


def test_gauges_stop_counting_at_the_cap(engine: sa.Engine, store: DispatchStore) -> None:
    """With a cap of 1 each count says at most 1: a scrape never scans past the cap."""
    _backlog(engine, store)
    values = _values(OutboxCollector(OperationsStore(engine), cap=1, min_interval=0))
    assert values[("relay_outbox_rows", "pending")] == 1
    assert values[("relay_outbox_rows", "processing")] == 1
    assert values[("relay_expired_leases", "")] == 1


def test_scrapes_within_the_interval_reuse_the_last_read(
    engine: sa.Engine, store: DispatchStore
) -> None:
    """Two scrapes inside ``min_interval`` cost one read: the second sees the first's values."""
    collector = OutboxCollector(OperationsStore(engine), min_interval=3600)
    enqueue_many(engine, 1, "gauge.event")
    assert _values(collector)[("relay_outbox_rows", "pending")] == 1
    enqueue_many(engine, 1, "gauge.event")
    assert _values(collector)[("relay_outbox_rows", "pending")] == 1


def test_an_unreachable_database_reports_down_instead_of_failing_the_scrape() -> None:
    """A read that fails gives relay_outbox_up 0 and no gauges; the endpoint keeps serving."""
    store = OperationsStore.from_url("postgresql://nobody:x@127.0.0.1:9/none?connect_timeout=1")
    registry = CollectorRegistry()
    registry.register(OutboxCollector(store, min_interval=0))
    try:
        assert registry.get_sample_value("relay_outbox_up") == 0
        assert registry.get_sample_value("relay_outbox_rows", {"status": "pending"}) is None
    finally:
        store.dispose()


def test_postgresql_reads_the_gauges_from_the_unsent_index_not_the_history(pg_url: str) -> None:
    """With 200k sent rows beside a few unsent ones, the gauges' statement reads
    ix_outbox_unsent and never scans the table, also as a generic prepared plan."""
    from relay.store.dialects.postgresql import PostgresDialect, PostgresOperations
    from relay.store.engine import create_engine

    engine = create_engine(pg_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (event_type, payload, status, sent_at) "
                    "SELECT 'old', '{}'::jsonb, 'sent', now() FROM generate_series(1, 200000)"
                )
            )
            conn.execute(
                sa.text(
                    "INSERT INTO outbox (event_type, payload, status) SELECT 'new', '{}'::jsonb,"
                    " (ARRAY['pending', 'processing', 'failed'])[1 + g % 3]"
                    " FROM generate_series(1, 60) AS g"
                )
            )
            conn.execute(sa.text("ANALYZE outbox"))
        compiled = (
            PostgresOperations(PostgresDialect()).gauges(limit=1000).compile(dialect=engine.dialect)
        )
        with engine.begin() as conn:
            conn.execute(sa.text("SET LOCAL plan_cache_mode = force_generic_plan"))
            raw = conn.connection.driver_connection
            assert raw is not None
            with raw.cursor() as cur:
                cur.execute(f"EXPLAIN {compiled.string}", compiled.params, prepare=True)
                plan = "\n".join(row[0] for row in cur.fetchall())
        assert plan.count("ix_outbox_unsent") == 5, plan
        assert "Seq Scan" not in plan, plan
    finally:
        engine.dispose()


def test_one_endpoint_over_several_databases_labels_each_gauge_by_source(
    backend_pool: databases.BackendPool,
) -> None:
    """Over several databases (a Celery worker's endpoint with ``RELAY_DATABASES``) every gauge
    carries ``source``, each database's counts come from that database alone, and one that
    cannot be read reports ``relay_outbox_up 0`` beside the others' values."""
    with (
        backend_pool.database("postgresql") as orders_url,
        backend_pool.database("mysql") as billing_url,
    ):
        stores = {
            "orders": OperationsStore.from_url(orders_url),
            "billing": OperationsStore.from_url(billing_url),
            "gone": OperationsStore.from_url(
                "postgresql://nobody:x@127.0.0.1:9/none?connect_timeout=1"
            ),
        }
        try:
            enqueue_many(stores["orders"].engine, 3, "gauge.event")
            enqueue_many(stores["billing"].engine, 1, "gauge.event")
            registry = CollectorRegistry()
            registry.register(OutboxCollector(stores, min_interval=0))

            def pending(source: str) -> float | None:
                labels = {"source": source, "status": "pending"}
                return registry.get_sample_value("relay_outbox_rows", labels)

            assert pending("orders") == 3
            assert pending("billing") == 1
            assert pending("gone") is None
            up = {s: registry.get_sample_value("relay_outbox_up", {"source": s}) for s in stores}
            assert up == {"orders": 1, "billing": 1, "gone": 0}
            assert registry.get_sample_value("relay_outbox_rows", {"status": "pending"}) is None
        finally:
            for store in stores.values():
                store.dispose()
