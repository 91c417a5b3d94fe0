"""Beat's scheduler for the relay's app (relay.celery.steady): beat sleeps until each run
instead of looping through the last 10 ms before it, and its schedule file stays Celery's."""

from __future__ import annotations

import shelve
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, beat
from celery.apps.beat import Beat
from kombu.utils.imports import symbol_by_name

from relay.celery import celery_config, steady
from relay.config import Settings

#: The interval of the beat loop tested, seconds, and how many runs it waits for.
INTERVAL = 0.2
RUNS = 5


def _beat_loop(scheduler: type[beat.Scheduler], tmp_path: Path) -> dict[str, int]:
    """A real beat loop (in-memory broker) over one entry every INTERVAL, for RUNS runs: how
    many runs it sent and how many times it asked its scheduler."""
    app = Celery("steady-test", broker="memory://")
    app.conf.beat_schedule = {"t": {"task": "t", "schedule": INTERVAL}}
    counts = {"ticks": 0, "sent": 0}

    class Counting(scheduler):  # type: ignore[valid-type,misc]
        def tick(self, *args: Any, **kwargs: Any) -> float:
            counts["ticks"] += 1
            return float(super().tick(*args, **kwargs))

        def apply_async(self, *args: Any, **kwargs: Any) -> None:
            counts["sent"] += 1

    service = beat.Service(app, scheduler_cls=Counting, schedule_filename=str(tmp_path / "s"))
    runner = threading.Thread(target=service.start, daemon=True)
    runner.start()
    time.sleep(INTERVAL * RUNS + INTERVAL / 2)
    service.stop()
    runner.join(5)
    return counts


def test_beat_asks_its_scheduler_a_few_times_a_run_not_once_a_spin(tmp_path: Path) -> None:
    """Each run is sent, and the scheduler is asked about twice per run (Celery's own
    PersistentScheduler: once every pass of a busy loop through the last 10 ms, hundreds of
    times in this test on the machine it was written on)."""
    counts = _beat_loop(steady.BeatScheduler, tmp_path)
    assert counts["sent"] >= RUNS - 1, counts
    assert counts["ticks"] <= 3 * counts["sent"] + 2, counts


def test_the_schedule_file_holds_only_celerys_own_classes(tmp_path: Path) -> None:
    """A beat of an earlier release (or plain Celery) reads the file this one wrote."""
    app = Celery("steady-file", broker="memory://")
    app.conf.beat_schedule = {"t": {"task": "t", "schedule": 1.0}}
    scheduler = steady.BeatScheduler(app=app, schedule_filename=str(tmp_path / "s"))
    scheduler.sync()
    scheduler.close()
    with shelve.open(str(tmp_path / "s")) as stored:  # noqa: S301 (a file of our own)
        entries = stored["entries"]
    assert type(entries["t"].schedule).__module__ == "celery.schedules"
    plain = beat.PersistentScheduler(app=app, schedule_filename=str(tmp_path / "s"))
    assert plain.schedule["t"].schedule.seconds == pytest.approx(1.0)
    plain.close()


def test_the_relays_own_app_runs_beat_on_it() -> None:
    """``celery -A relay beat`` (celery.apps.beat.Beat) takes the app's ``beat_scheduler``."""
    app = Celery("named", broker="memory://")
    app.conf.update(celery_config(Settings()))
    assert symbol_by_name(Beat(app=app).scheduler_cls) is steady.BeatScheduler
