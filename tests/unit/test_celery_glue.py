"""The Celery glue without a broker: fan-out rule, app discovery, install() on an existing app."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from celery import Celery

from relay.celery import install
from relay.celery.names import CLAIM_AND_DISPATCH, PURGE_INBOX, PURGE_SENT, TICK
from relay.celery.relay_app import fanout
from relay.config import Settings
from relay.exceptions import ConfigError
from relay.produce import enqueue as producer


@pytest.mark.parametrize(
    ("backlog", "batch", "cap", "extra"),
    [
        (0, 100, 8, 0),  # idle: the tick's own claim was all
        (1, 100, 8, 1),
        (100, 100, 8, 1),
        (101, 100, 8, 2),
        (700, 100, 8, 7),
        (800, 100, 8, 7),  # capped: the tick itself is the eighth
        (10_000, 100, 1, 0),
    ],
)
def test_fanout_sends_one_task_per_waiting_batch_up_to_the_cap(
    backlog: int, batch: int, cap: int, extra: int
) -> None:
    """A tick adds one claim_and_dispatch per batch still claimable, at most max_fanout - 1."""
    assert fanout(backlog, batch, cap) == extra


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("RELAY_QUEUE", " "),
        ("RELAY_QUEUE", "q" * 256),  # over AMQP's 255 bytes (a queue set alone never collides)
        ("RELAY_MAX_FANOUT", 0),
        ("RELAY_RETENTION_SECONDS", -1.0),
        ("RELAY_PURGE_INTERVAL_SECONDS", 0.0),
    ],
)
def test_fleet_settings_refuse_bad_values_naming_the_variable(var: str, value: object) -> None:
    """Each fleet setting refuses a bad value at start-up, naming its variable."""
    with pytest.raises(ConfigError, match=var):
        Settings(**{var.removeprefix("RELAY_").lower(): value})  # type: ignore[arg-type]  # one field per case


def test_celery_dash_a_relay_finds_the_app_in_relay_celery() -> None:
    """`celery -A relay` resolves to relay.celery:app though `import relay` loads no Celery."""
    code = (
        "import sys, relay; assert 'celery' not in sys.modules\n"
        "from celery.app.utils import find_app\n"
        "app = find_app('relay'); import relay.celery as rc; assert app is rc.app\n"
        "print(sorted(t for t in app.tasks if t.startswith('relay.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [f"['{CLAIM_AND_DISPATCH}',", f"'{PURGE_SENT}',", f"'{TICK}']"]


def test_install_adds_tasks_and_beat_entries_to_an_existing_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """install() registers the three tasks and two beat entries beside the app's own schedule,
    every relay message names RELAY_QUEUE, and relay.enqueue's wake-up is wired."""
    monkeypatch.setattr(producer.configure(), "wake", None)
    app = Celery("theirs")
    app.conf.beat_schedule = {"their.report": {"task": "their.report", "schedule": 60.0}}
    install(app, Settings(queue="outbox-relay", tick_seconds=2, purge_interval_seconds=600))
    assert {CLAIM_AND_DISPATCH, TICK, PURGE_SENT} <= set(app.tasks)
    schedule = app.conf.beat_schedule
    assert set(schedule) == {"their.report", TICK, PURGE_SENT}
    assert schedule[TICK]["schedule"] == 2
    assert schedule[TICK]["options"] == {"expires": 2, "queue": "outbox-relay"}
    assert schedule[PURGE_SENT]["options"]["queue"] == "outbox-relay"
    assert producer.configure().wake is not None


def test_install_leaves_other_apps_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks installed on one app, bound to its settings, never appear on another app."""
    monkeypatch.setattr(producer.configure(), "wake", None)
    install(Celery("first"), Settings(queue="first-relay"))
    other = Celery("second")
    other.finalize()
    assert not {CLAIM_AND_DISPATCH, TICK, PURGE_SENT} & set(other.tasks)


def test_task_names_stay_the_wire_contract() -> None:
    """The relay's task names never change: messages already in a queue carry them."""
    assert (CLAIM_AND_DISPATCH, TICK, PURGE_SENT, PURGE_INBOX) == (
        "relay.claim_and_dispatch",
        "relay.tick",
        "relay.purge_sent",
        "relay.purge_inbox",
    )


def test_beat_watches_the_only_database_of_a_one_entry_list(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``RELAY_DATABASES`` naming one database: beat's watcher looks at that database, not at
    ``RELAY_DATABASE_URL``'s embedded default (it did, before the fleet was read at the door)."""
    from relay.celery.wakeup import watch_in_beat
    from relay.config.databases import Fleet
    from relay.dispatch.runtime import Runtime

    watched: list[tuple[str, str]] = []
    monkeypatch.setattr(
        Runtime, "watcher", lambda rt, _: watched.append((rt.name, rt.settings.database_url))
    )
    url = f"sqlite:///{tmp_path / 'orders.sqlite3'}"
    watch_in_beat(Celery("one"), Fleet.from_settings(Settings(databases=f"orders={url}")))()
    assert watched == [("orders", url)]
