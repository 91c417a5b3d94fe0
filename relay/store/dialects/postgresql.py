"""PostgreSQL: the unordered lane is one statement (ids locked with FOR UPDATE SKIP LOCKED
feeding UPDATE … RETURNING); a key's number is ``INSERT … ON CONFLICT DO UPDATE … RETURNING``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import (
    ColumnElement,
    Connection,
    ScalarSelect,
    Select,
    Table,
    TextClause,
    bindparam,
    func,
    literal_column,
    select,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import ARRAY, Insert, insert

from relay.store.dialects.clock import PROCESSING, cached
from relay.store.dialects.dispatch_path import _PLACE
from relay.store.dialects.operations import Operations
from relay.store.dialects.returning import ReturningDialect
from relay.store.dispatch_path.holds import NO_HOLD, Hold
from relay.store.schema.tables import outbox, outbox_progress, outbox_sequence

#: The ids (and attempts) a statement fences on, each bound as one array literal
#: (:func:`_int_array`) cast on the server: psycopg's list dumper took about 0.4 ms of the
#: relay's CPU for each list of 1,000 numbers, a batch's outcome binding two of them.
_IDS = sa.cast(bindparam("ids", type_=sa.Text), ARRAY(sa.BigInteger))
_ATTEMPTS = sa.cast(bindparam("attempts", type_=sa.Text), ARRAY(sa.Integer))
_SECOND: ColumnElement[Any] = literal_column("interval '1 second'")
#: The times Python's datetime holds, a day inside its years 1-9999 whatever the session's zone.
_FIRST_TIME: ColumnElement[Any] = literal_column("timestamptz '0001-01-02 00:00:00+00'")
_LAST_TIME: ColumnElement[Any] = literal_column("timestamptz '9999-12-30 00:00:00+00'")


class PostgresDialect(ReturningDialect):
    """PostgreSQL >= 12."""

    name: ClassVar[str] = "postgresql"

    def readable_time(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """NULL for a time psycopg cannot load (``infinity``, ``-infinity``, a year past 9999
        or before 1): it refuses the whole result, so the claim's SQL leaves such a time out
        and the row carries its fault (``relay.records.time_fault``). What is left psycopg
        loads as an aware datetime itself: read as such, with no result processing (two Python
        calls a claimed row through ``relay.store.timestamps.ReadTimestamp``, idle here)."""
        held = sa.case((column.between(_FIRST_TIME, _LAST_TIME), column), else_=sa.null())
        return type_coerce(held, sa.DateTime(timezone=True))

    def now(self) -> ColumnElement[datetime]:
        """``now()``: the transaction's start time on the database server."""
        return func.now()

    def now_plus(self, seconds: ColumnElement[float]) -> ColumnElement[datetime]:
        """``now() + seconds * interval '1 second'``."""
        return func.now() + seconds * _SECOND

    def seconds_since(self, column: ColumnElement[datetime]) -> ColumnElement[float]:
        """``extract(epoch from now() - column)``."""
        return sa.cast(func.extract("epoch", func.now() - column), sa.Float)

    def epoch_now(self) -> ColumnElement[float]:
        """``extract(epoch from now())``."""
        return type_coerce(literal_column("extract(epoch from now())"), sa.Float)

    def none_of(self, column: ColumnElement[Any], values: list[str]) -> ColumnElement[bool]:
        """``column <> ALL(array)``: one parameter whatever the count, so a claim under 100
        pauses is a statement as short as one under none (psycopg converts a long statement's
        placeholders anew at every execution: 1.7 ms a claim with 100 expanded names)."""
        return column != sa.all_(_text_array(values))

    def like_none(self, column: ColumnElement[Any], patterns: list[str]) -> ColumnElement[bool]:
        """``NOT (column LIKE ANY(array))``: one parameter (backslash is PostgreSQL's own
        LIKE escape)."""
        return sa.not_(column.like(sa.any_(_text_array(patterns))))

    def json_text(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """``CAST(column AS TEXT)``: psycopg reads text in C, where its jsonb loader calls
        back into Python for every value (a claimed row read in 10 µs of CPU instead of 1.5,
        before the store decodes the two texts in about 3)."""
        return sa.cast(column, sa.Text)

    def fence_params(self, keys: Sequence[tuple[int, int]]) -> dict[str, Any]:
        """Two parallel arrays, unnested into a keyed join by :meth:`_fence_many`."""
        return {
            "ids": _int_array([k[0] for k in keys]),
            "attempts": _int_array([k[1] for k in keys]),
        }

    def ids_params(self, ids: Sequence[int]) -> dict[str, Any]:
        """``ids`` as the one array literal :meth:`_bound_ids` casts."""
        return {"ids": _int_array(ids)}

    def _fence_many(self, worker: str) -> ColumnElement[bool]:
        # ``(id, attempt) IN (...)`` is planned as one OR branch per row and re-planned for every
        # batch size (2-3 ms for 100 rows, 40+ ms for 500). Joined to unnest()ed arrays, the
        # planner read ``status = 'processing'`` through ix_outbox_unsent instead: a bitmap scan
        # of every processing entry the index holds, dead versions included (nothing prunes
        # them before VACUUM), so each batch's outcome cost more than the last (a 60,000-row
        # drain: 115-140 µs of PostgreSQL CPU a row instead of about 30). Each pair is now one
        # LATERAL probe by primary key, its status test written so that no index on status can
        # serve it, and the rows are updated by id; ``locked_by`` is checked again on the row
        # the statement updates, so a row another worker reclaimed meanwhile is left alone.
        keys = func.unnest(_IDS, _ATTEMPTS).table_valued("id", "attempt").render_derived(name="k")
        probe = (
            select(outbox.c.id)
            .where(
                outbox.c.id == keys.c.id,
                outbox.c.attempt == keys.c.attempt,
                func.coalesce(outbox.c.status, "") == PROCESSING,
                outbox.c.locked_by == worker,
            )
            .limit(1)
            .lateral("o")
        )
        held = select(probe.c.id).select_from(keys.join(probe, sa.true())).scalar_subquery()
        return sa.and_(outbox.c.id == sa.any_(func.array(held)), outbox.c.locked_by == worker)

    def _among(self, ids: ScalarSelect[Any]) -> ColumnElement[bool]:
        # ``id = ANY(ARRAY(SELECT … SKIP LOCKED))``: the UPDATE finds each row through the
        # primary key. Joined to a CTE instead, the planner hashes the whole table whenever it is
        # small next to the batch (measured: a sequential scan of 20,000 rows in every claim of
        # 1,000, about a third of its time).
        return outbox.c.id == sa.any_(func.array(ids))

    def _bound_ids(self) -> ColumnElement[bool]:
        return outbox.c.id == sa.any_(_IDS)

    def _probe(
        self,
        key: ColumnElement[Any],
        seq: ColumnElement[Any],
        locked: bool = True,
        hold: Hold = NO_HOLD,
    ) -> Any:
        # A LATERAL probe with LIMIT 1 is never flattened into a join: each place is one
        # lookup in the unique (ordering_key, seq) index. As a plain join the planner, without
        # fresh statistics on a backlog that just arrived, reads "due" as matching one row and
        # scans the whole table instead (measured: 35 ms a claim at 10,000 rows, not 0.3 ms).
        columns = self.place() if locked else _PLACE  # the claim's probes size their rows
        probe = select(*columns)
        probe = probe.where(outbox.c.ordering_key == key, outbox.c.seq == seq, self.due(hold))
        probe = probe.limit(1)
        return (probe.with_for_update(skip_locked=True) if locked else probe).lateral("o")

    def head_ids(self, limit: int, hold: Hold = NO_HOLD) -> Select[Any]:
        """Ids of up to ``limit`` claimable heads, unlocked: a LATERAL probe per key, as the
        claim's. As a plain join, with few or no keys, the planner read every pending and
        processing entry of ``ix_outbox_unsent`` instead, dead versions of rows relayed since
        the last vacuum included (760 pages after 20,000 rows, for the wake-up's every look)."""
        probe = self._probe(
            outbox_progress.c.ordering_key, outbox_progress.c.sent_seq + 1, False, hold
        )
        return select(probe.c.id).select_from(outbox_progress.join(probe, sa.true())).limit(limit)

    def _key_heads(self, last: Select[Any]) -> Select[Any]:
        # LATERAL probes, never flattened into a join (as the claim's heads statement: as a
        # plain join the planner may scan the table instead of one lookup per key).
        progress = outbox_progress.c
        head = select(outbox.c.id, outbox.c.status, outbox.c.last_error).where(
            outbox.c.ordering_key == progress.ordering_key,
            outbox.c.seq == progress.sent_seq + 1,
        )
        h, top = head.limit(1).lateral("h"), last.lateral("top")
        return select(
            progress.ordering_key, progress.sent_seq, *h.c, top.c.seq.label("last_seq")
        ).select_from(outbox_progress.outerjoin(h, sa.true()).outerjoin(top, sa.true()))

    @cached
    def heads_statement(self, limit: int, hold: Hold = NO_HOLD) -> Select[Any]:
        """Claimable heads of their key (number ``sent_seq + 1``), oldest first, each locked by
        a LATERAL probe per key."""
        progress = outbox_progress.c
        probe = self._probe(progress.ordering_key, progress.sent_seq + 1, hold=hold)
        return (
            select(probe.c.id, probe.c.ordering_key, probe.c.seq, probe.c.size)
            .select_from(outbox_progress.join(probe, sa.true()))
            .order_by(probe.c.id)
            .limit(limit)
        )

    @cached
    def run_statement(self, hold: Hold = NO_HOLD) -> Select[Any]:
        """The claimable rows at the places bound as two arrays, ``run_keys`` and ``run_seqs``,
        each locked by a LATERAL probe."""
        places = (
            func.unnest(
                bindparam("run_keys", type_=ARRAY(sa.String)),
                bindparam("run_seqs", type_=ARRAY(sa.BigInteger)),
            )
            .table_valued("ordering_key", "seq")
            .render_derived(name="p")
        )
        probe = self._probe(places.c.ordering_key, places.c.seq, hold=hold)
        return select(probe.c.id, probe.c.ordering_key, probe.c.seq, probe.c.size).select_from(
            places.join(probe, sa.true())
        )

    def run_params(self, places: Sequence[tuple[str, int]]) -> dict[str, Any]:
        """Two parallel arrays for :meth:`run_statement`."""
        return {"run_keys": [p[0] for p in places], "run_seqs": [p[1] for p in places]}

    def reserve_key(self) -> Insert:
        """``INSERT … (key, 0) ON CONFLICT DO UPDATE SET last_seq = last_seq`` (locks it)."""
        stmt = insert(outbox_sequence).values(ordering_key=bindparam("key"), last_seq=0)
        return stmt.on_conflict_do_update(
            index_elements=[outbox_sequence.c.ordering_key],
            set_={"last_seq": outbox_sequence.c.last_seq},
        )

    def _insert(self, table: Table) -> Insert:
        return insert(table)

    def id_sequence(self) -> Select[Any]:
        """The schema-qualified sequence behind ``outbox.id``, which the wake-up watches.

        NULL when the column has none (:mod:`relay.wakeup.watcher` then polls)."""
        return select(func.pg_get_serial_sequence(sa.literal(outbox.name), sa.literal("id")))

    def sequence_cache(self) -> TextClause:
        """The ``CACHE`` of ``:sequence``: ids a session takes at a time (1 by default).

        Above 1, an insert served from a session's cache moves nothing the wake-up sees."""
        return sa.text(
            "SELECT seqcache FROM pg_catalog.pg_sequence "
            "WHERE seqrelid = CAST(:sequence AS regclass)"
        )

    def sequence_look(self) -> TextClause:
        """One look of the wake-up: the id sequence's last value and the oldest running xact.

        ``last_value`` is NULL until the sequence is first used; no table a writer touches is
        read."""
        return sa.text(
            "SELECT pg_sequence_last_value(CAST(:sequence AS regclass)) AS value, "
            "CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text) AS bigint) AS xmin"
        )

    def databases_inserted(self) -> TextClause:
        """Rows inserted so far in each database named in ``:names``, from the server's
        statistics: one statement on one connection sees every database of the server, the
        many-databases wake-up (:mod:`relay.store.dispatch_path.serverstats`)."""
        return sa.text(
            "SELECT datname, tup_inserted FROM pg_catalog.pg_stat_database "
            "WHERE datname = ANY(:names)"
        )

    def databases_written(self) -> TextClause:
        """Rows inserted, updated or deleted so far in each database named in ``:names``: a
        database whose count did not move since a look had no claim, outcome or new row in
        between (the Celery fleet's tick counts backlogs only where it moved)."""
        return sa.text(
            "SELECT datname, tup_inserted + tup_updated + tup_deleted "
            "FROM pg_catalog.pg_stat_database WHERE datname = ANY(:names)"
        )

    def new_xact_id(self) -> TextClause:
        """A new transaction id, the wake-up's horizon: every transaction with one is older.

        It costs the statement's own commit record, never flushed by itself."""
        return sa.text("SELECT CAST(CAST(pg_current_xact_id() AS text) AS bigint)")


class PostgresOperations(Operations):
    """The operator's statements on PostgreSQL: its advisory lock, the doctor's settings."""

    def connection_tls(self) -> TextClause:
        """Whether this session is encrypted, and with which TLS version (``relay doctor``)."""
        return sa.text("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")

    def idle_in_transaction_timeout(self) -> TextClause:
        """``SHOW idle_in_transaction_session_timeout`` (the doctor warns when it is off)."""
        return sa.text("SHOW idle_in_transaction_session_timeout")

    def server_connections(self) -> TextClause:
        """The server's ``max_connections``, the connections open now, and those of relay
        processes over many databases (``application_name`` ``relay``): the doctor's budget."""
        return sa.text(
            "SELECT CAST(current_setting('max_connections') AS integer) AS max_connections, "
            "count(*) AS open, count(*) FILTER (WHERE application_name = 'relay') AS relay "
            "FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend'"
        )

    def autovacuum_settings(self) -> TextClause:
        """Whether autovacuum can clean ``outbox``: the server's ``autovacuum`` and
        ``track_counts``, and the table's own ``autovacuum_enabled`` (NULL when not set)."""
        return sa.text(
            "SELECT current_setting('autovacuum') AS server, "
            "current_setting('track_counts') AS track_counts, "
            "(SELECT option_value FROM pg_options_to_table("
            "(SELECT reloptions FROM pg_class WHERE oid = to_regclass('outbox'))) "
            "WHERE option_name = 'autovacuum_enabled') AS outbox"
        )

    def backend_pid(self) -> Select[Any]:
        """This session's server process (the doctor tells a transaction pooler by it)."""
        return select(func.pg_backend_pid())

    def advisory_lock(self) -> Select[Any]:
        """``pg_try_advisory_xact_lock(key)``: true when this transaction took lock ``key``."""
        return select(func.pg_try_advisory_xact_lock(bindparam("key", type_=sa.BigInteger)))

    def try_lock(self, conn: Connection, key: int) -> bool:
        """``pg_try_advisory_xact_lock``: released at commit, so it also works behind a
        transaction-pooling proxy."""
        return bool(conn.execute(self.advisory_lock(), {"key": key}).scalar())


def _text_array(values: list[str]) -> ColumnElement[Any]:
    """``values`` as one ``text[]`` parameter, bound as its array literal (``{"a","b"}``):
    psycopg dumps one string at each execution, where a list of 90 took it about a
    millisecond a claim."""
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    literal = "{" + ",".join(quoted) + "}"
    return sa.cast(bindparam(None, literal, type_=sa.Text), ARRAY(sa.Text))


def _int_array(values: Sequence[int]) -> str:
    """Whole numbers as a PostgreSQL array literal (``{1,2,3}``), built in one join."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def _xid(value: ColumnElement[Any]) -> ColumnElement[int]:
    """An ``xid8`` as a number (through text: PostgreSQL has no cast from xid8 to bigint)."""
    return sa.cast(sa.cast(value, sa.Text), sa.BigInteger)
