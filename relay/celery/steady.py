"""The interval of the relay's beat entries, without beat's busy wait before each run.

Celery beat wakes each entry's run a little early (:meth:`celery.beat.Scheduler.adjust` takes
10 ms off every sleep) and, when it finds the entry not due yet, sleeps only if the time left
less that margin is positive: for the last 10 ms before each run it loops without sleeping.
Once a second (the tick) that loop cost beat about 0.8% of a core on an idle fleet, more than
everything else the fleet does when there is nothing to send (measured beside a plain Celery
``schedule``: docs/performance.md). :class:`Steady` gives beat, for an entry that is not due,
the time left plus that margin, so beat sleeps until the run is due, and runs it then.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery.beat import Scheduler
from celery.schedules import schedstate, schedule

#: How early beat wakes for a run (the ``drift`` default of ``Scheduler.adjust``: -0.01 s).
EARLY_SECONDS = -float((Scheduler.adjust.__defaults__ or (0.0,))[0])


class Steady(schedule):
    """A Celery ``schedule`` every ``run_every``, that beat sleeps through until each run."""

    def is_due(self, last_run_at: Any) -> schedstate:
        due, remaining = super().is_due(last_run_at)
        if not due and remaining > 0:
            remaining += EARLY_SECONDS
        return schedstate(is_due=due, next=remaining)


def every(seconds: float) -> Steady:
    """A :class:`Steady` schedule of ``seconds``."""
    return Steady(timedelta(seconds=seconds))
