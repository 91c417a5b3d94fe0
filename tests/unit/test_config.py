"""Settings.from_env: every RELAY_* variable validated, refused with its name, secrets redacted."""

from __future__ import annotations

import pytest

from relay.config import Settings
from relay.config.settings import DATABASE_ONLY, env_fields, env_name
from relay.exceptions import ConfigError

SECRET = "hunter2-s3cr3t"

#: (variable, bad value, what the message must say). Every Settings field has at least one.
BAD_VALUES = [
    ("RELAY_DATABASE_URL", "relay.sqlite3", "is not a URL"),
    ("RELAY_BROKER_URL", "localhost:5672", "is not a URL"),
    ("RELAY_EVENTS_URL", "guest@localhost", "is not a URL"),
    ("RELAY_EXCHANGE", "x" * 256, "255 bytes"),
    ("RELAY_NATS_STREAM", "OUT.BOX", "JetStream stream name"),
    ("RELAY_NATS_STREAM", "out box", "JetStream stream name"),
    ("RELAY_BATCH_SIZE", "abc", "is not an integer"),
    ("RELAY_BATCH_SIZE", "1.5", "is not an integer"),
    ("RELAY_BATCH_SIZE", "0", "at least 1"),
    ("RELAY_BATCH_SIZE", "100000", "<= 10000"),
    ("RELAY_BATCH_MAX", "0", "at least 1"),
    ("RELAY_BATCH_MAX", "20000", "<= 10000"),
    ("RELAY_BATCH_MAX_BYTES", "0", "> 0"),
    ("RELAY_BATCH_MAX_BYTES", "16MiB", "is not an integer"),
    ("RELAY_LEASE_SECONDS", "-1", "> 0"),
    ("RELAY_LEASE_SECONDS", "nan", "finite"),
    ("RELAY_LEASE_SECONDS", "inf", "finite"),
    ("RELAY_LEASE_SECONDS", "30s", "finite"),
    ("RELAY_MAX_ATTEMPTS", "0", ">= 1"),
    ("RELAY_MAX_ATTEMPTS", "ten", "is not an integer"),
    ("RELAY_BACKOFF_BASE_SECONDS", "0", "> 0"),
    ("RELAY_BACKOFF_MAX_SECONDS", "0", "> 0"),
    ("RELAY_TICK_SECONDS", "-0.1", "> 0"),
    ("RELAY_CONFIRM_TIMEOUT_SECONDS", "0", "> 0"),
    ("RELAY_MAX_PAYLOAD_BYTES", "0", ">= 1"),
    ("RELAY_MAX_PAYLOAD_BYTES", "1MB", "is not an integer"),
    ("RELAY_QUEUE", "q" * 256, "255 bytes"),
    ("RELAY_MAX_FANOUT", "0", "1..1000"),
    ("RELAY_MAX_CONNECTIONS", "1", ">= 2"),
    ("RELAY_MAX_SERVER_CONNECTIONS", "21", "must be 2..RELAY_MAX_CONNECTIONS=20"),
    ("RELAY_RETENTION_SECONDS", "-5", ">= 0"),
    ("RELAY_DELETE_ON_SEND", "maybe", "is not a boolean"),
    ("RELAY_PURGE_INTERVAL_SECONDS", "0", "> 0"),
    ("RELAY_NOTIFY", "maybe", "is not a boolean"),
    ("RELAY_NOTIFY", "2", "is not a boolean"),
    ("RELAY_POLL_FLOOR_SECONDS", "0", "> 0"),
    ("RELAY_POLL_FLOOR_SECONDS", "nan", "finite"),
    ("RELAY_WATCH_IDLE_SECONDS", "0", "> 0"),
    ("RELAY_WATCH_IDLE_SECONDS", "nan", "finite"),
    ("RELAY_METRICS_PORT", "0", "1..65535"),
    ("RELAY_METRICS_PORT", "65536", "1..65535"),
    ("RELAY_METRICS_PORT", "http", "is not an integer"),
    ("RELAY_METRICS_MAX_EVENT_TYPES", "-1", "0..100000"),
    ("RELAY_METRICS_MAX_EVENT_TYPES", "lots", "is not an integer"),
    ("RELAY_CONSOLE_TOKEN", "short", "at least 16 characters"),
    ("RELAY_CONSOLE_TOKEN", "sixteen chars ok", "without spaces"),
    ("RELAY_CONSOLE_READONLY_TOKEN", "tiny", "at least 16 characters"),
    ("RELAY_CONSOLE_READONLY_TOKEN", "naïve-token-0123456", "printable ASCII"),
    ("RELAY_SIGNING_KEYS", "k1=" + "s" * 31, "shorter than 32 characters"),
    ("RELAY_CONSOLE_REDACT", "password,,card_number", "empty field name"),
    ("RELAY_LISTEN_URL", "mysql://root@db/app", "must be a PostgreSQL URL"),
    ("RELAY_SOURCE", "/shop orders", "URI-reference"),
    ("RELAY_DATABASES", "orders", "not a name=URL pair"),
    ("RELAY_EXPIRE_AFTER", "orders.reminder=1x,*=7d", "'orders.reminder=1x'"),
    ("RELAY_EXPIRE_AFTER", "orders.reminder", "is not PATTERN=DURATION"),
    ("RELAY_RATE_LIMITS", "orders.*=50/s,mail=fast", "'mail=fast' is not TYPE_PATTERN=N/s"),
    ("RELAY_RATE_LIMITS", "orders.*=0/s", "must be > 0"),
    ("RELAY_RATE_LIMITS", "a=1/s,a=2/s", "'a' is limited twice"),
]


