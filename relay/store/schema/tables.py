"""The relay's tables as SQLAlchemy Core metadata: the target of the Alembic chain.

``outbox`` holds the events. Ordering keys add two small tables, one row per key, split by who
writes them so that neither waits for the other:

- ``outbox_sequence``: the producers' side. An enqueue of a keyed event locks and increments its
  key's row in the business transaction, so writers of one key take turns until commit and the
  numbers they get follow commit order, with no gaps (a rollback takes its number back).
- ``outbox_progress``: the relay's side, the last sequence number of the key that was sent. It
  outlives the purge of sent rows, and the relay updates it without touching a row a producer's
  open transaction may hold.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import SchemaItem

from relay.records import Status
from relay.store.schema.eventids import EVENT_ID_LENGTH, new_event_id
from relay.store.timestamps import MYSQL_NAMES, UtcDateTime, utc_now

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

#: JSON everywhere, jsonb on PostgreSQL.
JsonType = JSON().with_variant(JSONB(), "postgresql")
#: SQLite only gives a never-reused id to an ``INTEGER PRIMARY KEY AUTOINCREMENT`` column.
IdType = BigInteger().with_variant(Integer(), "sqlite")
#: timestamptz on PostgreSQL, DATETIME(6) in UTC on MySQL, UTC text on SQLite; aware in Python.
Timestamp = UtcDateTime()

STATUSES = ", ".join(f"'{s.value}'" for s in Status)

outbox = Table(
    "outbox",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("event_type", String(255), nullable=False),
    Column("payload", JsonType, nullable=False),
    Column("headers", JsonType, nullable=True),
    Column("ordering_key", String(255), nullable=True),
    Column("status", String(16), nullable=False, server_default=Status.PENDING.value),
    Column("attempt", Integer, nullable=False, server_default=text("0")),
    Column("next_retry_at", Timestamp, nullable=True),
    Column("locked_by", String(255), nullable=True),
    Column("locked_until", Timestamp, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", Timestamp, nullable=False, server_default=utc_now()),
    Column("updated_at", Timestamp, nullable=False, server_default=utc_now()),
    Column("sent_at", Timestamp, nullable=True),
    #: The row's place in its ``ordering_key`` (1, 2, ...), given at enqueue from
    #: ``outbox_sequence``. NULL: not ordered (no key, or a keyed row written without a number).
    Column("seq", BigInteger, nullable=True),
    #: The message id, unique across outboxes and over time (``relay.store.schema.eventids``),
    #: written by the database on insert. NULL only on rows sent before migration 0010, whose
    #: messages went out with the outbox id (that id is sent again if one is ever rebuilt).
    Column("event_id", String(EVENT_ID_LENGTH), nullable=True, server_default=new_event_id()),
    #: The row's deadline: claimed after it, the row is dead-lettered, never published. NULL:
    #: none (``RELAY_EXPIRE_AFTER`` may give one at enqueue). Since migration 0015.
    Column("expires_at", Timestamp, nullable=True),
    CheckConstraint(f"status IN ({STATUSES})", name="status"),
    CheckConstraint("attempt >= 0", name="attempt"),
    sqlite_autoincrement=True,
)

#: Partial indexes exist on PostgreSQL and SQLite only.
PARTIAL_INDEX_DIALECTS = ("postgresql", "sqlite")


def only_on(item: Index, *dialect_names: str) -> Index:
    """Create ``item`` on these databases only; ``applies_to`` tells Alembic's comparison."""
    item.info["dialects"] = frozenset(dialect_names)
    return item.ddl_if(callable_=_listed_dialect)


def _listed_dialect(ddl: Any, target: Any, bind: Any, *_: Any, dialect: Dialect, **kw: Any) -> bool:
    return applies_to(target, dialect.name)


def partial_index(name: str, *columns: Any, where: str) -> Index:
    """An index over the rows ``where`` selects, on the databases that have partial indexes
    (PostgreSQL, SQLite) only."""
    rows = text(where)
    index = Index(name, *columns, postgresql_where=rows, sqlite_where=rows)
    return only_on(index, *PARTIAL_INDEX_DIALECTS)


