"""``relay doctor``'s PostgreSQL connection checks (issue 28): whether the outbox URL goes through
a pooler in transaction mode, and whether the listener's URL hears notifications.

Each check is one function returning a :class:`relay.commands.Check`, so they move with
the other checks wherever those live.
"""

from __future__ import annotations

from typing import Any

import psycopg

from relay.commands.checks import FAIL, PASS, WARN, Check
from relay.config import Settings
from relay.config.urls import redact
from relay.dispatch import listener
from relay.exceptions import ConfigError

#: How long the listener check waits for its own notification.
LISTEN_PROBE_SECONDS = 2.0


def _backend_pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    return int(row[0]) if row else 0


def transaction_pooled(database_url: str) -> bool:
    """Whether two transactions of one client connection ran on different server sessions:
    between them another client holds a transaction open, so a transaction pooler must hand
    the first client another server connection, while a direct or session-mode one cannot."""
    info = listener.conninfo(database_url)
    with (
        psycopg.connect(info, **listener.CONNECT_OPTIONS) as one,
        psycopg.connect(info, **listener.CONNECT_OPTIONS) as other,
    ):
        first = _backend_pid(one)
        with other.transaction():
            _backend_pid(other)
            second = _backend_pid(one)
    return first != second


def pooler(settings: Settings) -> Check:
    """Recognise a transaction pooler on ``RELAY_DATABASE_URL`` (supported: say what it means)."""
    name = "transaction pooler"
    try:
        pooled = transaction_pooled(settings.database_url)
    except psycopg.Error as exc:
        return Check(name, WARN, f"could not tell: {redact(str(exc).strip())}")
    if not pooled:
        return Check(name, PASS, "none: one client connection, one server session")
    return Check(
        name,
        PASS,
        "RELAY_DATABASE_URL goes through a pooler in transaction mode (PgBouncer): the relay "
        "prepares no statements and keeps no session state there; your producers' own psycopg "
        "engines need connect_args={'prepare_threshold': None} as well",
    )


def listening(settings: Settings) -> Check:
    """Whether the listener's URL hears a notification sent from another connection."""
    name = "listener"
    if not settings.notified:
        return Check(name, PASS, "RELAY_NOTIFY is off: the relay polls")
    var = settings.listen_variable
    try:
        probe = listener.Listener(
            settings.listen_connection_url,
            lambda: None,
            probe_seconds=LISTEN_PROBE_SECONDS,
            variable=var,
        )
        heard = probe.hears()
    except ConfigError as exc:
        return Check(name, FAIL, str(exc), f"correct {var}")
    except psycopg.Error as exc:
        detail = f"{var} cannot LISTEN: {redact(str(exc).strip())}"
        return Check(name, FAIL, detail, f"check {var}")
    if heard:
        return Check(name, PASS, f"hears notifications on {var}")
    return Check(
        name,
        WARN,
        f"a notification sent on {var} never reached the listener within "
        f"{LISTEN_PROBE_SECONDS:g}s (a pooler in transaction mode): the relay falls back to "
        "polling",
        "set RELAY_LISTEN_URL to a direct or session-mode URL of the same database (wake-ups in "
        "milliseconds), or RELAY_NOTIFY=0 to poll without trying",
    )


__all__ = ["listening", "pooler", "transaction_pooled"]
