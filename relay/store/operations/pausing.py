"""The operator's pause verbs over one database: pause, resume, list the pauses in force and
count the rows they hold back (``relay pause|resume|paused``, ``relay status``, the metrics).

A pause is a row of ``relay_pauses``; every relay of the database reads them at most once a
second (``relay.store.dispatch_path.levers``), so a pause or a resume holds fleet-wide within
two seconds. The statements are in ``relay.store.dialects.levers``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine

from relay.config import Settings
from relay.config.databases import pick, several_databases
from relay.config.settings import DATABASE_ONLY
from relay.exceptions import SelectorError
from relay.store.dialects.levers import LeverStatements
from relay.store.dialects.operations import Operations
from relay.store.dispatch_path.holds import DATABASE, EVENT_TYPE, KEY, Hold, Pauses
from relay.store.transactions import BaseStore

if TYPE_CHECKING:
    from relay.store.operations.store import Actor

#: What a pause can hold back, as the CLI and the console name it.
KINDS = (EVENT_TYPE, KEY, DATABASE)
#: Rows held by pauses are counted up to this many (a bounded scan, as the other gauges).
HELD_COUNTED_UP_TO = 10_000


@dataclass(frozen=True, slots=True)
class Pause:
    """One pause in force."""

    kind: str
    value: str
    reason: str | None
    paused_by: str | None
    paused_at: datetime
    #: Seconds since it was taken, on the database's clock.
    age_seconds: float

    def as_dict(self) -> dict[str, Any]:
        """For ``--json`` and the console's API."""
        return {
            "kind": self.kind,
            "value": self.value,
            "reason": self.reason,
            "paused_by": self.paused_by,
            "paused_at": self.paused_at.isoformat(),
            "age_seconds": round(self.age_seconds, 3),
        }


