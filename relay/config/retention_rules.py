"""The retention settings' rules: ``RELAY_RETENTION_SECONDS``, its alias for 0
``RELAY_DELETE_ON_SEND``, and ``RELAY_PURGE_INTERVAL_SECONDS`` (docs/retention.md)."""

from __future__ import annotations

from relay.config.env import check

#: Sent rows are kept a week unless ``RELAY_RETENTION_SECONDS`` says otherwise.
DEFAULT_SECONDS = 7 * 86400.0
RETENTION, DELETE_ON_SEND = "RELAY_RETENTION_SECONDS", "RELAY_DELETE_ON_SEND"


def validate(
    retention_seconds: float, retention_set: bool, delete_on_send: bool, interval: float
) -> None:
    """Refuse a negative retention or interval, and a delete-on-send contradicted by a
    retention the user set (0 means delete on send; a retention > 0 means keep rows)."""
    r = retention_seconds
    check(r >= 0, RETENTION, r, "must be >= 0 (0: delete rows at send)")
    why = f"contradicts {RETENTION}={r!r} (0 means delete on send; set one of the two)"
    check(not (delete_on_send and r > 0 and retention_set), DELETE_ON_SEND, delete_on_send, why)
    check(delete_on_send or r > 0, DELETE_ON_SEND, delete_on_send, why)
    check(interval > 0, "RELAY_PURGE_INTERVAL_SECONDS", interval, "must be > 0")
