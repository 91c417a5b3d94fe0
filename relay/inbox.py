"""The consumer inbox: ``relay.inbox.claim(session_or_connection, consumer, message_id)``
makes a message take effect once per consumer, in the caller's transaction.

:func:`claim` returns True the first time in the caller's transaction and False once that
consumer processed the message; a rollback forgets it. :func:`purge` deletes old inbox rows
(what ``relay inbox purge --older-than`` runs). The table is ``relay_inbox``, in the relay's
own migration chain.
"""

from __future__ import annotations

from relay.consume.inbox import claim, purge

__all__ = ["claim", "purge"]