@pytest.mark.parametrize(("var", "value", "problem"), BAD_VALUES)
def test_bad_value_is_refused_with_the_variable_named(var: str, value: str, problem: str) -> None:
    """A bad value raises ConfigError whose message names the variable and the problem."""
    with pytest.raises(ConfigError) as info:
        Settings.from_env({var: value})
    assert var in str(info.value)
    assert problem in str(info.value)


def test_every_variable_has_a_bad_value_case() -> None:
    """The table above covers every RELAY_* setting, so a new one cannot skip validation."""
    covered = {var for var, _, _ in BAD_VALUES}
    assert {env_name(f) for f in env_fields()} <= covered


#: Each variable alone at the edges of its range. With defaults for the rest, every one of them
#: must give settings (the defaults follow it); tests/integration/test_cli_edges.py starts every
#: command with each of them.
EDGE_VALUES = [
    ("RELAY_BATCH_SIZE", "1"),
    ("RELAY_BATCH_SIZE", "10000"),
    ("RELAY_BATCH_MAX", "1"),
    ("RELAY_BATCH_MAX", "10000"),
    ("RELAY_BATCH_MAX_BYTES", "1"),
    ("RELAY_BATCH_MAX_BYTES", str(2**40)),
    ("RELAY_LEASE_SECONDS", "1"),
    ("RELAY_LEASE_SECONDS", "5"),
    ("RELAY_LEASE_SECONDS", "3600"),
    ("RELAY_MAX_ATTEMPTS", "1"),
    ("RELAY_MAX_ATTEMPTS", "1000"),
    ("RELAY_BACKOFF_BASE_SECONDS", "0.001"),
    ("RELAY_BACKOFF_BASE_SECONDS", "3600"),
    ("RELAY_BACKOFF_MAX_SECONDS", "0.01"),
    ("RELAY_BACKOFF_MAX_SECONDS", "86400"),
    ("RELAY_TICK_SECONDS", "0.05"),
    ("RELAY_TICK_SECONDS", "3600"),
    ("RELAY_CONFIRM_TIMEOUT_SECONDS", "0.1"),
    ("RELAY_CONFIRM_TIMEOUT_SECONDS", "600"),
    ("RELAY_MAX_PAYLOAD_BYTES", "1"),
    ("RELAY_MAX_PAYLOAD_BYTES", "104857600"),
    ("RELAY_EXCHANGE", "relay"),
    ("RELAY_NATS_STREAM", "O"),
    ("RELAY_NATS_STREAM", "orders-outbox_2"),
    ("RELAY_EXCHANGE", "e" * 255),
    ("RELAY_QUEUE", "outbox"),
    ("RELAY_QUEUE", "q" * 255),
    ("RELAY_MAX_FANOUT", "1"),
    ("RELAY_MAX_FANOUT", "1000"),
    ("RELAY_MAX_CONNECTIONS", "2"),
    ("RELAY_MAX_CONNECTIONS", "500"),
    ("RELAY_MAX_SERVER_CONNECTIONS", "2"),
    ("RELAY_RETENTION_SECONDS", "0"),
    ("RELAY_RETENTION_SECONDS", "1"),
    ("RELAY_DELETE_ON_SEND", "0"),
    ("RELAY_DELETE_ON_SEND", "1"),
    ("RELAY_RETENTION_SECONDS", "315360000"),
    ("RELAY_PURGE_INTERVAL_SECONDS", "1"),
    ("RELAY_PURGE_INTERVAL_SECONDS", "86400"),
    ("RELAY_NOTIFY", "0"),
    ("RELAY_NOTIFY", "1"),
    ("RELAY_LISTEN_URL", "postgresql://relay@db:5432/app"),
    ("RELAY_LISTEN_URL", "postgres://relay:secret@db/app?sslmode=require"),
    ("RELAY_POLL_FLOOR_SECONDS", "0.001"),
    ("RELAY_POLL_FLOOR_SECONDS", "3600"),
    ("RELAY_WATCH_IDLE_SECONDS", "0.001"),
    ("RELAY_WATCH_IDLE_SECONDS", "3600"),
    ("RELAY_METRICS_PORT", "1"),
    ("RELAY_METRICS_PORT", "65535"),
    ("RELAY_METRICS_MAX_EVENT_TYPES", "0"),
    ("RELAY_METRICS_MAX_EVENT_TYPES", "100000"),
    ("RELAY_CONSOLE_TOKEN", "t" * 16),
    ("RELAY_CONSOLE_TOKEN", "t" * 512),
    ("RELAY_CONSOLE_READONLY_TOKEN", "r" * 16),
    ("RELAY_CONSOLE_READONLY_TOKEN", "r" * 512),
    ("RELAY_SIGNING_KEYS", "k" * 64 + "=" + "s" * 32),
    ("RELAY_SIGNING_KEYS", ",".join(f"k{i}=" + "s" * 32 for i in range(20))),
    ("RELAY_CONSOLE_REDACT", "password"),
    ("RELAY_CONSOLE_REDACT", "password,card_number,Authorization"),
    ("RELAY_SOURCE", "/shop/orders"),
    ("RELAY_SOURCE", "urn:example:shop:" + "x" * 400),
    ("RELAY_DATABASES", "a=sqlite:///a.db"),
    ("RELAY_EXPIRE_AFTER", "*=1s"),
    ("RELAY_EXPIRE_AFTER", "orders.*=36500d,orders.audit=never"),
    # One database only: with several, the row commands refuse to guess (test_cli_edges).
    ("RELAY_DATABASES", "x" * 40 + "=sqlite:///x.db"),
    ("RELAY_RATE_LIMITS", "*=0.001/s"),
    ("RELAY_RATE_LIMITS", "orders.?=1000000/s"),
]


