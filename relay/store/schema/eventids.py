"""The event id: a random UUID the database writes into each outbox row (``outbox.event_id``).

It is the message's ``message_id`` and the CloudEvents ``id``: unique across every outbox
database and over time, without coordination, so one consumer's inbox can take the events of
many services, of a re-created table, or of two environments sharing a broker
(docs/guarantees.md, "The event id"). The database writes it as a column default, so a row
inserted by plain SQL with only ``event_type`` and ``payload`` gets one, and it is the same on
every attempt and re-drive of the row.

- PostgreSQL (13+): ``gen_random_uuid()``, version 4, 122 random bits.
- MySQL 8.0.13+ / MariaDB 10.2+: ``uuid()``, version 1: the server's clock (100 ns), a clock
  sequence drawn at server start and the host's node id.
- SQLite: a version-4 UUID from ``randomblob``; a database the migration chain made gets it
  from the trigger ``outbox_event_id`` (SQLite cannot add an expression default to a table).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from sqlalchemy import URL, String
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

#: A UUID in its 36-character text form.
EVENT_ID_LENGTH = 36

#: The expression, per database, as a column default (MySQL and SQLite need the parentheses
#: for an expression default). Frozen copies live in the migration that adds the column.
SQLITE_UUID4 = (
    "(lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' || "
    "substr(lower(hex(randomblob(2))), 2) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) || "
    "substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6))))"
)
DEFAULTS = {
    "postgresql": "(gen_random_uuid())::text",
    "mysql": "(uuid())",
    "mariadb": "(uuid())",
    "sqlite": SQLITE_UUID4,
}


class new_event_id(FunctionElement[str]):
    """A new event id, written by the database: usable as a ``server_default``."""

    type = String(EVENT_ID_LENGTH)
    inherit_cache = True
    name = "new_event_id"


@compiles(new_event_id)
def _new_event_id(element: new_event_id, compiler: SQLCompiler, **kw: Any) -> str:
    return DEFAULTS[compiler.dialect.name]


def default_source(url: URL) -> str:
    """The CloudEvents ``source`` of an outbox when ``RELAY_SOURCE`` is unset: a URI-reference
    naming the database kind, host and database, never the user, password or query
    (``/relay/postgresql/db.internal/shop``). Descriptive only: the event id alone is unique."""
    backend = url.get_backend_name()
    database = (url.database or "").lstrip("/") or "default"
    host = url.host or "localhost"
    return "/relay/" + "/".join(quote(part, safe="") for part in (backend, host, database))