def applies_to(item: SchemaItem, dialect_name: str) -> bool:
    """Whether ``item`` exists on a database of ``dialect_name`` (see :func:`only_on`)."""
    names = getattr(item, "info", {}).get("dialects")
    return names is None or dialect_name in names


#: The unordered claim reads two indexes, each over the rows of one status without a sequence
#: number, so a claim costs the same however many sent rows, rows of a busy key waiting their
#: turn, or rows other workers hold the table has. Pending rows, oldest first:
PENDING_UNORDERED_SQL = "status = 'pending' AND seq IS NULL"
partial_index("ix_outbox_pending", outbox.c.id, where=PENDING_UNORDERED_SQL)

#: Leased rows by the end of their lease (only a processing row has one): the claim finds the
#: expired ones here without walking past the leases still running (one index over both
#: statuses made every claim walk the rows in flight, up to workers x 2 batches, before it
#: reached a pending one).
LEASED_UNORDERED_SQL = "locked_until IS NOT NULL AND seq IS NULL"
partial_index("ix_outbox_leases", outbox.c.locked_until, where=LEASED_UNORDERED_SQL)

#: Rows not sent, by status and age: the metrics count each status and find the oldest pending
#: row here (capped, index-only), however long the sent history. MySQL counts through
#: ``ix_outbox_status_seq_id`` instead.
UNSENT_SQL = "status IN ('pending', 'processing', 'failed')"
partial_index("ix_outbox_unsent", outbox.c.status, outbox.c.created_at, where=UNSENT_SQL)

#: MySQL has no partial index: the unordered claim reads one status at a time, ``seq IS NULL``,
#: in id order from this one, which skips sent and sequenced rows by seeking, not scanning.
only_on(
    Index("ix_outbox_status_seq_id", outbox.c.status, outbox.c.seq, outbox.c.id),
    *sorted(MYSQL_NAMES),
)

#: A key's rows by sequence number: the ordered claim probes ``(key, last sent + 1)`` and reads
#: a run from there. Unique: two rows of a key never share a number. Only numbered rows (on
#: PostgreSQL and SQLite): every claim and outcome writes a row version into each index that
#: covers the row, and an unkeyed row has nothing to find here.
SEQUENCED_SQL = "seq IS NOT NULL"
Index(
    "uq_outbox_ordering_key_seq",
    outbox.c.ordering_key,
    outbox.c.seq,
    unique=True,
    postgresql_where=text(SEQUENCED_SQL),
    sqlite_where=text(SEQUENCED_SQL),
)

#: Producers' side of the fence: the last sequence number handed out per key.
outbox_sequence = Table(
    "outbox_sequence",
    metadata,
    Column("ordering_key", String(255), primary_key=True),
    Column("last_seq", BigInteger, nullable=False),
)

#: Relay's side: the last sequence number of the key that the broker confirmed.
outbox_progress = Table(
    "outbox_progress",
    metadata,
    Column("ordering_key", String(255), primary_key=True),
    Column("sent_seq", BigInteger, nullable=False, server_default=text("0")),
)

#: Consumers' side: one row per (consumer, message id) it processed, written in the consumer's
#: own transaction (``relay.consume.inbox.claim``), so a redelivered message takes effect once.
inbox = Table(
    "relay_inbox",
    metadata,
    Column("consumer", String(255), primary_key=True),
    Column("message_id", String(255), primary_key=True),
    Column("received_at", Timestamp, nullable=False, server_default=utc_now()),
)
#: Retention deletes by age.
Index("ix_relay_inbox_received_at", inbox.c.received_at)

#: When a periodic part of the fleet last ran (``tick``: ``celery beat`` is alive), in database
#: time; ``relay doctor`` reads it.
heartbeats = Table(
    "relay_heartbeats",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("beat_at", Timestamp, nullable=False, server_default=utc_now()),
)

#: Sent rows by the time they were sent: the console's last-hour throughput and lag charts read
#: only that hour's rows, however long the history. Only sent rows (PostgreSQL and SQLite).
SENT_SQL = "sent_at IS NOT NULL"
Index(
    "ix_outbox_sent_at",
    outbox.c.sent_at,
    postgresql_where=text(SENT_SQL),
    sqlite_where=text(SENT_SQL),
)