@pytest.mark.parametrize(("var", "value"), EDGE_VALUES)
def test_one_variable_alone_at_an_edge_never_contradicts_a_default(var: str, value: str) -> None:
    """Setting one variable, at either end of its range, gives coherent settings that keep it."""
    s = Settings.from_env({var: value})
    (f,) = [f for f in env_fields() if env_name(f) == var]
    kept = getattr(s, f.name)
    assert kept == (value == "1" if isinstance(kept, bool) else type(kept)(value))
    assert 0 < s.confirm_timeout_seconds < s.lease_seconds
    assert 0 < s.poll_floor_seconds <= s.tick_seconds
    assert s.backoff_base_seconds <= s.backoff_max_seconds
    assert s.queue != s.exchange
    assert 1 <= s.batch_size <= s.batch_max


def test_every_variable_has_edge_cases() -> None:
    """The edge table covers every numeric and name setting (URLs have their own tests)."""
    covered = {var for var, _ in EDGE_VALUES}
    urls = {"RELAY_DATABASE_URL", "RELAY_BROKER_URL", "RELAY_EVENTS_URL"}
    assert {env_name(f) for f in env_fields()} - urls <= covered


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"RELAY_LEASE_SECONDS": "10"}, {"confirm_timeout_seconds": 10 / 3}),
        ({"RELAY_LEASE_SECONDS": "300"}, {"confirm_timeout_seconds": 10.0}),
        ({"RELAY_CONFIRM_TIMEOUT_SECONDS": "60"}, {"lease_seconds": 180.0}),
        ({"RELAY_CONFIRM_TIMEOUT_SECONDS": "2"}, {"lease_seconds": 30.0}),
        ({"RELAY_BACKOFF_BASE_SECONDS": "600"}, {"backoff_max_seconds": 600.0}),
        ({"RELAY_BACKOFF_MAX_SECONDS": "0.5"}, {"backoff_base_seconds": 0.5}),
        ({"RELAY_EXCHANGE": "relay"}, {"queue": "relay-tasks"}),
        ({"RELAY_QUEUE": "outbox"}, {"exchange": "outbox-events"}),
        ({"RELAY_TICK_SECONDS": "0.01"}, {"poll_floor_seconds": 0.01}),
        ({"RELAY_POLL_FLOOR_SECONDS": "5"}, {"tick_seconds": 5.0}),
        # The tick is the idle relay's next look where nothing notifies it: shorter there.
        ({}, {"tick_seconds": 0.4}),
        ({"RELAY_DATABASE_URL": "postgresql://db/app"}, {"tick_seconds": 1.0}),
        (
            {"RELAY_DATABASE_URL": "postgresql+psycopg://db/app", "RELAY_NOTIFY": "0"},
            {"tick_seconds": 0.4},
        ),
        ({"RELAY_DATABASE_URL": "mariadb://db/app"}, {"tick_seconds": 0.4}),
        (
            {"RELAY_DATABASE_URL": "mysql://db/app", "RELAY_TICK_SECONDS": "2"},
            {"tick_seconds": 2.0},
        ),
        ({"RELAY_NOTIFY": "off"}, {"notify": False}),
        ({}, {"batch_size": 100, "batch_max": 1000}),
        ({"RELAY_BATCH_SIZE": "100"}, {"batch_max": 100}),
        ({"RELAY_BATCH_SIZE": "5000"}, {"batch_max": 5000}),
        ({"RELAY_BATCH_MAX": "50"}, {"batch_size": 50}),
        ({"RELAY_BATCH_MAX": "4000"}, {"batch_size": 100}),
        ({"RELAY_RETENTION_SECONDS": "0"}, {"delete_on_send": True}),
        ({"RELAY_DELETE_ON_SEND": "1"}, {"delete_on_send": True}),
        ({}, {"delete_on_send": False}),
    ],
)
def test_defaults_follow_what_was_set(env: dict[str, str], expected: dict[str, object]) -> None:
    """An unset setting that depends on a set one takes a default that agrees with it."""
    s = Settings.from_env(env)
    for name, value in expected.items():
        assert getattr(s, name) == (pytest.approx(value) if isinstance(value, float) else value)


