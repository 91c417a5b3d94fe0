"""PostgreSQL LISTEN loop: turns the commit-time NOTIFYs of the outbox trigger into claims;
and the adaptive :class:`Poller` that stands in for it on other databases.

Migration 0004 makes every statement that inserts into ``outbox`` NOTIFY :data:`CHANNEL` when
its transaction commits: a rolled-back insert notifies nothing, and PostgreSQL folds one
transaction's notifications into one. Any writer gets this, plain SQL included.

A :class:`Listener` LISTENs on a connection of its own, in a thread, and calls ``on_notify`` for
each notification; the caller decides what a wake-up is (``relay dispatch --loop`` sets the
event its loop waits on, Celery beat sends a ``claim_and_dispatch``) and coalesces bursts. The
notification is only a hint, never the data: the claim decides what there is to do. When the
connection is lost (a restart, ``pg_terminate_backend``) the listener logs it and reconnects
with backoff, then calls ``on_notify`` once for whatever it missed meanwhile; the tick still
runs, so a lost notification costs at most one tick.

Writers notify only while the listener's :class:`relay.dispatch.gate.Gate` has turned the
trigger's flag on (migration 0011): while rows keep coming the gate looks for them itself, at
the poll floor, and calls ``on_notify`` when it finds some, so a busy relay costs writers no
NOTIFY (which PostgreSQL commits one transaction at a time).

Each session first checks that it can hear: it LISTENs, NOTIFYs :data:`CHANNEL` from a second
connection with a payload of its own and waits up to :data:`PROBE_SECONDS` for it. Through a
pooler in transaction mode (PgBouncer) the LISTEN lands on a server connection that goes back
to the pool, so nothing ever arrives (issue 28); the listener then says so once, loudly, ends,
and calls ``on_deaf`` so its caller polls adaptively instead. ``RELAY_LISTEN_URL`` (a direct or
session-mode URL) gives the listener a connection that hears.

With ``exclusive``, the listener then takes a session-level advisory lock on its connection:
of several exclusive listeners on one database (two beats by mistake, or a standby), one
listens and the others wait to take over when its session ends. The probe comes first, so a
lock is never taken on a pooled connection that would carry it to other clients.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import sqlalchemy as sa

from relay.config import timing
from relay.config.urls import redact
from relay.dispatch.gate import DEFAULT_FLOOR_SECONDS, DEFAULT_SETTLE_SECONDS, Gate
from relay.exceptions import ConfigError, StoreError
from relay.policy import Backoff, IdlePoll
from relay.store.dispatch import Store
from relay.store.engine import normalize_url

log = logging.getLogger(__name__)

#: The channel migration 0004's trigger notifies, with an empty payload.
CHANNEL = "relay_outbox"
#: Advisory lock key of the one exclusive listener per database ("relaylsn" in ASCII).
LOCK_KEY = 0x72656C61796C736E
#: How long one wait for notifications lasts before the listener checks whether to stop.
WAIT_SLICE_SECONDS = 0.5
#: Seconds to wait for PostgreSQL to accept a connection.
CONNECT_TIMEOUT_SECONDS = 5
#: TCP keepalives on the LISTEN connection, so a peer that vanished is noticed.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 3}
#: How long a session waits for its own probe notification before it calls itself deaf: a
#: direct server answers in milliseconds, so this only bounds the wait behind a pooler.
PROBE_SECONDS = 3.0
#: Payload prefix of the probe notifications (the trigger's own carry an empty payload).
PROBE_PREFIX = "relay-probe:"
#: Connection options of every connection here: no server-side prepared statements, which a
#: transaction pooler cannot keep (the heartbeat runs the same statement over and over).
CONNECT_OPTIONS: dict[str, Any] = {
    "autocommit": True,
    "connect_timeout": CONNECT_TIMEOUT_SECONDS,
    "prepare_threshold": None,
    **KEEPALIVES,
}


def supports(database_url: str) -> bool:
    """Whether ``database_url`` is a PostgreSQL database (the only one with LISTEN/NOTIFY)."""
    return sa.make_url(normalize_url(database_url)).get_backend_name() == "postgresql"


def conninfo(database_url: str, variable: str = "RELAY_DATABASE_URL") -> str:
    """The libpq URI of ``database_url`` (an SQLAlchemy URL), for psycopg directly; a URL that
    does not parse is a ConfigError naming ``variable``."""
    try:
        url = sa.make_url(normalize_url(database_url)).set(drivername="postgresql")
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise ConfigError(f"{variable}={redact(database_url)!r} does not parse: {exc}") from exc
    return url.render_as_string(hide_password=False)


class Listener:
    """LISTENs on :data:`CHANNEL` in a daemon thread and calls ``on_notify`` per notification
    (and once after each reconnect); ``on_notify`` must be quick and must not raise."""

    def __init__(
        self,
        database_url: str,
        on_notify: Callable[[], None],
        *,
        exclusive: bool = False,
        heartbeat_seconds: float = timing.LISTEN_HEARTBEAT_SECONDS,
        on_deaf: Callable[[], None] | None = None,
        probe_seconds: float = PROBE_SECONDS,
        variable: str = "RELAY_DATABASE_URL",
        gate: Gate | None = None,
    ) -> None:
        self._conninfo = conninfo(database_url, variable)
        self.on_notify = on_notify
        self.on_deaf = on_deaf
        #: Decides when writers notify, and looks for rows while they do not.
        self.gate = gate or Gate(
            Store.from_url(database_url), DEFAULT_FLOOR_SECONDS, DEFAULT_SETTLE_SECONDS
        )
        self.exclusive = exclusive
        self.heartbeat_seconds = heartbeat_seconds
        self.probe_seconds = probe_seconds
        #: Set while the listener's session is LISTENing and heard its own probe.
        self.listening = threading.Event()
        #: Set when a session did not hear its own probe: the listener ended, callers poll.
        self.deaf = threading.Event()
        #: Sessions that reached LISTEN so far (more than one: it reconnected).
        self.sessions = 0
        self._where = redact(database_url)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Listener:
        self._thread = threading.Thread(target=self.run, name="relay-listen", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = WAIT_SLICE_SECONDS * 4) -> None:
        """Ask the thread to end and wait for it (it ends within one wait slice)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.sessions:  # a stand-by that never listened leaves the flag to the leader
            self.gate.close()

    def run(self) -> None:
        """Listen, reconnecting with backoff, until :meth:`stop`."""
        backoff = Backoff(timing.LISTEN_RETRY_FIRST_SECONDS, timing.LISTEN_RETRY_MAX_SECONDS)
        lost_at: float | None = None
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, **CONNECT_OPTIONS) as conn:
                    if not self._hears(conn):
                        self._go_deaf()
                        return
                    if self.exclusive:
                        conn.execute(f"UNLISTEN {CHANNEL}")
                        if not self._lead(conn):
                            return
                        conn.execute(f"LISTEN {CHANNEL}")
                    self.sessions += 1
                    self.gate.reset()
                    self.listening.set()
                    if lost_at is None:
                        log.info("listening on %s for new outbox rows (%s)", CHANNEL, self._where)
                    else:
                        log.warning(
                            "listening on %s again after %.1fs; claiming once for rows "
                            "committed meanwhile",
                            CHANNEL,
                            time.monotonic() - lost_at,
                        )
                        self.on_notify()
                    lost_at = None
                    backoff.reset()
                    self._serve(conn)
            except Exception as exc:  # whatever broke the session: listen again, never die
                self.listening.clear()
                lost_at = time.monotonic() if lost_at is None else lost_at
                delay = backoff.next()
                log.warning(
                    "relay listener lost its connection (%s), reconnecting in %.1fs: %s",
                    self._where,
                    delay,
                    redact(str(exc).strip()),
                )
                self._stop.wait(delay)
        self.listening.clear()

    def hears(self) -> bool:
        """One session on its own: whether it hears its own probe (``relay doctor``)."""
        with psycopg.connect(self._conninfo, **CONNECT_OPTIONS) as conn:
            return self._hears(conn)

    def _hears(self, conn: psycopg.Connection[Any]) -> bool:
        """LISTEN on ``conn`` and check that a notification from another session reaches it
        (other notifications meanwhile are passed on)."""
        conn.execute(f"LISTEN {CHANNEL}")
        token = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        with psycopg.connect(self._conninfo, **CONNECT_OPTIONS) as other:
            other.execute("SELECT pg_notify(%s, %s)", (CHANNEL, token))
        deadline = time.monotonic() + self.probe_seconds
        while (left := deadline - time.monotonic()) > 0 and not self._stop.is_set():
            for note in conn.notifies(timeout=min(left, WAIT_SLICE_SECONDS)):
                if note.payload == token:
                    return True
                if not note.payload.startswith(PROBE_PREFIX):
                    self.on_notify()
        return self._stop.is_set()

    def _go_deaf(self) -> None:
        """Say once, loudly, that notifications do not arrive, and hand over to the caller."""
        self.listening.clear()
        self.deaf.set()
        log.error(
            "relay listener on %s never heard its own notification within %gs: the URL goes "
            "through a pooler in transaction mode (PgBouncer), where LISTEN cannot work. Set "
            "RELAY_LISTEN_URL to a direct or session-mode URL of the same database for "
            "wake-ups in milliseconds, or RELAY_NOTIFY=0; polling adaptively instead",
            self._where,
            self.probe_seconds,
        )
        if self.on_deaf is not None:
            self.on_deaf()

    def _lead(self, conn: psycopg.Connection[Any]) -> bool:
        """Exclusive: wait until this session holds the listener lock (False: stopped)."""
        announced = False
        while True:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
            if row is not None and row[0]:
                return True
            if not announced:
                log.info("another relay listener holds the lock; standing by to take over")
                announced = True
            if self._stop.wait(self.heartbeat_seconds):
                return False

    def _serve(self, conn: psycopg.Connection[Any]) -> None:
        """Pass notifications on until stopped; a quiet connection is pinged now and then, so a
        dead one raises here instead of waiting forever."""
        quiet_since = time.monotonic()
        while not self._stop.is_set():
            notified = False
            for _ in conn.notifies(timeout=self.gate.timeout(WAIT_SLICE_SECONDS)):
                self.on_notify()
                if not notified:  # after the wake-up: the relay need not wait for the flag
                    self.gate.notified()
                notified = True
                quiet_since = time.monotonic()
                if self._stop.is_set():
                    return
            if not notified and self.gate.look():
                self.on_notify()
            if time.monotonic() - quiet_since >= self.heartbeat_seconds:
                conn.execute("SELECT 1")
                quiet_since = time.monotonic()


