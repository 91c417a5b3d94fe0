"""A PostgreSQL failover for the fault tests: a throw-away primary and its synchronous standby
behind one "writer endpoint" (a :class:`~tests.support.proxy.TcpProxy`, standing in for the
DNS name or virtual IP of managed PostgreSQL), and a producer that keeps committing through it
all to whichever server is primary, counting only the commits acknowledged to it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from tests.support.fleet import present_ids
from tests.support.pgserver import REPLICATED, PgServer, in_recovery
from tests.support.proxy import TcpProxy


@dataclass
class Cluster:
    """The pair, its outbox database ``relay`` and the endpoint (first to the primary)."""

    primary: PgServer
    standby: PgServer
    endpoint: TcpProxy
    database: str = "relay"

    @property
    def primary_url(self) -> str:
        return self.primary.url_for(self.database)

    @property
    def standby_url(self) -> str:
        return self.standby.url_for(self.database)

    @property
    def endpoint_url(self) -> str:
        """What the relays are given: the endpoint, wherever it points."""
        return self.endpoint.url_for(self.primary_url)

    def fail_over(self) -> None:
        """The standby promoted to primary (the endpoint is not moved)."""
        self.standby.promote()

    def old_primary_as_standby(self) -> None:
        """The stopped old primary started again as a read-only standby of the new one."""
        self.primary.follow(self.standby)
        self.primary.start(REPLICATED)
        assert in_recovery(self.primary_url), "the old primary came back writable"

    def endpoint_to_new_primary(self) -> None:
        """New connections to the endpoint reach the promoted standby."""
        self.endpoint.switch(("127.0.0.1", self.standby.port))


@dataclass
class FailoverProducer:
    """Commits ``per_tx`` events every ``per_tx / rate`` seconds from a thread to ``url`` (set
    it to the new primary's after a failover), straight to the server, never through the
    endpoint. A failed transaction is retried after a short pause; its events are "uncertain"
    (the commit may have landed before the server went away): :meth:`committed` counts those
    the database holds."""

    url: str
    rate: float = 100.0
    per_tx: int = 10
    acknowledged: list[int] = field(default_factory=list)
    uncertain: list[int] = field(default_factory=list)
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> FailoverProducer:
        self._thread = threading.Thread(target=self._run, name="failover-producer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            assert not self._thread.is_alive(), "the producer did not stop"

    def committed(self, engine: sa.Engine) -> list[int]:
        """Every event committed: acknowledged, or uncertain and present in the database."""
        return self.acknowledged + sorted(present_ids(engine, self.uncertain))

    def _run(self) -> None:
        pace = self.per_tx / self.rate
        url, engine = "", None
        next_at = time.monotonic()
        while not self._stop.is_set():
            if url != self.url or engine is None:
                if engine is not None:
                    engine.dispose()
                url = self.url
                engine = sa.create_engine(
                    url, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 2}
                )
            ids: list[int] = []
            try:
                with Session(engine) as session, session.begin():
                    for i in range(self.per_tx):
                        ids.append(relay.enqueue(session, "test.event", {"i": i}))
                self.acknowledged.extend(ids)
            except Exception:  # the server went away, or is read-only: the commit is uncertain
                self.uncertain.extend(ids)
                self.failures += 1
                engine.dispose()
                engine = None
                self._stop.wait(0.2)
                continue
            # Pacing, not synchronisation: ~rate events a second.
            next_at += pace
            self._stop.wait(max(0.0, next_at - time.monotonic()))
        if engine is not None:
            engine.dispose()