@pytest.mark.parametrize(
    ("env", "idle"),
    [
        # Where nothing notifies, a relay polling by itself looks at least every 0.2 s idle.
        ({}, 0.2),
        ({"RELAY_DATABASE_URL": "mariadb://db/app"}, 0.2),
        ({"RELAY_DATABASE_URL": "postgresql://db/app", "RELAY_NOTIFY": "0"}, 0.2),
        # A tick the user set is theirs, where nothing notifies.
        ({"RELAY_DATABASE_URL": "mysql://db/app", "RELAY_TICK_SECONDS": "2"}, 2.0),
        ({"RELAY_TICK_SECONDS": "0.1"}, 0.1),
        # With notifications, polling happens only when the listener is deaf: quick, whatever
        # tick the notifications allowed.
        ({"RELAY_DATABASE_URL": "postgresql://db/app"}, 0.2),
        ({"RELAY_DATABASE_URL": "postgresql://db/app", "RELAY_TICK_SECONDS": "5"}, 0.2),
        # Never below the poll floor.
        ({"RELAY_POLL_FLOOR_SECONDS": "0.5"}, 0.5),
    ],
)
def test_idle_poll_is_quick_unless_a_tick_was_chosen(env: dict[str, str], idle: float) -> None:
    """``idle_poll_seconds``, the longest wait of a relay polling for rows itself, keeps a
    single commit's latency under 300 ms by default and follows a tick set where nothing
    notifies."""
    assert Settings.from_env(env).idle_poll_seconds == pytest.approx(idle)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"RELAY_LEASE_SECONDS": "10", "RELAY_CONFIRM_TIMEOUT_SECONDS": "10"},
            ("RELAY_CONFIRM_TIMEOUT_SECONDS=10.0", "RELAY_LEASE_SECONDS=10.0"),
        ),
        (
            {"RELAY_LEASE_SECONDS": "30", "RELAY_CONFIRM_TIMEOUT_SECONDS": "45"},
            ("RELAY_CONFIRM_TIMEOUT_SECONDS=45.0", "RELAY_LEASE_SECONDS=30.0"),
        ),
        (
            {"RELAY_BACKOFF_BASE_SECONDS": "5", "RELAY_BACKOFF_MAX_SECONDS": "1"},
            ("RELAY_BACKOFF_MAX_SECONDS=1.0", "RELAY_BACKOFF_BASE_SECONDS=5.0"),
        ),
        (
            {"RELAY_EXCHANGE": "events", "RELAY_QUEUE": "events"},
            ("RELAY_QUEUE='events'", "RELAY_EXCHANGE='events'"),
        ),
        (
            {"RELAY_BATCH_SIZE": "500", "RELAY_BATCH_MAX": "200"},
            ("RELAY_BATCH_MAX=200", "RELAY_BATCH_SIZE=500"),
        ),
        (
            {"RELAY_TICK_SECONDS": "1", "RELAY_POLL_FLOOR_SECONDS": "2"},
            ("RELAY_POLL_FLOOR_SECONDS=2.0", "RELAY_TICK_SECONDS=1.0"),
        ),
        (
            {"RELAY_DELETE_ON_SEND": "1", "RELAY_RETENTION_SECONDS": "60"},
            ("RELAY_DELETE_ON_SEND=True", "RELAY_RETENTION_SECONDS=60.0"),
        ),
        (
            {"RELAY_DELETE_ON_SEND": "0", "RELAY_RETENTION_SECONDS": "0"},
            ("RELAY_DELETE_ON_SEND=False", "RELAY_RETENTION_SECONDS=0.0"),
        ),
    ],
)
def test_two_set_values_that_contradict_are_refused_naming_both(
    env: dict[str, str], named: tuple[str, str]
) -> None:
    """Only values the user set can contradict each other; the message names both (even when
    one of them equals its default, as RELAY_CONFIRM_TIMEOUT_SECONDS=10 does)."""
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    for text in named:
        assert text in str(info.value)


