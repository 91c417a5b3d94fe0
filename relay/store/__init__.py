"""The outbox database: engines, schema, migrations and the stores that speak in domain verbs.

Every SQL statement the package runs is built in :mod:`relay.store.dialects`, one module per
database; the stores own the transactions around them and translate database errors into the
relay's own (:mod:`relay.exceptions`). Nothing here imports kombu or celery.
"""

from __future__ import annotations

from typing import Any

#: Names ``relay.store`` had when it was one module, by the module that holds them now.
_FORMER = {
    "Store": "relay.store.dispatch",
    "Completed": "relay.records",
    "PURGE_LOCK_KEY": "relay.store.operations",
    "Actor": "relay.store.operations",
    "Changed": "relay.store.operations",
}


def __getattr__(name: str) -> Any:
    """``from relay.store import Store`` (and the other names above) keeps working, loaded on
    first use so that importing a submodule never loads the stores."""
    if name in _FORMER:
        import importlib

        return getattr(importlib.import_module(_FORMER[name]), name)
    raise AttributeError(f"module 'relay.store' has no attribute {name!r}")
