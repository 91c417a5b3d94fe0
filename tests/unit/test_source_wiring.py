"""``RELAY_SOURCE`` and ``RELAY_LISTEN_URL`` reach every place a relay process builds from
settings (the merge of the event-id and runner work once dropped the source on two of them)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from relay.commands.doctor import pooler as doctor_pooler
from relay.commands.doctor.verdicts import FAIL
from relay.config import Settings
from relay.dispatch.dispatcher import Dispatcher
from relay.dispatch.runtime import Runtime
from relay.exceptions import ConfigError
from relay.store.dispatch_path.store import DispatchStore
from relay.testing import InMemoryPublisher, InMemoryStore


def _settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'outbox.sqlite3'}", source="/shop/orders")


def test_every_dispatch_store_built_from_settings_carries_the_source(tmp_path: Path) -> None:
    """The store of ``Dispatcher.from_settings``, of the per-database runtime (every runner's)
    and of ``DispatchStore.from_settings`` all name ``RELAY_SOURCE``."""
    s = _settings(tmp_path)
    stores = [DispatchStore.from_settings(s), Dispatcher.from_settings(s).store]
    runtime = Runtime("default", s)
    stores.append(runtime.store())
    try:
        assert [getattr(store, "source", None) for store in stores] == ["/shop/orders"] * 3
    finally:
        runtime.close()
        for store in stores[:2]:
            store.dispose()


def test_the_in_memory_store_gives_each_row_an_event_id_and_its_source() -> None:
    """Claimed events of the shipped double carry a random event id and the store's source,
    as the database's do since migration 0010, so its messages look like the real ones."""
    store = InMemoryStore(clock=lambda: 0.0, source="/shop/orders")
    for n in range(3):
        store.add("shop.order", {"n": n})
    claimed = store.claim("w", 10, 30.0)
    ids = [e.event_id for e in claimed]
    assert len(set(ids)) == 3
    assert all(uuid.UUID(str(i)).version == 4 for i in ids)
    assert {e.source for e in claimed} == {"/shop/orders"}
    sent = InMemoryPublisher().publish(claimed)
    assert sent.confirmed == claimed


def test_a_listen_url_that_does_not_parse_is_refused_naming_its_variable() -> None:
    """A malformed ``RELAY_LISTEN_URL`` is a ConfigError that names it, not a traceback: in
    the runner's wake-up, and a failed check naming it in the doctor's wake-up check."""
    bad = "postgresql://u@h:notaport/db"
    settings = Settings(database_url="postgresql://u@h/db", listen_url=bad)
    with pytest.raises(ConfigError, match="RELAY_LISTEN_URL"):
        Runtime("default", settings).wake_watcher(lambda: None)
    check = doctor_pooler.wakeup(settings)
    assert (check.status, check.fix) == (FAIL, "correct RELAY_LISTEN_URL"), check
    assert "RELAY_LISTEN_URL" in check.detail