def test_a_command_reads_only_the_settings_it_uses() -> None:
    """`only=` skips the variables a command never uses, so their bad values cannot stop it."""
    env = {"RELAY_BATCH_SIZE": "zero", "RELAY_DATABASE_URL": "sqlite:///x.db"}
    with pytest.raises(ConfigError, match="RELAY_BATCH_SIZE"):
        Settings.from_env(env)
    assert Settings.from_env(env, only=DATABASE_ONLY).database_url == "sqlite:///x.db"


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_values_keep_the_defaults(value: str) -> None:
    """Unset or blank variables mean "default", never an error."""
    env = {env_name(f): value for f in env_fields()}
    assert Settings.from_env(env) == Settings()


def test_good_values_are_parsed_with_surrounding_blanks() -> None:
    """Numbers are parsed (blanks stripped); URLs are kept verbatim."""
    s = Settings.from_env(
        {
            "RELAY_BATCH_SIZE": " 250 ",
            "RELAY_LEASE_SECONDS": "12.5",
            "RELAY_DATABASE_URL": "postgresql://u:p@db:5432/app",
        }
    )
    assert (s.batch_size, s.lease_seconds, s.database_url) == (
        250,
        12.5,
        "postgresql://u:p@db:5432/app",
    )


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("RELAY_DATABASE_URL", f"postgres:{SECRET}@db/app"),
        ("RELAY_BROKER_URL", f"guest:{SECRET}@rabbit:5672"),
        ("RELAY_EVENTS_URL", f"user:{SECRET}@host"),
        ("RELAY_BATCH_SIZE", f"amqp://u:{SECRET}@h//"),
        ("RELAY_LEASE_SECONDS", f"amqp://u:{SECRET}@h//"),
    ],
)
def test_refusals_never_echo_a_password(var: str, value: str) -> None:
    """A refused value that carries credentials is redacted in the message."""
    with pytest.raises(ConfigError) as info:
        Settings.from_env({var: value})
    assert var in str(info.value)
    assert SECRET not in str(info.value)


def test_describe_redacts_every_url() -> None:
    """describe() (what `relay dispatch` logs) carries no password."""
    s = Settings(
        database_url=f"postgresql://u:{SECRET}@db/app",
        broker_url=f"amqp://u:{SECRET}@rabbit//",
        events_url=f"redis://:{SECRET}@redis:6379/0",
    )
    assert SECRET not in repr(s.describe())