class Poller:
    """Where there is no NOTIFY (MySQL, MariaDB, SQLite, or ``RELAY_NOTIFY=0``): looks for
    claimable rows in a daemon thread and calls ``on_found`` when there are some.

    It looks ``floor`` seconds after finding rows, doubling the wait after each look that found
    none, up to ``ceiling`` (the tick): idle, it costs one bounded count of the claim index per
    ceiling. A look that fails for a passing reason (the database unreachable) is logged and
    retried at the next one; one that retrying cannot mend (the outbox table missing, a
    permission revoked) stops the poller with an ERROR log and is kept in :attr:`error`,
    instead of the same warning every ceiling for ever.
    """

    def __init__(
        self, store: Store, on_found: Callable[[], None], floor: float, ceiling: float
    ) -> None:
        self.store, self.on_found = store, on_found
        # The floor for about one ceiling after rows were seen: workers draining them make
        # the looks meanwhile come back empty, which says nothing about new rows.
        self.poll = IdlePoll(floor, ceiling, hold=math.ceil(ceiling / floor))
        #: Looks so far, and how many found rows.
        self.looks = self.found = 0
        #: The non-retryable error that stopped the poller, if one did.
        self.error: StoreError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Poller:
        self._thread = threading.Thread(target=self.run, name="relay-poll", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        while not self._stop.wait(self.poll.next()):
            self.looks += 1
            try:
                # New rows only: expired leases are the claims' (and the tick's) to find.
                rows = self.store.backlog(1, expired=False)
            except StoreError as exc:
                if not exc.retryable:
                    self.error = exc
                    log.error("relay poller stopped: looking for new rows cannot succeed: %s", exc)
                    return
                log.warning("relay poller could not look for new rows: %s", exc)
                continue
            if rows:
                self.found += 1
                self.on_found()
                self.poll.reset()


def poll_instead(
    database_url: str, on_found: Callable[[], None], floor: float, ceiling: float
) -> Callable[[], None]:
    """An ``on_deaf`` for :class:`Listener`: start a :class:`Poller` looking every ``floor``
    seconds up to ``ceiling`` (``Settings.idle_poll_seconds``), the latency polling keeps where
    nothing notifies."""

    def start() -> None:
        Poller(Store.from_url(database_url), on_found, floor, ceiling).start()
        log.warning("relay poller started instead: every %gs to %gs", floor, ceiling)

    return start


__all__ = [
    "CHANNEL",
    "LOCK_KEY",
    "Listener",
    "Poller",
    "conninfo",
    "poll_instead",
    "supports",
]
