"""The relay's beat entries (relay.celery.steady): beat sleeps until each run instead of looping
through the last 10 ms before it, and the entries survive beat's schedule file."""

from __future__ import annotations

import pickle
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Celery, beat

from relay.celery import steady

#: The interval of the beat test, seconds, and how many runs it waits for.
INTERVAL = 0.2
RUNS = 5


def test_an_entry_not_due_yet_is_slept_through_to_its_run() -> None:
    """Beat takes EARLY_SECONDS off every sleep; the entry gives it back, so what beat sleeps
    is the time left, where a plain schedule's would be 10 ms short of it."""
    every = steady.every(1.0)
    now = every.now()
    due, remaining = every.is_due(now - timedelta(seconds=0.4))
    assert not due
    slept = beat.Scheduler.adjust(None, remaining)  # type: ignore[arg-type]
    assert 0.55 < slept <= 0.6 + 1e-3, slept
    # Within the last 10 ms, where a plain schedule leaves beat nothing to sleep (it loops),
    # beat still sleeps until the run.
    due, remaining = every.is_due(now - timedelta(seconds=0.995))
    assert not due
    assert beat.Scheduler.adjust(None, remaining) > 0  # type: ignore[arg-type]


def test_a_due_entry_runs_and_names_its_next_interval() -> None:
    every = steady.every(1.0)
    due, nxt = every.is_due(datetime.now(UTC) - timedelta(seconds=2))
    assert due
    assert nxt == 1.0


def test_the_entry_survives_the_schedule_file() -> None:
    """PersistentScheduler keeps entries in a shelve: a Steady comes back a Steady."""
    back = pickle.loads(pickle.dumps(steady.every(2.5)))  # noqa: S301 (our own bytes)
    assert isinstance(back, steady.Steady)
    assert back == steady.every(2.5)


def test_beat_ticks_a_few_times_a_run_not_once_a_spin() -> None:
    """A real beat loop (in-memory broker): each run is sent, and beat's scheduler is asked
    about three times per run at most (a plain schedule: once every pass of a busy loop
    through the last 10 ms, about 30 times a run on this machine)."""
    app = Celery("steady-test", broker="memory://")
    app.conf.beat_schedule = {"t": {"task": "t", "schedule": steady.every(INTERVAL)}}
    counts = {"ticks": 0, "sent": 0}

    class Counting(beat.Scheduler):  # type: ignore[misc]
        def tick(self, *args: Any, **kwargs: Any) -> float:
            counts["ticks"] += 1
            return float(super().tick(*args, **kwargs))

        def apply_async(self, *args: Any, **kwargs: Any) -> None:
            counts["sent"] += 1

    service = beat.Service(app, scheduler_cls=Counting)
    runner = threading.Thread(target=service.start, daemon=True)
    runner.start()
    time.sleep(INTERVAL * RUNS + INTERVAL / 2)
    service.stop()
    runner.join(5)
    assert counts["sent"] >= RUNS - 1, counts
    assert counts["ticks"] <= 3 * counts["sent"] + 2, counts
