"""Kombu transport options the relay needs for a URL; the embedded default lives here.

The embedded default (``filesystem://``) needs no server and works across processes on one
host: Kombu's filesystem transport keeps queues *and* exchange bindings in folders, so a
consumer in another process that binds a queue receives the events. (The in-memory and
SQLAlchemy transports keep bindings in each process's memory: events published from a relay
process would find no binding there and be refused as unroutable.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: Where ``filesystem://`` keeps its folders when the URL names none: the working directory.
EMBEDDED_DIR = "relay-broker"


def embedded_folder(url: str) -> Path | None:
    """The base folder of a ``filesystem://`` URL (``filesystem:///var/lib/relay`` names one;
    bare ``filesystem://`` means ``./relay-broker``); None for any other transport."""
    parts = urlsplit(url)
    if parts.scheme != "filesystem":
        return None
    return Path(parts.path) if parts.path not in ("", "/") else Path(EMBEDDED_DIR)


def transport_options(url: str) -> dict[str, Any]:
    """Options for ``kombu.Connection(url, transport_options=...)`` and Celery's
    ``broker_transport_options``; creates the embedded transport's folders."""
    base = embedded_folder(url)
    if base is None:
        return {}
    queues, control = base / "queues", base / "control"
    queues.mkdir(parents=True, exist_ok=True)
    control.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(queues),
        "data_folder_out": str(queues),
        "control_folder": str(control),
        "store_processed": False,
        # The transport polls its folders; Kombu's 1 s default would add a second of latency.
        "polling_interval": 0.1,
    }
