"""The checks of :class:`relay.config.Settings`: each ``RELAY_*`` value in its range and
agreeing with the others, refused with an error that names the variable."""

from __future__ import annotations

from typing import Any

from relay.config import database_list, expiry, rate_limits, retention_rules, signing, tls
from relay.config.env import check
from relay.config.urls import redact

#: A console token shorter than this is refused: it must not be guessable.
MIN_TOKEN_LENGTH = 16


def validate(self: Any) -> None:
    """Refuse a value of ``self`` (a :class:`relay.config.Settings` being built) that is out of
    range or contradicts another: a ``ValueError`` naming the variable, what it was and what it
    must be (:func:`relay.config.env.check`). ``self`` is typed loosely so that this module
    imports nothing that imports it (settings.py calls it): every check here is exercised by
    tests/unit/test_config.py and the configuration page's generator."""
    check(self.batch_size >= 1, "RELAY_BATCH_SIZE", self.batch_size, "must be at least 1")
    check(self.batch_max >= 1, "RELAY_BATCH_MAX", self.batch_max, "must be at least 1")
    check(self.batch_size <= 10_000, "RELAY_BATCH_SIZE", self.batch_size, "must be <= 10000")
    check(self.batch_max <= 10_000, "RELAY_BATCH_MAX", self.batch_max, "must be <= 10000")
    check(
        self.batch_max >= self.batch_size,
        "RELAY_BATCH_MAX",
        self.batch_max,
        f"must be >= RELAY_BATCH_SIZE={self.batch_size!r} (claims grow from the batch size "
        "up to it)",
    )
    check(self.lease_seconds > 0, "RELAY_LEASE_SECONDS", self.lease_seconds, "must be > 0")
    check(self.max_attempts >= 1, "RELAY_MAX_ATTEMPTS", self.max_attempts, "must be >= 1")
    for var, value in (
        ("RELAY_BACKOFF_MAX_SECONDS", self.backoff_max_seconds),
        ("RELAY_BACKOFF_BASE_SECONDS", self.backoff_base_seconds),
        ("RELAY_BATCH_MAX_BYTES", self.batch_max_bytes),
        ("RELAY_TICK_SECONDS", self.tick_seconds),
        ("RELAY_POLL_FLOOR_SECONDS", self.poll_floor_seconds),
        ("RELAY_CONFIRM_TIMEOUT_SECONDS", self.confirm_timeout_seconds),
        ("RELAY_WATCH_IDLE_SECONDS", self.watch_idle_seconds),
    ):
        check(value > 0, var, value, "must be > 0")
    check(
        self.poll_floor_seconds <= self.watch_idle_seconds <= self.tick_seconds,
        "RELAY_WATCH_IDLE_SECONDS",
        self.watch_idle_seconds,
        f"must be between RELAY_POLL_FLOOR_SECONDS={self.poll_floor_seconds!r} and "
        f"RELAY_TICK_SECONDS={self.tick_seconds!r} (the wake-up's looks back off from the "
        "floor up to it)",
    )
    check(
        self.backoff_max_seconds >= self.backoff_base_seconds,
        "RELAY_BACKOFF_MAX_SECONDS",
        self.backoff_max_seconds,
        f"must be >= RELAY_BACKOFF_BASE_SECONDS={self.backoff_base_seconds!r}",
    )
    check(
        self.poll_floor_seconds <= self.tick_seconds,
        "RELAY_POLL_FLOOR_SECONDS",
        self.poll_floor_seconds,
        f"must be <= RELAY_TICK_SECONDS={self.tick_seconds!r} (polling backs off from the "
        "floor up to the tick)",
    )
    check(
        self.confirm_timeout_seconds < self.lease_seconds,
        "RELAY_CONFIRM_TIMEOUT_SECONDS",
        self.confirm_timeout_seconds,
        f"must be below RELAY_LEASE_SECONDS={self.lease_seconds!r} (a batch waiting that long "
        "for confirms would outlive its lease)",
    )
    check(
        self.max_payload_bytes >= 1,
        "RELAY_MAX_PAYLOAD_BYTES",
        self.max_payload_bytes,
        "must be >= 1",
    )
    if self.expire_after is not None:
        expiry.ExpireAfter.parse(self.expire_after)
    rate_limits.parse(self.rate_limits)  # refuses a bad item, naming it
    for var, name in (("RELAY_EXCHANGE", self.exchange), ("RELAY_QUEUE", self.queue)):
        check(bool(name.strip()), var, name, "must not be empty")
        # An AMQP shortstr: a longer name would fail every publish, looking like an outage.
        check(len(name.encode()) <= 255, var, name[:40] + "...", "must be at most 255 bytes")
    check(
        self.queue != self.exchange,
        "RELAY_QUEUE",
        self.queue,
        f"must differ from RELAY_EXCHANGE={self.exchange!r} (Celery declares a direct "
        "exchange named after its queue)",
    )
    check(
        bool(self.nats_stream) and not set(self.nats_stream) & set(" .*>/\\\t"),
        "RELAY_NATS_STREAM",
        self.nats_stream,
        "must be a JetStream stream name (no spaces, '.', '*', '>', '/' or '\\')",
    )
    check(1 <= self.max_fanout <= 1000, "RELAY_MAX_FANOUT", self.max_fanout, "must be 1..1000")
    retention_rules.validate(
        self.retention_seconds,
        "retention_seconds" in self.explicit
        or self.retention_seconds != retention_rules.DEFAULT_SECONDS,
        self.delete_on_send,
        self.purge_interval_seconds,
    )
    if self.metrics_port is not None:
        check(
            1 <= self.metrics_port <= 65535,
            "RELAY_METRICS_PORT",
            self.metrics_port,
            "must be a TCP port, 1..65535",
        )
    types = self.metrics_max_event_types
    check(0 <= types <= 100_000, "RELAY_METRICS_MAX_EVENT_TYPES", types, "must be 0..100000")
    if self.source is not None:
        check(
            self.source.isprintable() and " " not in self.source,
            "RELAY_SOURCE",
            self.source,
            "must be a URI-reference (printable, no spaces)",
        )
    _validate_console(self)
    if self.signing_keys is not None:
        try:
            signing.parse_keys(self.signing_keys)
        except ValueError as exc:
            check(
                False,
                "RELAY_SIGNING_KEYS",
                "...",  # secrets: never echoed
                f"is not kid=secret,... with secrets of 32+ characters{': ' + str(exc)}",
            )
    database_list.check(self.databases, self.database_url, self._is_set("database_url"))
    database_list.connection_budget(self.max_connections, self.max_server_connections)
    for name, url in (
        ("RELAY_DATABASE_URL", self.database_url),
        ("RELAY_BROKER_URL", self.broker_url),
        ("RELAY_EVENTS_URL", self.events_url),
    ):
        if url is not None:
            check("://" in url, name, redact(url), "is not a URL (expected scheme://...)")
    for name, url in (("RELAY_BROKER_URL", self.broker_url), ("RELAY_EVENTS_URL", self.events_url)):
        for node in tls.nodes(url) if url else ():
            try:
                tls.parse(node)
            except tls.TlsOptionError as exc:
                check(
                    False,
                    name,
                    redact(node),
                    f"has an unknown or unreadable TLS option (docs/security.md){': ' + str(exc)}",
                )


