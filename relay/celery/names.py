"""The names the relay's tasks and beat entries are registered under.

They are a wire contract: every task message carries its task's name, so a message sent before
an upgrade must still find its task after it. Change none of them.
"""

from __future__ import annotations

CLAIM_AND_DISPATCH = "relay.claim_and_dispatch"
TICK = "relay.tick"
PURGE_SENT = "relay.purge_sent"
PURGE_INBOX = "relay.purge_inbox"
