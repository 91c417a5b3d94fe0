"""``kill -HUP`` on ``relay dispatch --loop`` over ``RELAY_DATABASES=@PATH``: the file read
again and the process's databases brought in line with it, without a restart.

A database added is due at once (rows may be waiting); one dropped is given up when no unit
of its runs (its connection closed, its store disposed: its rows wait for whoever relays that
database next); one whose URL changed is both. The wake-ups are rebuilt over the new list (one
per PostgreSQL server), the budget's share of them counted again, and worker threads added up
to the budget when the list grew. A list the checks refuse (a bad entry, a file that cannot be
read) changes nothing: the error is logged and the databases stay as they were.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Protocol

from relay.config import Settings
from relay.config.database_list import forget_files
from relay.config.databases import Fleet, Member
from relay.exceptions import ConfigError
from relay.runners.many.schedule import Schedule
from relay.wakeup.serverwatch import ServerWatcher, server_watches

if TYPE_CHECKING:
    from relay.runners.many.workers import Served

log = logging.getLogger("relay")


class Reloadable(Protocol):
    """What a reload changes of :class:`relay.runners.many.workers.ManyDatabases` (which
    calls it)."""

    settings: Settings
    fleet: Fleet
    databases: dict[str, Served]
    schedule: Schedule
    watches: list[ServerWatcher]
    threads: list[threading.Thread]

    def wake(self, names: tuple[str, ...]) -> None: ...

    def start_workers(self, count: int) -> None: ...

    def serve(self, member: Member, purge_at: float) -> Served: ...


def apply(t: Reloadable) -> int | None:
    """Bring ``t`` in line with ``RELAY_DATABASES`` read again; returns the worker threads it
    started, or None while a database to drop still runs a unit (call again: it is held back
    from new units meanwhile)."""
    forget_files()
    try:
        fresh = Fleet.from_settings(t.settings)
    except ConfigError as exc:
        log.error("relay reload refused, the %d databases stay: %s", len(t.databases), exc)
        return 0
    members = {m.name: m for m in fresh.members}
    gone = [
        name
        for name, db in t.databases.items()
        if name not in members
        or members[name].settings.database_url != db.runtime.settings.database_url
    ]
    busy = [name for name in gone if t.schedule.entries[name].running]
    if busy:
        for name in gone:
            t.schedule.entries[name].due_at = math.inf
        return None
    added = [m for m in fresh.members if m.name not in t.databases or m.name in gone]
    if not gone and not added:
        log.info("relay reload: RELAY_DATABASES unchanged (%d databases)", len(t.databases))
        return 0
    for name in gone:
        _drop(t, name)
    for w in t.watches:
        w.stop()
    t.fleet = fresh
    t.watches = server_watches(fresh, t.wake)
    now = time.monotonic()
    t.schedule.refit(fresh, added, now)
    for m in added:
        t.databases[m.name] = t.serve(m, now + m.settings.purge_interval_seconds)
    for w in t.watches:
        w.start()
    more = max(0, min(t.schedule.slots, len(t.databases)) - len(t.threads))
    t.start_workers(more)
    log.info(
        "relay reloaded RELAY_DATABASES: %d databases; added %s; dropped %s",
        len(t.databases),
        ", ".join(m.name for m in added) or "none",
        ", ".join(gone) or "none",
    )
    return more


def _drop(t: Reloadable, name: str) -> None:
    served = t.databases.pop(name)
    t.schedule.entries.pop(name)
    served.runtime.close()