class PauseStore(BaseStore):
    """Pauses of one database: written by operators, read by every relay of it."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.levers = LeverStatements(self.dialect)
        self.ops = Operations(self.dialect)

    def pause(
        self,
        kind: str,
        value: str,
        *,
        reason: str | None = None,
        paused_by: str | None = None,
        by: Actor | None = None,
    ) -> bool:
        """Hold back what ``kind``/``value`` names; False when that pause was already in force
        (it is left as it was). ``paused_by``: who, for the list (default: ``by``'s name);
        ``by``: an operator of the console, audited in the same transaction."""
        _check(kind, value)
        params = {"b_kind": kind, "b_value": value}
        with self._tx() as conn:
            if conn.execute(self.levers.find(), params).first() is not None:
                return False
            who = paused_by if paused_by is not None else by.name if by else None
            row = {**params, "b_reason": reason, "b_by": who[:255] if who else None}
            conn.execute(self.levers.pause(), row)
            self._audit(conn, by, "pause", kind, value, reason)
            return True

    def resume(self, kind: str, value: str, *, by: Actor | None = None) -> bool:
        """Lift the pause ``kind``/``value``; False when it was not in force."""
        _check(kind, value)
        with self._tx() as conn:
            lifted = conn.execute(self.levers.resume(), {"b_kind": kind, "b_value": value}).rowcount
            if lifted:
                self._audit(conn, by, "resume", kind, value, None)
            return bool(lifted)

    def paused(self) -> list[Pause]:
        """The pauses in force, oldest first."""
        with self._tx() as conn:
            rows = conn.execute(self.levers.listed()).all()
        return [
            Pause(r.kind, r.value, r.reason, r.paused_by, r.paused_at, float(r.age_seconds or 0))
            for r in rows
        ]

    def held_rows(self, limit: int = HELD_COUNTED_UP_TO) -> int:
        """Pending rows the pauses of event types and keys hold back, counted up to ``limit``
        (a database pause holds every row: see :meth:`paused`)."""
        with self._tx() as conn:
            rows = conn.execute(self.levers.in_force()).all()
            hold = Pauses.from_rows((r.kind, r.value) for r in rows).hold()
            return int(conn.execute(self.levers.held_rows(hold, limit)).scalar() or 0)

    def gauges(self, limit: int) -> tuple[int, int, float]:
        """The metrics' view: pauses in force, pending rows they hold back (counted up to
        ``limit``; a database pause holds every pending row), and the oldest pause's age in
        seconds (0: none)."""
        listed = self.paused()
        pauses = Pauses.from_rows((p.kind, p.value) for p in listed)
        hold = Hold(types=("*",)) if pauses.database else pauses.hold()
        with self._tx() as conn:
            held = int(conn.execute(self.levers.held_rows(hold, limit)).scalar() or 0)
        return len(listed), held, max((p.age_seconds for p in listed), default=0.0)

    def _audit(
        self,
        conn: Connection,
        by: Actor | None,
        action: str,
        kind: str,
        value: str,
        reason: str | None,
    ) -> None:
        if by is None:
            return
        selector = {kind: value, **({"reason": reason} if reason else {})}
        params: dict[str, Any] = {"actor": by.name[:255], "role": by.role, "via": by.via}
        params["action"] = action
        params |= {"status": "pending", "selector": selector, "matched": 0, "changed": 1}
        conn.execute(self.ops.record_action(), params)


def _check(kind: str, value: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"a pause holds back one of {', '.join(KINDS)}, not {kind!r}")
    if not value or len(value) > 255:
        raise ValueError(f"a pause's {kind} must be 1-255 characters")


# -- the Python API (relay.pause, relay.resume, relay.paused) ----------------------------------
def pause(
    *,
    event_type: str | None = None,
    key: str | None = None,
    database: str | None = None,
    reason: str | None = None,
    settings: Settings | None = None,
    source: str | None = None,
) -> bool:
    """Hold back the event types the glob ``event_type`` matches, the ordering key ``key``, or
    the whole ``database`` (its ``RELAY_DATABASES`` name), as ``relay pause`` does: rows stay
    ``pending``, spend no attempt, and every relay of the database holds them within 2 s.
    ``settings``: default ``Settings.from_env()``; ``source``: the database of
    ``RELAY_DATABASES`` to act on (``database`` names it when given). False when the pause was
    already in force."""
    kind, value, s = _chosen(event_type, key, database, settings, source)
    return PauseStore.from_url(s.database_url).pause(kind, value, reason=reason, paused_by="api")


def resume(
    *,
    event_type: str | None = None,
    key: str | None = None,
    database: str | None = None,
    settings: Settings | None = None,
    source: str | None = None,
) -> bool:
    """Lift a pause taken with the same selector (:func:`pause`); False when none was in force."""
    kind, value, s = _chosen(event_type, key, database, settings, source)
    return PauseStore.from_url(s.database_url).resume(kind, value)


def paused(*, settings: Settings | None = None, source: str | None = None) -> list[Pause]:
    """The pauses in force in the database (``source``, or the only one configured)."""
    s = pick(settings or Settings.from_env(only=DATABASE_ONLY), source)[1]
    return PauseStore.from_url(s.database_url).paused()


def _chosen(
    event_type: str | None,
    key: str | None,
    database: str | None,
    settings: Settings | None,
    source: str | None,
) -> tuple[str, str, Settings]:
    given = [(k, v) for k, v in ((EVENT_TYPE, event_type), (KEY, key), (DATABASE, database)) if v]
    if len(given) != 1:
        raise SelectorError("name exactly one of event_type, key or database")
    kind, value = given[0]
    s = settings or Settings.from_env(only=DATABASE_ONLY)
    if kind == DATABASE and source is None and several_databases(s):
        source = value
    return kind, value, pick(s, source)[1]


__all__ = ["HELD_COUNTED_UP_TO", "KINDS", "Pause", "PauseStore", "pause", "paused", "resume"]
