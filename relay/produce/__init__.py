"""The producer side: writing events (and Celery tasks) in the caller's own transaction.

``enqueue`` validates an event, builds its row, takes a keyed event's place in its key's order
and arms the after-commit wake-up; nothing here talks to a broker.
"""
