"""The price of each index a writer's row enters (issue 27), no relay.

A pending, unkeyed row enters the primary key and, on PostgreSQL, the partial indexes
``ix_outbox_pending`` and ``ix_outbox_unsent`` (the others' predicates leave it out until it is
leased, sent or keyed); on MySQL/MariaDB, which have no partial index, every index of the
table: ``ix_outbox_status_seq_id``, ``ix_outbox_sent_at`` and ``uq_outbox_ordering_key_seq``
(a NULL entry each for the last two). Each side here is the outbox's columns and primary key
(``plain``) plus one of those indexes, built from the relay's own schema, so each index's price
is its side over ``plain``, measured in the same run as :func:`bench.writers.single_rows`
measures all of them together.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from bench import services
from bench.timing import ratio
from bench.writing import median, rate, write, writer_pool
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox

#: The indexes a pending, unkeyed row enters besides the primary key, per database.
ENTERED = {
    "postgresql": ("ix_outbox_pending", "ix_outbox_unsent"),
    "mariadb": ("ix_outbox_status_seq_id", "ix_outbox_sent_at", "uq_outbox_ordering_key_seq"),
}


def _tables(url: str, kind: str) -> list[str]:
    """``bench_plain`` and one ``bench_with_<index>`` table per entered index; their names.

    The table's name is not the index's: PostgreSQL keeps tables and indexes in one namespace.
    """
    md = sa.MetaData()
    names = ["bench_plain"]
    sa.Table("bench_plain", md, *(c._copy() for c in outbox.columns))
    for name in ENTERED[kind]:
        table = sa.Table(f"bench_with_{name}", md, *(c._copy() for c in outbox.columns))
        source = next(i for i in outbox.indexes if i.name == name)
        where = {
            f"{d}_where": source.dialect_options[d]["where"]
            for d in ("postgresql", "sqlite")
            if source.dialect_options[d]["where"] is not None
        }
        columns = [table.c[c.name] for c in source.columns]
        sa.Index(f"bench_{name}", *columns, unique=source.unique, **where)
        names.append(table.name)
    engine = create_engine(url)
    md.create_all(engine)
    engine.dispose()
    return names


def _clear(url: str, tables: Sequence[str]) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for table in tables:
            conn.execute(sa.text(f"TRUNCATE TABLE {table}"))
    engine.dispose()


def measure(kind: str, writers: Sequence[int], seconds: float, reps: int) -> dict[str, Any]:
    """Commits/s of ``plain`` and of ``plain`` plus each entered index, per K, no relay."""
    out: dict[str, Any] = {}
    with services.database("writers_indexes", kind) as url, writer_pool() as pool:
        tables = _tables(url, kind)
        for k in writers:
            runs: dict[str, list[float]] = {t: [] for t in tables}
            for rep in range(reps):
                for table in tables if rep % 2 == 0 else tables[::-1]:
                    _clear(url, tables)
                    runs[table].append(rate(pool, write, url, table, k, seconds))
            plain = median(runs["bench_plain"])
            row: dict[str, Any] = {"writers": k, "plain": round(plain), "indexes": {}}
            for table in tables[1:]:
                got = median(runs[table])
                row["indexes"][table.removeprefix("bench_with_")] = {
                    "commits": round(got),
                    "ratio": ratio(got, plain),
                }
            row["runs"] = {t: [round(x) for x in v] for t, v in runs.items()}
            out[str(k)] = row
            print(f"  writers indexes {kind} K={k}: {row}", flush=True)
    return out
