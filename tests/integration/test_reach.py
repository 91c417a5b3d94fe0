"""The reachability checks `relay doctor` and `relay probe ready` share raise the relay's own
errors, translated where SQLAlchemy's and Kombu's are (the store, the publishers)."""

from __future__ import annotations

import pytest

from relay.commands.doctor import reach
from relay.config import Settings
from relay.exceptions import BrokerUnavailable, ConfigError, DatabaseUnavailable
from relay.store.engine import create_engine
from relay.store.operations.health import HealthStore

#: Nothing listens there: the connection is refused at once.
DEAD_BROKER = "amqp://guest:guest@127.0.0.1:9//"
DEAD_DATABASE = "postgresql://postgres@127.0.0.1:9/none?connect_timeout=2"


def test_a_refused_broker_is_broker_unavailable() -> None:
    """A broker that refuses the connection raises BrokerUnavailable, not a Kombu error."""
    with (
        pytest.raises(BrokerUnavailable, match=r"^broker unreachable: "),
        reach.broker(Settings(events_url=DEAD_BROKER)),
    ):
        pass


def test_a_live_broker_is_reached_without_declaring_anything(
    amqp_url: str, exchange_name: str
) -> None:
    """A reachable broker yields a connected connection; the check declares no exchange."""
    import kombu

    with reach.broker(Settings(events_url=amqp_url, exchange=exchange_name)) as conn:
        assert conn.connected
        with pytest.raises(conn.channel_errors):
            kombu.Exchange(exchange_name, type="topic")(conn.channel()).declare(passive=True)


def test_a_refused_database_is_database_unavailable() -> None:
    """A database server that refuses the connection raises DatabaseUnavailable."""
    engine = create_engine(DEAD_DATABASE)
    try:
        with pytest.raises(DatabaseUnavailable, match=r"^database unreachable: "):
            reach.database(HealthStore(engine))
    finally:
        engine.dispose()


def test_a_live_database_answers(db_url: str) -> None:
    """A reachable database passes the check (returns, raises nothing)."""
    engine = create_engine(db_url)
    try:
        assert reach.database(HealthStore(engine)) is None
    finally:
        engine.dispose()


def test_a_scheme_without_a_transport_is_a_config_error() -> None:
    """A URL whose scheme Kombu has no transport for is the operator's ConfigError, naming it,
    not Kombu's KeyError."""
    with (
        pytest.raises(ConfigError, match=r"'nosuch://x' names no usable transport"),
        reach.broker(Settings(events_url="nosuch://x")),
    ):
        pass
