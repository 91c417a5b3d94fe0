"""Kombu transport options the relay needs for a URL; the embedded default lives here.

The embedded default (``filesystem://``) needs no server and works across processes on one
host: Kombu's filesystem transport keeps queues *and* exchange bindings in folders, so a
consumer in another process that binds a queue receives the events. (The in-memory and
SQLAlchemy transports keep bindings in each process's memory: events published from a relay
process would find no binding there and be refused as unroutable.)

Kombu's own filesystem channel creates a message file and only then writes it, so a consumer
listing the folder in between takes an empty file, fails to decode it and has already removed
it: the message is lost (celery/kombu#1551). :func:`register` makes ``filesystem://`` resolve
to :class:`Transport`, whose channel writes each message under a name no reader picks up and
renames it into place, and takes messages by renaming them into a folder beside the queue
folder (same file system, so the rename is atomic and only one consumer wins it).

Importing this module changes nothing in Kombu. :func:`register` is called where a connection
is built: by ``relay.publishers.for_url`` and by :func:`transport_options` for a
``filesystem://`` URL (which the Celery app's configuration and consumers use).
"""

from __future__ import annotations

import logging
import os
import uuid
from contextlib import suppress
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any
from urllib.parse import urlsplit

import kombu
import kombu.transport
from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

from relay.config import tls
from relay.config.urls import redact

log = logging.getLogger(__name__)

#: Where ``filesystem://`` keeps its folders when the URL names none: the working directory.
EMBEDDED_DIR = "relay-broker"
#: Suffix of a message file still being written; readers match ``<queue>.msg`` exactly.
_PART = ".part"


class Channel(filesystem.Channel):
    """Kombu's filesystem channel with atomic hand-over of message files."""

    # Kombu's base and filesystem channels name the second argument differently.
    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Write ``message`` to ``queue``: a ``.part`` file renamed into place once written."""
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        part = final + _PART
        try:
            with open(part, "wb") as f:
                f.write(str_to_bytes(dumps(message)))
            os.replace(part, final)
        except OSError as exc:
            with suppress(OSError):
                os.unlink(part)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        """Take the oldest message of ``queue``: whoever renames its file away owns it."""
        wanted = f"{queue}.msg"
        taken_dir = self.processed_folder
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:
                continue
            taken = os.path.join(taken_dir, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), taken)
            except FileNotFoundError:
                continue  # another consumer took it first
            except OSError as exc:
                raise ChannelError(f"Cannot take file {name!r} from queue {queue!r}") from exc
            try:
                with open(taken, "rb") as f:
                    payload = f.read()
                if not self.store_processed:
                    os.unlink(taken)
            except OSError as exc:
                raise ChannelError(f"Cannot read file {taken!r} from queue.") from exc
            return loads(bytes_to_str(payload))
        raise Empty()


class Transport(filesystem.Transport):
    """Kombu's filesystem transport with :class:`Channel`."""

    Channel = Channel


def register() -> None:
    """Make ``filesystem://`` mean :class:`Transport` in this process; idempotent."""
    target = f"{__name__}:Transport"
    if kombu.transport.TRANSPORT_ALIASES.get("filesystem") == target:
        return
    kombu.transport.TRANSPORT_ALIASES["filesystem"] = target
    # A connection made before this call may have cached Kombu's class under the alias.
    getattr(kombu.transport, "_transport_cache", {}).pop("filesystem", None)


def embedded_folder(url: str) -> Path | None:
    """The base folder of a ``filesystem://`` URL (``filesystem:///var/lib/relay`` names one;
    bare ``filesystem://`` means ``./relay-broker``); None for any other transport."""
    parts = urlsplit(url)
    if parts.scheme != "filesystem":
        return None
    return Path(parts.path) if parts.path not in ("", "/") else Path(EMBEDDED_DIR)


def create_embedded_folders(url: str) -> Path | None:
    """Create the folders of a ``filesystem://`` URL (idempotent); returns the base folder, or
    None for any other transport."""
    base = embedded_folder(url)
    if base is None:
        return None
    for name in _FOLDERS:
        (base / name).mkdir(parents=True, exist_ok=True)
    return base


_FOLDERS = ("queues", "control", "taken")


def transport_options(url: str) -> dict[str, Any]:
    """Options for ``kombu.Connection(url, transport_options=...)`` and Celery's
    ``broker_transport_options``. For ``filesystem://`` it creates the embedded transport's
    folders and calls :func:`register`, since these options are for the relay's transport."""
    base = create_embedded_folders(url)
    if base is None:
        return {}
    register()
    folders = {name: base / name for name in _FOLDERS}
    return {
        "data_folder_in": str(folders["queues"]),
        "data_folder_out": str(folders["queues"]),
        "control_folder": str(folders["control"]),
        # Where a consumer moves a message file it takes (read, then deleted): beside the
        # queue folder, so taking it is one atomic rename.
        "processed_folder": str(folders["taken"]),
        "store_processed": False,
        # The transport polls its folders; Kombu's 1 s default would add a second of latency.
        "polling_interval": 0.1,
    }


#: Nodes whose unverified TLS was already logged by this process (once each, not per reconnect).
_WARNED: set[str] = set()


def broker_tls(url: str) -> tuple[str, tls.BrokerTls]:
    """``url`` without its TLS options (every node of a failover list) and the first node's
    TLS, logging a WARNING once per node whose TLS an option leaves unverified."""
    stripped: list[str] = []
    first: tls.BrokerTls | None = None
    for node in tls.nodes(url):
        bare, node_tls = tls.parse(node)
        stripped.append(bare)
        first = first or node_tls
        if node_tls.encrypted and not node_tls.verified and bare not in _WARNED:
            _WARNED.add(bare)
            log.warning(
                "TLS to %s is %s: a machine on the path can impersonate the broker and read "
                "or alter every message",
                redact(bare),
                node_tls.describe(),
            )
    assert first is not None  # nodes() returns at least one
    return ";".join(stripped), first


def kombu_connection(url: str, **kwargs: Any) -> kombu.Connection:
    """A ``kombu.Connection`` to ``url`` (not yet connected) with the relay's transport
    options and verified TLS (:mod:`relay.config.tls`); ``kwargs`` go to Kombu, their
    ``transport_options`` over the relay's."""
    bare, node_tls = broker_tls(url)
    own = kwargs.pop("transport_options", None) or {}
    return kombu.Connection(
        bare,
        ssl=node_tls.kombu_ssl(),
        transport_options={**transport_options(url), **own},
        **kwargs,
    )
