"""The chaos soak's throw-away servers and the faults of production they allow (issue 38): a
PostgreSQL primary and its synchronous streaming standby behind the soak's proxies acting as the
"writer endpoint", failed over and back again; and a RabbitMQ node of the soak's own, whose
memory alarm blocks the relays' publishers. The shared servers are never stopped or reconfigured.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import sqlalchemy as sa

from relay.store.engine import create_engine
from relay.store.schema import upgrade
from relay.store.schema.tables import outbox
from tests.support.proxy import TcpProxy
from tests.support.rabbitserver import RabbitNode, installed_sbin
from tools.pgserver import REPLICATED, PgServer, find_bindir, replicated_pair

#: How a failover reaches the relays: "stale", the old primary back as a read-only standby and
#: the endpoint still pointing at it (a DNS TTL) for the hold; "silent", the primary's host gone
#: without a word (the relays' connections frozen, new ones held unanswered) for the hold.
FAILOVER_VARIANTS = ("stale", "silent")
#: Bounds on delivery resuming after the endpoint answers from the new primary, and after an
#: alarm clears (issue 38's; beyond one the soak stops waiting and records None: a failure).
FAILOVER_RESUME_SECONDS = 30.0
ALARM_RESUME_SECONDS = 15.0
#: How long a restarted old primary gets to stream from the new one before it is rebuilt.
FOLLOW_SECONDS = 10.0


def failover_possible() -> bool:
    """Whether this machine has PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup)."""
    return find_bindir() is not None


def alarm_possible() -> bool:
    """Whether this machine can start a RabbitMQ node of its own."""
    return installed_sbin() is not None


def _wait(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {seconds:.0f} s")
        time.sleep(0.2)  # polling a server's state, with a bound


def _sql(pg: PgServer, *statements: str) -> list[object]:
    """Run ``statements`` on ``pg`` as the superuser, in autocommit; each first column."""
    engine = sa.create_engine(
        pg.admin_url,
        isolation_level="AUTOCOMMIT",
        poolclass=sa.pool.NullPool,
        connect_args={"connect_timeout": 5},
    )
    try:
        with engine.connect() as conn:
            results = [conn.execute(sa.text(s)) for s in statements]
            return [r.scalar() if r.returns_rows else None for r in results]
    finally:
        engine.dispose()


def sent_count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        query = sa.select(sa.func.count()).where(outbox.c.status == "sent")
        return int(conn.execute(query).scalar_one())


def resumed_within(count: Callable[[], int], before: int, bound: float) -> float | None:
    """Seconds until ``count()`` exceeds ``before`` (None: not within ``bound``)."""
    start = time.monotonic()
    while time.monotonic() - start < bound:
        try:
            if count() > before:
                return time.monotonic() - start
        except sa.exc.SQLAlchemyError:
            pass  # the server is still coming back: look again
        time.sleep(0.1)  # polling the outbox, with a bound
    return None


@dataclass
class Pair:
    """The soak's database when it fails over: a primary and its synchronous standby, and the
    endpoints to the primary (the relays' fault proxy first, then the producer's own)."""

    primary: PgServer
    standby: PgServer
    endpoints: tuple[TcpProxy, TcpProxy]
    database: str = "relay"
    _engine: sa.Engine | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The current primary, straight (the soak's own look at the rows)."""
        return self.primary.url_for(self.database)

    def engine(self) -> sa.Engine:
        """An engine on the current primary, straight (a new one after each failover)."""
        if self._engine is None:
            self._engine = create_engine(self.url)
        return self._engine

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def fail_over(self, variant: str, hold: Callable[[], None]) -> dict[str, object]:
        """Stop the primary, promote the standby, ``hold()`` while the endpoints are wrong
        (``variant``), then point them at the new primary; time delivery's return; bring the
        old primary back as the new one's synchronous standby, so the next failover can go the
        other way. What happened, for the soak's record."""
        old, new = self.primary, self.standby
        relays, producer = self.endpoints
        out: dict[str, object] = {"variant": variant, "from_port": old.port, "to_port": new.port}
        if variant == "silent":
            relays.freeze()
            producer.cut()  # the producer is not under test: it hears of the outage at once
            old.stop("immediate")
        else:
            old.stop("fast")
        self.dispose()
        new.promote()
        # Asynchronous until a standby streams again: no commit waits for a missing one.
        _sql(new, "ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()")
        self.primary, self.standby = new, old
        if variant == "stale":
            try:
                self._restart_as_standby(old, new)
            except RuntimeError as exc:  # the endpoint then points at a closed port
                out["stale_server_error"] = str(exc)[:200]
        hold()
        before = sent_count(self.engine())
        for proxy in self.endpoints:
            proxy.switch(("127.0.0.1", new.port))
            proxy.restore()
        out["resumed_seconds"] = _rounded(
            resumed_within(lambda: sent_count(self.engine()), before, FAILOVER_RESUME_SECONDS)
        )
        began = time.monotonic()
        out["old_primary"] = self._rejoin(old, new)
        out["rejoin_seconds"] = round(time.monotonic() - began, 1)
        return out

    def _restart_as_standby(self, old: PgServer, new: PgServer) -> None:
        old.follow(new)
        old.start(REPLICATED)

    def _streaming(self, new: PgServer) -> bool:
        query = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
        return bool(_sql(new, query)[0])

    def _rejoin(self, old: PgServer, new: PgServer) -> str:
        """Make ``old`` the synchronous standby of ``new``: following the new timeline when it
        can ("followed"), else rebuilt from a base backup ("rebuilt")."""
        how = "followed"
        try:
            if not old.running():
                self._restart_as_standby(old, new)
            _wait(lambda: self._streaming(new), FOLLOW_SECONDS, "the old primary streaming")
        except (RuntimeError, TimeoutError):
            how = "rebuilt"
            self._rebuild(old, new)
        _sql(new, "ALTER SYSTEM SET synchronous_standby_names = '*'", "SELECT pg_reload_conf()")
        # Everything acknowledged while it was asynchronous is on the standby before the next
        # failover may come: its flush position passes the primary's position of now.
        (lsn,) = _sql(new, "SELECT pg_current_wal_lsn()")
        caught_up = (
            "SELECT count(*) FROM pg_stat_replication"
            f" WHERE sync_state = 'sync' AND flush_lsn >= '{lsn}'::pg_lsn"
        )
        _wait(lambda: bool(_sql(new, caught_up)[0]), 60, "the standby synchronous")
        return how

    def _rebuild(self, old: PgServer, new: PgServer) -> None:
        """Throw ``old``'s data away and make it a fresh standby of ``new``."""
        if old.running():
            old.stop("immediate")
        shutil.rmtree(old.data)
        old.base_backup(new)
        old.start(REPLICATED)
        _wait(lambda: self._streaming(new), 60, "the rebuilt standby streaming")


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


@contextmanager
def failover_pair() -> Iterator[tuple[PgServer, PgServer, str]]:
    """A started primary and synchronous standby with a migrated outbox database ``relay``:
    (primary, standby, the database's URL on the primary); removed on exit."""
    with replicated_pair() as (primary, standby):
        url = primary.create_database("relay")
        upgrade.upgrade(url)
        yield primary, standby, url


def alarm(node: RabbitNode, hold: Callable[[], None], sent: Callable[[], int]) -> dict[str, object]:
    """A memory alarm on ``node`` (its watermark near zero: it blocks every publishing
    connection) for ``hold()``, then cleared; how soon delivery resumed after the clear."""
    node.memory_alarm(True)
    try:
        hold()
        before = sent()
    finally:
        node.memory_alarm(False)
    return {"resumed_seconds": _rounded(resumed_within(sent, before, ALARM_RESUME_SECONDS))}
