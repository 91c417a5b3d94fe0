"""``relay doctor``'s ordering-keys check (issue 37): keys whose next row cannot be claimed, so
their rows wait for ever (a failed head, a number no row has), named with why and the fix."""

from __future__ import annotations

from relay.commands.doctor.verdicts import PASS, WARN, Check
from relay.config import Settings
from relay.store.operations.store import OperationsStore

#: The doctor names at most this many stalled keys.
NAMED = 5


def stalled_keys(settings: Settings) -> Check:
    """Warn when an ordering key is stalled, naming up to :data:`NAMED` of them."""
    store = OperationsStore.from_url(settings.database_url)
    try:
        stalled = store.stalled_keys(NAMED + 1)
    finally:
        store.dispose()
    if not stalled:
        return Check("ordering keys", PASS, "no key waits behind a row the relay will not claim")
    named = stalled[:NAMED]
    more = " (and more: relay status --json counts them)" if len(stalled) > NAMED else ""
    detail = "; ".join(f"{k.key!r}: {k.why}" for k in named)
    fix = "; ".join(f"{k.key!r}: {k.fix}" for k in named)
    return Check(
        "ordering keys",
        WARN,
        f"{len(named)} key(s) stalled{more}: {detail}",
        f'{fix} (docs/ordering.md, "A stalled key")',
    )
