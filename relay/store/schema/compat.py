"""Whether this relay may run on the schema it finds (docs/compatibility.md, "The schema").

Every 1.x release only adds to the schema (nullable columns, tables, indexes) in the release
that needs it, stops reading what goes away in the next, and drops it in a later one. So a
relay runs on any revision from :data:`MINIMUM_REVISION` on, newer ones included (the next
release's ``relay migrate`` runs while this release's relays still deliver), and refuses an
older one, naming the command that brings it up.
"""

from __future__ import annotations

from enum import Enum

import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from sqlalchemy.exc import SQLAlchemyError

from relay.exceptions import SchemaOutOfDate
from relay.store.faults import is_unavailable
from relay.store.schema.upgrade import VERSION_TABLE

#: The oldest revision this code reads and writes correctly: ``outbox.expires_at`` and the
#: pause and rate tables of 0015. Raise it only with a release that reads what a revision adds.
MINIMUM_REVISION = "0015"


class Verdict(Enum):
    #: The schema is at or past the minimum this code needs.
    RUNS = "runs"
    #: Older than the minimum: ``relay migrate`` first.
    TOO_OLD = "too old"
    #: No version table: made by ``metadata.create_all`` (tests, the embedded demo), which
    #: always matches this code.
    UNVERSIONED = "unversioned"


def verdict(found: str | None, minimum: str = MINIMUM_REVISION) -> Verdict:
    """Pure: what a relay needing ``minimum`` does with a database at revision ``found``
    (the chain's revisions are numbered, so later ones sort after; an unknown name is a
    later release's)."""
    if found is None:
        return Verdict.UNVERSIONED
    if found.isdigit() and minimum.isdigit() and int(found) < int(minimum):
        return Verdict.TOO_OLD
    return Verdict.RUNS


def require(engine: sa.Engine, database: str) -> bool:
    """Refuse (:class:`~relay.exceptions.SchemaOutOfDate`) a schema older than this code
    needs; True once checked, False when the database could not be reached (the caller's
    own connection handling says so, and the check runs again next time)."""
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table(VERSION_TABLE):
                return True
            found = MigrationContext.configure(
                conn, opts={"version_table": VERSION_TABLE}
            ).get_current_revision()
    except SQLAlchemyError as exc:
        if is_unavailable(exc):
            return False
        raise
    if verdict(found) is Verdict.TOO_OLD:
        raise SchemaOutOfDate(
            f"database {database!r}: the outbox schema is at revision {found}, older than the"
            f" {MINIMUM_REVISION} this relay needs; run `relay migrate` (the relays already"
            " running keep working meanwhile), then start this one"
        )
    return True
