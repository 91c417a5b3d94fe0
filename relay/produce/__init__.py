"""The producer side: writing events (and Celery tasks) in the caller's own transaction.

``core`` validates an event and builds its row (shared by every adapter); ``sync_adapter``
executes it on a SQLAlchemy Session or Connection, ``async_adapter`` on an AsyncSession or
AsyncConnection (``relay.aio``); ``wake`` arms the after-commit wake-up; ``enqueue`` is the sync
public face (``relay.enqueue``). A keyed row is numbered by the database's trigger; nothing here
talks to a broker.
"""
