"""What the relay ships for the tests of applications built on it.

- :class:`InMemoryPublisher`, :class:`InMemoryStore`, :class:`Row`: doubles of the broker and
  of the outbox (``relay.testing.doubles``), importable from here as they always were;
- ``relay.testing.pytest_plugin``: pytest fixtures (an outbox on the test's database, the
  events the code under test committed, a synchronous ``drain()`` into an in-memory broker, an
  assertion helper), over ``relay.testing.outbox``. Neither is imported here: importing
  ``relay.testing`` loads no SQLAlchemy, Kombu or Celery.
"""

from __future__ import annotations

from relay.testing.doubles import InMemoryPublisher, InMemoryStore, Row

__all__ = ["InMemoryPublisher", "InMemoryStore", "Row"]
