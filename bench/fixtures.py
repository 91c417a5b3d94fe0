"""Throw-away benchmark databases and exchanges: created for a run, removed after it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kombu
import redis
import sqlalchemy as sa

from bench import services
from relay import migrate


def _admin() -> sa.Engine:
    # pre-ping: a pooled admin connection may have been terminated while the benchmark ran.
    return sa.create_engine(services.PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)


def url_for(database: str) -> str:
    """The URL of ``database`` on the benchmark's PostgreSQL server."""
    return sa.make_url(services.PG_ADMIN_URL).set(database=database).render_as_string(False)


@contextlib.contextmanager
def database(label: str) -> Iterator[str]:
    """A fresh database ``relay_bench_<label>_<nonce>`` migrated to head; dropped at exit."""
    name = f"relay_bench_{label}_{uuid.uuid4().hex[:8]}"
    admin = _admin()
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = url_for(name)
        migrate.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@dataclass
class Route:
    """A durable topic exchange with one durable queue bound to it with ``#``."""

    url: str
    exchange_name: str
    queue_name: str

    def _objects(self, channel: Any) -> tuple[kombu.Exchange, kombu.Queue]:
        exchange = kombu.Exchange(self.exchange_name, type="topic", durable=True)
        queue = kombu.Queue(self.queue_name, exchange, routing_key="#", durable=True)
        return exchange(channel), queue(channel)

    def declare(self) -> None:
        with kombu.Connection(self.url) as conn:
            exchange, queue = self._objects(conn.default_channel)
            exchange.declare()
            queue.declare()

    def purge(self) -> int:
        """Empty the queue; returns how many messages it held."""
        with kombu.Connection(self.url) as conn:
            _, queue = self._objects(conn.default_channel)
            return int(queue.purge() or 0)

    @property
    def is_redis(self) -> bool:
        return self.url.startswith(("redis://", "rediss://"))

    def depth(self) -> int:
        """Messages waiting in the queue."""
        with kombu.Connection(self.url) as conn:
            channel: Any = conn.default_channel
            if self.is_redis:  # a virtual queue "exists" only while it holds messages
                return int(channel._size(self.queue_name))
            _, queue = self._objects(channel)
            declared: Any = queue.queue_declare(passive=True)
            return int(declared.message_count)

    def delete(self) -> None:
        with kombu.Connection(self.url) as conn:
            exchange, queue = self._objects(conn.default_channel)
            with contextlib.suppress(Exception):
                queue.delete()
            with contextlib.suppress(Exception):
                exchange.delete()
        if self.is_redis:  # Kombu leaves the exchange's binding sets behind
            client = redis.Redis.from_url(self.url)
            try:
                client.delete(
                    f"_kombu.binding.{self.exchange_name}",
                    f"_kombu.binding_permanent.{self.exchange_name}",
                    self.queue_name,
                )
            finally:
                client.close()


@contextlib.contextmanager
def route(url: str, label: str) -> Iterator[Route]:
    """A unique exchange ``bench.<label>.<nonce>`` and its bound queue; deleted at exit."""
    name = f"bench.{label}.{uuid.uuid4().hex[:8]}"
    r = Route(url, name, f"{name}.q")
    r.declare()
    try:
        yield r
    finally:
        r.delete()