def _validate_console(self: Any) -> None:
    for var, token in (
        ("RELAY_CONSOLE_TOKEN", self.console_token),
        ("RELAY_CONSOLE_READONLY_TOKEN", self.console_readonly_token),
    ):
        if token is None:
            continue
        shown = token[:2] + "..."  # a secret: never echoed whole
        check(len(token) >= MIN_TOKEN_LENGTH, var, shown, "must be at least 16 characters")
        check(
            token.isascii() and token.isprintable() and " " not in token,
            var,
            shown,
            "must be printable ASCII without spaces (it travels in an HTTP header)",
        )
    if self.console_token is not None:
        check(
            self.console_token != self.console_readonly_token,
            "RELAY_CONSOLE_READONLY_TOKEN",
            "...",
            "must differ from RELAY_CONSOLE_TOKEN",
        )
    if self.listen_url is not None:
        check(
            self.listen_url.split(":", 1)[0].split("+", 1)[0].lower() in ("postgresql", "postgres"),
            "RELAY_LISTEN_URL",
            redact(self.listen_url),
            "must be a PostgreSQL URL (only PostgreSQL's outbox is watched)",
        )
    if self.console_redact is not None:
        check(
            all(name.strip() for name in self.console_redact.split(",")),
            "RELAY_CONSOLE_REDACT",
            self.console_redact,
            "has an empty field name (expected names separated by commas)",
        )
