"""``relay doctor``'s PostgreSQL connection checks (issues 27 and 28): whether the outbox URL
goes through a pooler in transaction mode, and whether the wake-up can watch the outbox id
sequence.

Each check is one function returning a :class:`relay.commands.doctor.verdicts.Check`, as the
doctor's other checks do.
"""

from __future__ import annotations

import sqlalchemy as sa

from relay.commands.doctor.verdicts import FAIL, PASS, WARN, Check
from relay.config import Settings
from relay.exceptions import ConfigError, StoreError
from relay.store.dispatch_path.sequence import SequenceReader
from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.health import HealthStore


def pooler(settings: Settings) -> Check:
    """Recognise a transaction pooler on ``RELAY_DATABASE_URL`` (supported: say what it means)."""
    name = "transaction pooler"
    # Its own connections, both new: a pooled one could carry a transaction into the test.
    store = HealthStore.from_url(settings.database_url, poolclass=sa.pool.NullPool)
    try:
        pooled = store.transaction_pooled()
    except StoreError as exc:
        return Check(name, WARN, f"could not tell: {exc}")
    finally:
        store.dispose()
    if not pooled:
        return Check(name, PASS, "none: one client connection, one server session")
    return Check(
        name,
        PASS,
        "RELAY_DATABASE_URL goes through a pooler in transaction mode (PgBouncer): the relay "
        "prepares no statements and keeps no session state there, and its wake-up needs none; "
        "your producers' own psycopg engines need connect_args={'prepare_threshold': None} "
        "as well",
    )


def wakeup(settings: Settings) -> Check:
    """Whether the wake-up can read the outbox id sequence, and sees every insert there."""
    name = "wake-up"
    if not settings.notified:
        return Check(name, PASS, "RELAY_NOTIFY is off: the relay polls")
    var = settings.listen_variable
    try:
        store = DispatchStore.from_url(
            settings.listen_connection_url, variable=var, poolclass=sa.pool.NullPool
        )
    except ConfigError as exc:
        return Check(name, FAIL, str(exc), f"correct {var}")
    reader = SequenceReader(store)
    try:
        sequence = reader.sequence()
        if sequence is None:
            return Check(
                name,
                WARN,
                "outbox.id has no sequence, so nothing shows that rows were inserted: the relay "
                "polls adaptively instead",
                "let `relay migrate` create the table (id is a bigserial)",
            )
        try:
            reader.look(sequence)
        except StoreError as exc:
            return Check(
                name,
                WARN,
                f"cannot read {sequence} on {var} ({exc}): the relay polls adaptively instead",
                f"GRANT SELECT ON SEQUENCE {sequence} TO the relay's role",
            )
        cache = reader.cache(sequence)
    except StoreError as exc:
        return Check(name, WARN, f"could not tell: {exc}")
    finally:
        reader.close()
        store.dispose()
    if cache > 1:
        return Check(
            name,
            WARN,
            f"{sequence} has CACHE {cache}: an insert served from a session's cache moves "
            "nothing the relay sees, so such rows wait for the tick",
            f"ALTER SEQUENCE {sequence} CACHE 1",
        )
    every = f"{settings.poll_floor_seconds:g}s"
    return Check(
        name, PASS, f"watches {sequence} every {every} on {var}; writers run nothing for it"
    )


__all__ = ["pooler", "wakeup"]
