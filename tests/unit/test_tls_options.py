"""TLS options of broker URLs (relay.config.tls), their refusal at start-up, what Celery is given,
and the redaction of every URL-borne secret."""

from __future__ import annotations

import ssl

import pytest

from relay.celery import celery_config
from relay.config import Settings, tls
from relay.config.urls import first_line_redacted, redact
from relay.exceptions import ConfigError


def test_amqps_verifies_chain_and_name_by_default() -> None:
    """A bare amqps:// URL: py-amqp gets the host name to check and CERT_REQUIRED."""
    bare, found = tls.parse("amqps://u:p@broker.internal:5671/vh")
    assert bare == "amqps://u:p@broker.internal:5671/vh"
    assert found.verified
    assert found.kombu_ssl() == {
        "cert_reqs": ssl.CERT_REQUIRED,
        "server_hostname": "broker.internal",
    }


def test_options_leave_the_url_and_become_ssl_keywords() -> None:
    """ssl_* options are taken off the URL (other query options stay) and given to py-amqp."""
    bare, found = tls.parse(
        "amqps://h//?heartbeat=10&ssl_ca_certs=/ca.pem&ssl_certfile=/c.pem&ssl_keyfile=/k.pem"
    )
    assert bare == "amqps://h//?heartbeat=10"
    assert found.kombu_ssl() == {
        "cert_reqs": ssl.CERT_REQUIRED,
        "server_hostname": "h",
        "ca_certs": "/ca.pem",
        "certfile": "/c.pem",
        "keyfile": "/k.pem",
    }


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("ssl_check_hostname=false", {"cert_reqs": ssl.CERT_REQUIRED}),
        ("ssl_cert_reqs=none", {"cert_reqs": ssl.CERT_NONE}),
    ],
)
def test_opt_outs_drop_the_name_check(query: str, expected: dict[str, object]) -> None:
    """The opt-outs leave no server_hostname (Kombu would fill a None one) and are not verified."""
    _, found = tls.parse(f"amqps://h//?{query}")
    assert found.kombu_ssl() == expected
    assert found.encrypted
    assert not found.verified
    assert "NOT" in found.describe()


def test_rediss_verifies_where_kombu_would_not() -> None:
    """rediss:// gets explicit ssl options (Kombu alone sets CERT_NONE when there are none)."""
    _, found = tls.parse("rediss://:pw@cache:6380/0?ssl_ca_certs=/ca.pem")
    assert found.kombu_ssl() == {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_ca_certs": "/ca.pem",
    }


def test_plain_urls_are_not_encrypted() -> None:
    _, found = tls.parse("amqp://guest:guest@10.0.0.5:5672//")
    assert not found.encrypted
    assert not found.local
    assert found.describe() == "not encrypted"
    assert tls.parse("amqp://127.0.0.1//")[1].local


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("amqp://h//?ssl_ca_certs=/ca.pem", "use amqps://, rediss:// or tls://"),
        ("amqps://h//?ssl_ciphers=ALL", "unknown TLS option 'ssl_ciphers'"),
        ("amqps://h//?ssl_cert_reqs=maybe", "is not required or none"),
        ("amqps://h//?ssl_check_hostname=perhaps", "is not true or false"),
        ("amqps://h//?ssl_keyfile=/k.pem", "ssl_keyfile needs ssl_certfile"),
    ],
)
def test_bad_options_are_refused_at_start_naming_the_variable(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match="RELAY_EVENTS_URL") as caught:
        Settings.from_env({"RELAY_EVENTS_URL": url})
    assert problem in str(caught.value)


def test_celery_gets_the_url_without_options_and_broker_use_ssl() -> None:
    """The relay's own Celery app: broker_url without ssl_* and the options as broker_use_ssl."""
    config = celery_config(Settings(broker_url="amqps://u:p@mq:5671//?ssl_ca_certs=/ca.pem"))
    assert config["broker_url"] == "amqps://u:p@mq:5671//"
    assert config["broker_use_ssl"] == {
        "cert_reqs": ssl.CERT_REQUIRED,
        "server_hostname": "mq",
        "ca_certs": "/ca.pem",
    }
    assert celery_config(Settings())["broker_use_ssl"] is False


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://app:MARKER@db/shop?sslmode=verify-full&sslpassword=MARKER",
        "host=db password=MARKER sslpassword='MARKER x' dbname=shop",
        "redis://:MARKER@cache:6379/0",
        "amqps://relay:MARKER@mq//?ssl_certfile=/c.pem",
        "mysql+pymysql://app:MARKER@db/shop?ssl_ca=/ca.pem",
        "https://x/?access_token=MARKER&api_key=MARKER",
    ],
)
def test_redact_masks_every_url_borne_secret(text: str) -> None:
    assert "MARKER" not in redact(text)


def test_first_line_redacted_names_the_drivers_error_in_one_line_without_secrets() -> None:
    """A wrapped driver error (SQLAlchemy's ``orig``) is described by its own class and first
    line, any secret in it masked; an error that says nothing is its class alone."""
    import sqlalchemy as sa

    class OperationalError(Exception):
        pass

    driver = OperationalError('connection to "postgresql://app:MARKER@db/shop" failed\nHINT: x')
    wrapped = sa.exc.OperationalError("SELECT 1", {}, driver)
    assert first_line_redacted(wrapped) == (
        'OperationalError: connection to "postgresql://app:***@db/shop" failed'
    )
    assert first_line_redacted(ValueError("  ")) == "ValueError: "


def test_settings_repr_and_describe_carry_no_secret() -> None:
    settings = Settings(
        database_url="postgresql://app:MARKER@db/shop?sslpassword=MARKER",
        events_url="amqps://relay:MARKER@mq//",
        console_token="MARKER-console-token",
    )
    assert "MARKER" not in repr(settings)
    assert "MARKER" not in str(settings.describe())


@pytest.mark.parametrize(
    ("url", "status", "words"),
    [
        ("filesystem://", "pass", "stays on this machine"),
        ("amqp://guest:guest@127.0.0.1:5672//", "pass", "stays on this machine"),
        ("amqp://relay:pw@mq.internal:5672//", "warn", "NOT encrypted"),
        ("amqps://relay:pw@mq.internal//", "pass", "verified"),
        ("amqps://mq.internal//?ssl_check_hostname=false", "warn", "host name NOT checked"),
        ("amqps://a.internal//;amqps://b.internal//?ssl_cert_reqs=none", "warn", "NOT verified"),
        ("rediss://cache.internal:6380/0?ssl_ca_certs=/nonexistent/ca.pem", "fail", "no such file"),
    ],
)
def test_doctor_says_whether_the_broker_is_encrypted_and_verified(
    url: str, status: str, words: str
) -> None:
    from relay.commands.doctor import tls as doctor_tls

    check = doctor_tls.broker("events broker TLS", url)
    assert check.status == status
    assert words in check.detail
    assert ":pw@" not in check.detail


def test_metrics_source_label_carries_no_url_secret() -> None:
    """The ``source`` label (and CloudEvents source) derived from the database URL drops the
    user, password and query, so a metrics scrape shows none of them."""
    import sqlalchemy as sa

    from relay.store.schema.eventids import default_source

    url = sa.make_url("postgresql+psycopg://app:MARKER@db.internal/shop?sslpassword=MARKER")
    assert "MARKER" not in default_source(url)
