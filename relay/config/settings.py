"""The relay's :class:`Settings`: one frozen dataclass, its derived defaults and its checks."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

from relay.config import checks, retention_rules, timing
from relay.config.env import DEFAULT_MAX_PAYLOAD_BYTES, PARSERS, parse
from relay.config.rate_limits import RateLimit
from relay.config.rate_limits import parse as parse_rate_limits
from relay.config.urls import redact

#: The embedded default, for trying the relay on one host: a SQLite file in the working
#: directory (WAL, writers queue for the lock), shared by every process started there.
DEFAULT_DATABASE_URL = "sqlite:///relay.sqlite3"
#: Kombu's filesystem transport in ``./relay-broker`` (``relay.publishers.transports``): needs no
#: server and carries both the relay's Celery tasks and the events between processes of one host,
#: since it keeps queues and exchange bindings in folders. No confirms, no replication: for trying
#: the relay and for tests, not for production.
DEFAULT_BROKER_URL = "filesystem://"
#: Unless set, the confirm timeout is this share of the lease (at most its default), and a lease
#: left unset beside a set confirm timeout grows to keep that share: a batch that waits for its
#: confirms still has most of its lease left to record the outcome.
CONFIRM_SHARE_OF_LEASE = 1 / 3
#: Where nothing wakes the relay for new rows (MySQL, MariaDB, SQLite, or PostgreSQL with
#: ``RELAY_NOTIFY`` off), the tick is how soon an idle relay looks again, so its default is
#: shorter there: a load that starts after a quiet spell waits at most this long for its first
#: claim (issue 16: p99 under 300 ms on MariaDB at 200 ev/s), for about one claim per process
#: every 0.4 s when idle.
POLLED_TICK_SECONDS = 0.4
#: The longest wait between two looks of a process that polls for rows itself (``relay dispatch
#: --loop`` where nothing wakes it, a watcher that cannot read the sequence, beat's poller):
#: one cheap statement, where the tick is a Celery message, so it looks more often. A
#: single commit after a quiet spell waits at most this long (plus one claim and publish) for
#: its first claim: under the 300 ms p99 of issues 16 and 28 by construction, for about five
#: bounded statements a second per idle process.
POLLED_IDLE_SECONDS = 0.2


@dataclass(frozen=True, slots=True, repr=False)
class Settings:
    """Everything the relay needs to run; build with :meth:`from_env` or directly.

    Settings that depend on each other (lease and confirm timeout, backoff base and cap, queue
    and exchange) take their defaults from what was set: only two values that were both set and
    contradict each other are refused. A field counts as set when it is named in ``explicit``
    (``from_env`` names every variable it read) or differs from its default.
    """

    database_url: str = DEFAULT_DATABASE_URL
    broker_url: str = DEFAULT_BROKER_URL
    #: None means "same as broker_url".
    events_url: str | None = None
    exchange: str = "outbox"
    #: NATS JetStream (``RELAY_EVENTS_URL=nats://...``): the stream the events go to, on
    #: subjects ``<RELAY_EXCHANGE>.<event_type>``; created if missing, with a duplicate window
    #: that covers a republish (docs/brokers.md).
    nats_stream: str = "OUTBOX"
    batch_size: int = 100
    #: A drain's claims double from ``batch_size`` up to this while they come back full (a
    #: backlog), and start again from ``batch_size`` after a short one. Unless set: 1000 at the
    #: default batch size, and the batch size itself when that was set (a chosen size is kept).
    batch_max: int = 1000
    #: Most bytes of payload and headers one claim leases (``Dialect.claim``; at least one row).
    batch_max_bytes: int = 16 * 1_048_576
    lease_seconds: float = 30.0
    max_attempts: int = 10
    backoff_base_seconds: float = 1.0
    backoff_max_seconds: float = 300.0
    tick_seconds: float = 1.0
    confirm_timeout_seconds: float = 10.0
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    #: Default deadline per event type, ``PATTERN=DURATION,...`` (``orders.reminder=1h,*=7d``;
    #: the most specific pattern wins; ``never``: none): an event enqueued without
    #: ``expires_at``/``expires_in`` expires that long after it is due, and a row past its
    #: deadline is dead-lettered unpublished (``relay.config.expiry``). Read by the producer.
    expire_after: str | None = None
    #: Celery queue of the relay's own tasks (claim_and_dispatch, tick, purge_sent).
    queue: str = "relay"
    #: Most claim_and_dispatch tasks one tick sends: about the fleet's worker process count.
    max_fanout: int = 8
    #: Sent rows older than this are deleted by the periodic purge; 0 means delete on send.
    retention_seconds: float = retention_rules.DEFAULT_SECONDS
    #: How often the purge runs (beat's relay.purge_sent, ``relay dispatch --loop``'s purger).
    purge_interval_seconds: float = 3600.0
    #: The statement that records a row as sent deletes it: ``RELAY_RETENTION_SECONDS=0``.
    delete_on_send: bool = False
    #: PostgreSQL: the commit-time wake-up. The relay watches the sequence that numbers
    #: ``outbox.id`` every ``poll_floor_seconds`` and claims as soon as it moves; writers run
    #: nothing for it (no trigger, no NOTIFY) and it works through a transaction pooler.
    #: Off: the relay polls adaptively, as on the other databases.
    notify: bool = True
    #: PostgreSQL: another URL of the outbox database for the wake-up's watcher (by default
    #: ``database_url``). No longer needed behind a pooler: the watcher needs no session.
    #: Logged with its password redacted, as ``database_url`` is.
    listen_url: str | None = None
    #: How often the PostgreSQL wake-up looks at the outbox id sequence while it moves (and for
    #: a second after, then backing off to ``watch_idle_seconds``); the shortest wait of
    #: adaptive polling after a claim found nothing (doubling up to the tick); the shortest gap
    #: between two wake-ups the Celery fleet's beat sends.
    poll_floor_seconds: float = 0.025
    #: PostgreSQL: the longest wait between two looks of the wake-up at the outbox id sequence
    #: (over several databases, at a server's written-rows figures) while nothing moves; it
    #: looks ``poll_floor_seconds`` after a move, doubling to this. A
    #: commit after a quiet spell waits at most about this long for the look that finds it; an
    #: idle watcher costs ``1 / this`` statements (and database transactions) a second, less
    #: the one the tick's claim takes instead.
    watch_idle_seconds: float = 0.25
    #: Port of the Prometheus endpoint of ``relay dispatch --loop`` and of relay Celery workers
    #: (``relay.observe.metrics``); None: no endpoint, no metrics kept.
    metrics_port: int | None = None
    #: Event types a process's metrics keep apart, first come; the rest: ``event_type="other"``.
    metrics_max_event_types: int = 100
    #: The web console's operator token (``relay console``): may view and act. Secret.
    console_token: str | None = field(default=None, metadata={"secret": True})
    #: The web console's view-only token: may view, never act. Secret.
    console_readonly_token: str | None = field(default=None, metadata={"secret": True})
    #: Keys that sign every event (``kid=secret,...``, secrets of 32+ characters): the first
    #: signs, every one verifies (``relay.consume``), so a key is rotated by listing the new one
    #: first. Secret. None: events are not signed.
    signing_keys: str | None = field(default=None, metadata={"secret": True})
    #: Payload and header fields the console masks everywhere, comma-separated
    #: (``password,card_number``; any case, at any depth).
    console_redact: str | None = None
    #: The CloudEvents ``source`` of this outbox's messages, a URI-reference (``/shop/orders``,
    #: ``urn:example:shop``); None: derived from the database URL without its credentials
    #: (``relay.store.schema.eventids.default_source``). Descriptive: the event id is unique alone.
    source: str | None = None
    #: Several outbox databases, ``name=URL,...``, or ``@PATH``: a file with one ``name=URL`` a
    #: line, read again on SIGHUP by ``relay dispatch --loop`` and when it changes by a Celery
    #: fleet's workers (``relay.config.databases``); None: one.
    databases: str | None = None
    #: Several databases: most connections ``relay dispatch`` holds in all (wake-ups included).
    #: 20 leaves 80 of a default PostgreSQL's 100 to its applications, and gives a trickle in
    #: 100 busy databases sub-second delivery where 10 did not (docs/many-databases.md).
    max_connections: int = 20
    #: Several databases: most of those to one server (host:port); None: ``max_connections``.
    max_server_connections: int | None = None
    #: Fleet-wide caps per event type, ``TYPE_PATTERN=N/s,...`` (``orders.*=50/s``, the glob of
    #: ``relay failed list --event-type``): every relay of a database shares one token bucket
    #: per limit (a row of ``relay_rate_buckets`` refilled by the database clock, holding at
    #: most one second's worth); rows beyond the rate wait ``pending``, in order, spending no
    #: attempt. None: no limit.
    rate_limits: str | None = None
    #: The fields the user set, so a value equal to its default still counts as a choice.
    explicit: frozenset[str] = field(
        default=frozenset(), repr=False, compare=False, metadata={"env": False}
    )

    def __post_init__(self) -> None:
        self._derive_defaults()
        checks.validate(self)

    def _is_set(self, name: str) -> bool:
        return name in self.explicit or getattr(self, name) != _DEFAULTS[name]

    def _derive(self, name: str, value: object) -> None:
        if not self._is_set(name):
            object.__setattr__(self, name, value)  # frozen: this is still construction

    def _derive_defaults(self) -> None:
        """Give each unset field a default that agrees with the fields that were set."""
        lease, confirm = "lease_seconds", "confirm_timeout_seconds"
        if self._is_set(lease):
            self._derive(
                confirm, min(_DEFAULTS[confirm], self.lease_seconds * CONFIRM_SHARE_OF_LEASE)
            )
        elif self._is_set(confirm):
            self._derive(
                lease, max(_DEFAULTS[lease], self.confirm_timeout_seconds / CONFIRM_SHARE_OF_LEASE)
            )
        size, most = "batch_size", "batch_max"
        if self._is_set(size):
            self._derive(most, self.batch_size)
        elif self._is_set(most):
            self._derive(size, max(1, min(_DEFAULTS[size], self.batch_max)))
        base, cap = "backoff_base_seconds", "backoff_max_seconds"
        if self._is_set(base):
            self._derive(cap, max(_DEFAULTS[cap], self.backoff_base_seconds))
        elif self._is_set(cap):
            self._derive(base, min(_DEFAULTS[base], self.backoff_max_seconds))
        if self.retention_seconds == 0:
            self._derive("delete_on_send", True)
        floor, tick, watch = "poll_floor_seconds", "tick_seconds", "watch_idle_seconds"
        watch_set = self._is_set(watch)
        if watch_set and self.watch_idle_seconds > 0:  # (else refused, naming it)
            self._derive(floor, min(_DEFAULTS[floor], self.watch_idle_seconds))
        if self._is_set(tick):
            self._derive(floor, min(_DEFAULTS[floor], self.tick_seconds))
        else:
            default_tick = _DEFAULTS[tick] if self.notified else POLLED_TICK_SECONDS
            above = max(self.poll_floor_seconds, self.watch_idle_seconds if watch_set else 0)
            self._derive(tick, max(default_tick, above))
        if not watch_set:
            capped = min(_DEFAULTS[watch], self.tick_seconds)
            self._derive(watch, max(self.poll_floor_seconds, capped))
        # Names that would collide with a default take a suffix instead of refusing to start.
        if self._is_set("exchange"):
            self._derive(
                "queue", f"{self.exchange}-tasks" if self.exchange == self.queue else self.queue
            )
        elif self._is_set("queue"):
            self._derive(
                "exchange", f"{self.queue}-events" if self.queue == self.exchange else self.exchange
            )

    @property
    def idle_poll_seconds(self) -> float:
        """The longest wait of a relay process that polls for rows itself: the tick where
        nothing notifies and ``RELAY_TICK_SECONDS`` was set; otherwise at most
        :data:`POLLED_IDLE_SECONDS` (also for a watcher that cannot read the sequence, whatever
        tick its wake-ups would have allowed), never below the poll floor."""
        derived = max(POLLED_TICK_SECONDS, self.poll_floor_seconds)
        chosen = "tick_seconds" in self.explicit or self.tick_seconds != derived
        if chosen and not self.notified:
            return self.tick_seconds
        return max(self.poll_floor_seconds, min(self.tick_seconds, POLLED_IDLE_SECONDS))

    @property
    def notified(self) -> bool:
        """Whether new rows wake the relay: PostgreSQL with ``RELAY_NOTIFY`` on (the watcher)."""
        scheme = self.database_url.split(":", 1)[0].split("+", 1)[0].lower()
        return self.notify and scheme in ("postgresql", "postgres")

    @property
    def listen_variable(self) -> str:
        """The variable :attr:`listen_connection_url` comes from, for messages."""
        return "RELAY_LISTEN_URL" if self.listen_url else "RELAY_DATABASE_URL"

    @property
    def listen_connection_url(self) -> str:
        """Where the wake-up watches: ``RELAY_LISTEN_URL``, else the outbox database's URL."""
        return self.listen_url or self.database_url

    @property
    def console_redact_fields(self) -> frozenset[str]:
        """The field names ``RELAY_CONSOLE_REDACT`` masks, lower-cased."""
        if not self.console_redact:
            return frozenset()
        return frozenset(n.strip().lower() for n in self.console_redact.split(","))

    @property
    def rate_limit_rules(self) -> tuple[RateLimit, ...]:
        """``RELAY_RATE_LIMITS`` parsed (checked when the settings were built)."""
        return parse_rate_limits(self.rate_limits)

    @property
    def events_connection_url(self) -> str:
        """The Kombu URL events are published to."""
        return self.events_url or self.broker_url

    @property
    def events_on_nats(self) -> bool:
        """Whether events go to NATS JetStream (``nats://``, ``tls://``), not through Kombu."""
        return self.events_connection_url.partition("://")[0].lower() in ("nats", "tls")

    @property
    def drain_budget_seconds(self) -> float:
        """How long one ``claim_and_dispatch`` may keep draining: well inside one lease."""
        return self.lease_seconds * timing.DRAIN_SHARE_OF_LEASE

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, only: Collection[str] | None = None
    ) -> Settings:
        """Read the ``RELAY_*`` variables; unset or empty ones keep their defaults.

        ``only`` names the fields a command uses (e.g. ``DATABASE_ONLY``): the other variables
        are not read, so a bad value of a setting the command never uses cannot stop it.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in env_fields():
            if only is not None and f.name not in only:
                continue
            var = env_name(f)
            raw = env.get(var, "").strip()
            if not raw:
                continue
            kind = f.type if isinstance(f.type, str) else f.type.__name__
            values[f.name] = parse(var, raw, PARSERS[kind])
        return cls(**values, explicit=frozenset(values))

    def __repr__(self) -> str:
        """The fields set, redacted as :meth:`describe` does: a repr in a traceback or a log
        line carries no password or token."""
        shown = ", ".join(f"{k}={v!r}" for k, v in self.describe().items() if self._is_set(k))
        return f"Settings({shown})"

    def describe(self) -> dict[str, Any]:
        """The settings as a dict with every secret in URLs redacted: safe to log."""
        out: dict[str, Any] = {}
        for f in env_fields():
            value = getattr(self, f.name)
            if f.metadata.get("secret") and value is not None:
                value = "***"
            out[f.name] = redact(value) if isinstance(value, str) else value
        return out


#: What ``relay migrate|status|failed|pending|purge-sent`` read: the database and nothing else.
DATABASE_ONLY = frozenset({"database_url", "databases"})
#: What ``relay replay`` reads: the outbox, the events broker, what names the messages and
#: the keys that sign them.
REPLAY_ONLY = DATABASE_ONLY | {
    "broker_url",
    "events_url",
    "exchange",
    "nats_stream",
    "source",
    "signing_keys",
    "delete_on_send",
    "retention_seconds",
    "confirm_timeout_seconds",
}
#: What ``relay console`` reads: the database, its credentials, the fields it masks, and what
#: its replays read.
CONSOLE_ONLY = REPLAY_ONLY | {"console_token", "console_readonly_token", "console_redact"}


def env_fields() -> tuple[Field[Any], ...]:
    """The fields that come from a ``RELAY_*`` variable (all but bookkeeping)."""
    return tuple(f for f in fields(Settings) if f.metadata.get("env", True))


def env_name(f: Field[Any]) -> str:
    """``lease_seconds`` -> ``RELAY_LEASE_SECONDS``."""
    return "RELAY_" + f.name.upper()


_DEFAULTS: dict[str, Any] = {f.name: f.default for f in env_fields()}