#: Every action an operator took through the web console or its API: who, what, the filter,
#: how many rows, when (``relay.console``). Written in the action's own transaction.
audit = Table(
    "relay_audit",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("at", Timestamp, nullable=False, server_default=utc_now()),
    #: The name the operator signed in with, or what a script sent as ``X-Relay-Actor``.
    Column("actor", String(255), nullable=False),
    #: ``operator`` or ``viewer``: the credential's role.
    Column("role", String(16), nullable=False),
    #: ``console`` (a signed-in browser) or ``api`` (a bearer token).
    Column("via", String(16), nullable=False),
    #: ``retry`` or ``purge``.
    Column("action", String(16), nullable=False),
    #: The status acted on: ``failed``, or ``sent`` for a purge of sent rows.
    Column("status", String(16), nullable=False),
    #: The filter as JSON (``EventFilter.as_dict``).
    Column("selector", JSON, nullable=False),
    Column("matched", Integer, nullable=False),
    Column("changed", Integer, nullable=False),
    sqlite_autoincrement=True,
)

#: The retention purger's lease and record, one row per purger (``sent``): a purge run holds
#: the lease (``holder`` until ``expires_at``) across its short transactions, so one purger
#: works per database whatever runs it (Celery beat, ``relay dispatch --loop``); ``behind_rows``
#: and ``prev_behind_rows`` are the sent rows past the retention left after the last two runs.
purger = Table(
    "relay_purger",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(255), nullable=True),
    Column("expires_at", Timestamp, nullable=True),
    Column("ran_at", Timestamp, nullable=True),
    Column("behind_rows", BigInteger, nullable=False, server_default=text("0")),
    Column("prev_behind_rows", BigInteger, nullable=False, server_default=text("0")),
)

#: Sent events counted per minute (epoch minute) and shard (so concurrent relays rarely wait
#: on one row), with their commit-to-sent lag: what the console's charts and ``relay status``
#: read when rows are deleted at send (``RELAY_DELETE_ON_SEND``). Written in the statement's
#: transaction that deletes the rows; the purger drops minutes past a day.
sent_counts = Table(
    "outbox_sent_counts",
    metadata,
    Column("minute", BigInteger, primary_key=True, autoincrement=False),
    Column("shard", Integer, primary_key=True, autoincrement=False),
    Column("sent", BigInteger, nullable=False),
    Column("lag_sum", Float, nullable=False),
    Column("lag_max", Float, nullable=False),
)

#: What a pause can hold back: rows of an event type (a pattern), of an ordering key, or every
#: row of a database (by its name in ``RELAY_DATABASES``).
PAUSE_KINDS = ("event_type", "key", "database")

#: The pauses in force, one row each, written by ``relay pause`` and the console and read by
#: every relay of the database: a paused row stays ``pending`` and is not claimed.
pauses = Table(
    "relay_pauses",
    metadata,
    Column("id", IdType, primary_key=True, autoincrement=True),
    Column("kind", String(16), nullable=False),
    #: The event-type pattern, the ordering key, or the database name.
    Column("value", String(255), nullable=False),
    Column("reason", Text, nullable=True),
    Column("paused_by", String(255), nullable=True),
    Column("paused_at", Timestamp, nullable=False, server_default=utc_now()),
    UniqueConstraint("kind", "value"),
    CheckConstraint("kind IN ({})".format(", ".join(f"'{k}'" for k in PAUSE_KINDS)), name="kind"),
    sqlite_autoincrement=True,
)

#: One token bucket per rate limit, named by its event-type pattern and
#: shared by every relay of the database: a claim of a limited type takes tokens from its row,
#: refilled by the database clock since ``refilled_at``.
rate_buckets = Table(
    "relay_rate_buckets",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("tokens", Float, nullable=False),
    Column("refilled_at", Timestamp, nullable=False, server_default=utc_now()),
)

#: Every table the relay's migrations own (Alembic's comparison looks at these only).
TABLES = frozenset(metadata.tables)


#: The public names: the tables an application may read, and what its own Alembic chain needs.
__all__ = ["applies_to", "inbox", "metadata", "outbox"]
