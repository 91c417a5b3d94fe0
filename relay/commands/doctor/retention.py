"""``relay doctor``'s retention check (issue 25): whether the purge keeps up, from its record
(rows past the retention left after each of the last two runs) and the oldest sent row's age.
"""

from __future__ import annotations

from relay.commands.doctor.verdicts import PASS, WARN, Check
from relay.config import Settings
from relay.store.operations.retention import BEHIND_COUNTED_UP_TO, RetentionStore

#: Slack beyond retention + two purge intervals before a sent row counts as forgotten.
FORGOTTEN_SLACK_SECONDS = 60.0


def retention(settings: Settings) -> Check:
    """Warn when the last purge run left rows past the retention by the hundred thousand, or
    more than the run before it, or when a sent row outlived the retention by two purge
    intervals (nothing purges)."""
    store = RetentionStore.from_url(settings.database_url)
    try:
        record, oldest = store.record(), store.oldest_sent_age()
    finally:
        store.dispose()
    s = settings
    if record is not None and record.far_behind:
        return Check(
            "retention",
            WARN,
            f"the last purge run left at least {BEHIND_COUNTED_UP_TO:,} sent rows past the "
            "retention: the purge is working through a backlog, or does not keep up",
            "if this lasts more than a few runs, look for a slow or contended database in the "
            "purger's log; shorten RELAY_PURGE_INTERVAL_SECONDS, or set RELAY_DELETE_ON_SEND=1 "
            "(docs/retention.md)",
        )
    if record is not None and record.falling_behind:
        return Check(
            "retention",
            WARN,
            f"sent rows past the retention grew from {record.prev_behind_rows} to "
            f"{record.behind_rows} between the last two purge runs: the purge is falling behind",
            "look for a slow or contended database in the purger's log; shorten "
            "RELAY_PURGE_INTERVAL_SECONDS, or set RELAY_DELETE_ON_SEND=1 (docs/retention.md)",
        )
    limit = s.retention_seconds + 2 * s.purge_interval_seconds + FORGOTTEN_SLACK_SECONDS
    if oldest is not None and oldest > limit:
        return Check(
            "retention",
            WARN,
            f"the oldest sent row was sent {oldest:.0f}s ago, past the retention "
            f"({s.retention_seconds:.0f}s) by more than two purge intervals: nothing purges",
            "run `celery -A relay beat` or `relay dispatch --loop` (both purge), or "
            "`relay purge-sent --older-than` from cron",
        )
    mode = "rows deleted at send" if s.delete_on_send else f"{s.retention_seconds:.0f}s kept"
    if record is None or record.ran_ago_seconds is None:
        return Check("retention", PASS, f"{mode}; no purge run recorded yet")
    return Check(
        "retention",
        PASS,
        f"{mode}; last purge {record.ran_ago_seconds:.0f}s ago left {record.behind_rows} rows",
    )
