"""The claim stays constant-time as history grows: PostgreSQL plans it on the partial index."""

from __future__ import annotations

import sqlalchemy as sa

from relay.dialects.postgresql import PostgresDialect
from relay.engine import create_engine


def test_claim_uses_the_partial_index_even_as_a_generic_prepared_plan(pg_url: str) -> None:
    """With 200k sent rows and a few pending ones, the claim reads ix_outbox_claimable, also
    when the server uses a generic plan (as psycopg's prepared statements lead it to)."""
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
                    "INSERT INTO outbox (event_type, payload) "
                    "SELECT 'new', '{}'::jsonb FROM generate_series(1, 50)"
                )
            )
            conn.execute(sa.text("ANALYZE outbox"))
        stmt = PostgresDialect().claim_statement(worker="w", limit=10, lease_seconds=30)
        compiled = stmt.compile(dialect=engine.dialect)
        with engine.begin() as conn:
            conn.execute(sa.text("SET LOCAL plan_cache_mode = force_generic_plan"))
            raw = conn.connection.driver_connection
            assert raw is not None
            with raw.cursor() as cur:
                cur.execute(f"EXPLAIN {compiled.string}", compiled.params, prepare=True)
                plan = "\n".join(row[0] for row in cur.fetchall())
        assert "ix_outbox_claimable" in plan, plan
        assert "Seq Scan on outbox" not in plan.split("SubPlan")[0], plan
    finally:
        engine.dispose()
