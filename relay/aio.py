"""asyncio producers: ``await relay.aio.enqueue(session_or_connection, ...)`` and
``await relay.aio.lock_keys(...)`` on a SQLAlchemy ``AsyncSession`` or ``AsyncConnection``.

The same checks, rows and after-commit wake-up as ``relay.enqueue`` (the producer core,
:mod:`relay.produce.core`); the INSERT is awaited, never blocking the event loop. Drivers:
``pip install "celery-outbox-relay[asyncio]"`` (asyncpg, aiosqlite, asyncmy; psycopg's async
side comes with the base install). See docs/producing.md.
"""

from __future__ import annotations

from relay.produce.async_adapter import AsyncTarget, enqueue, lock_keys

__all__ = ["AsyncTarget", "enqueue", "lock_keys"]
