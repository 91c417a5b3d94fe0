"""pytest fixtures for the tests of applications that write events through the relay.

Registered under the ``pytest11`` entry point as ``relay``: installing the relay makes pytest
load this module in every run of the project. Loading it defines fixtures and nothing else (no
import of SQLAlchemy or the dispatcher, no hook, no setting read): nothing happens until a
test asks for one. ``pytest -p no:relay`` turns it off; where the entry point is not installed
(a checkout on ``PYTHONPATH``), ``-p relay.testing.pytest_plugin`` turns it on (never both:
pytest refuses to register the module a second time).

- ``relay_database_url``: where the outbox lives, a SQLite file of the test's own by default;
  override the fixture to return your test database's URL;
- ``relay_engine``: an engine on it, the relay's tables created (``relay.migrate``);
- ``relay_outbox``: a ``relay.testing.outbox.TestOutbox`` over it, showing only the events
  committed during the test: ``committed()``, ``drain()``, ``assert_committed(...)``;
- ``relay_drain``: its ``drain``, relaying what is pending into an in-memory broker now.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import sqlalchemy as sa

    from relay.publishers.message import OutgoingMessage
    from relay.testing.outbox import TestOutbox


@pytest.fixture
def relay_database_url(tmp_path: Path) -> str:
    """The outbox's database: a SQLite file in the test's temporary directory. Override it
    (same name, in your conftest.py) to return the URL of your own test database."""
    return f"sqlite:///{tmp_path / 'outbox.sqlite3'}"


@pytest.fixture
def relay_engine(relay_database_url: str) -> Iterator[sa.Engine]:
    """An engine on ``relay_database_url`` with the relay's tables (migrated to head)."""
    import relay

    relay.migrate(relay_database_url)
    engine = relay.create_engine(relay_database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def relay_outbox(relay_engine: sa.Engine) -> TestOutbox:
    """The outbox, showing the events committed from the test's start (none that a
    rolled-back transaction wrote: they never reach the table)."""
    from relay.testing.outbox import TestOutbox

    return TestOutbox.starting_now(relay_engine)


@pytest.fixture
def relay_drain(relay_outbox: TestOutbox) -> Callable[..., list[OutgoingMessage]]:
    """Relay what is pending now into the in-memory broker ``relay_outbox.broker``; returns
    the messages published (no sleep, no worker: the test waits for nothing)."""

    def drain(**settings: Any) -> list[OutgoingMessage]:
        return relay_outbox.drain(**settings)

    return drain


__all__ = ["relay_database_url", "relay_drain", "relay_engine", "relay_outbox"]
