"""Settings.from_env: every RELAY_* variable validated, refused with its name, secrets redacted."""

from __future__ import annotations

from dataclasses import fields

import pytest

from relay.config import Settings
from relay.exceptions import ConfigError

SECRET = "hunter2-s3cr3t"

#: (variable, bad value, what the message must say). Every Settings field has at least one.
BAD_VALUES = [
    ("RELAY_DATABASE_URL", "relay.sqlite3", "is not a URL"),
    ("RELAY_BROKER_URL", "localhost:5672", "is not a URL"),
    ("RELAY_EVENTS_URL", "guest@localhost", "is not a URL"),
    ("RELAY_EXCHANGE", "x" * 256, "255 bytes"),
    ("RELAY_BATCH_SIZE", "abc", "is not an integer"),
    ("RELAY_BATCH_SIZE", "1.5", "is not an integer"),
    ("RELAY_BATCH_SIZE", "0", "at least 1"),
    ("RELAY_BATCH_SIZE", "100000", "<= 10000"),
    ("RELAY_LEASE_SECONDS", "-1", "> 0"),
    ("RELAY_LEASE_SECONDS", "nan", "finite"),
    ("RELAY_LEASE_SECONDS", "inf", "finite"),
    ("RELAY_LEASE_SECONDS", "30s", "finite"),
    ("RELAY_MAX_ATTEMPTS", "0", ">= 1"),
    ("RELAY_MAX_ATTEMPTS", "ten", "is not an integer"),
    ("RELAY_BACKOFF_BASE_SECONDS", "0", "> 0"),
    ("RELAY_BACKOFF_MAX_SECONDS", "0.5", ">= RELAY_BACKOFF_BASE_SECONDS"),
    ("RELAY_TICK_SECONDS", "-0.1", "> 0"),
    ("RELAY_CONFIRM_TIMEOUT_SECONDS", "60", "below RELAY_LEASE_SECONDS"),
    ("RELAY_CONFIRM_TIMEOUT_SECONDS", "0", "> 0"),
    ("RELAY_MAX_PAYLOAD_BYTES", "0", ">= 1"),
    ("RELAY_MAX_PAYLOAD_BYTES", "1MB", "is not an integer"),
    ("RELAY_QUEUE", "q" * 256, "255 bytes"),
    ("RELAY_MAX_FANOUT", "0", "1..1000"),
    ("RELAY_RETENTION_SECONDS", "-5", "> 0"),
    ("RELAY_PURGE_INTERVAL_SECONDS", "0", "> 0"),
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
    assert {f"RELAY_{f.name.upper()}" for f in fields(Settings)} <= covered


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_values_keep_the_defaults(value: str) -> None:
    """Unset or blank variables mean "default", never an error."""
    env = {f"RELAY_{f.name.upper()}": value for f in fields(Settings)}
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
