"""Beat sleeping until each run is due: the scheduler of the relay's own app
(public as ``relay.celery.BeatScheduler``).

Celery beat wakes a little early for every run (:meth:`celery.beat.Scheduler.adjust` takes
10 ms off each sleep) and, when it finds the run not due yet, sleeps only if the time left less
that margin is positive: through the last 10 ms before each run it loops without sleeping,
about 30 passes of its scheduler a run. Once a second (the relay's tick) that loop cost beat
about 0.8% of a core on an idle fleet, more than the rest of the fleet's idle work
(docs/running.md, "What wakes an idle relay"). BeatScheduler is Celery's default
``PersistentScheduler`` without that margin: beat sleeps the time left, then runs the entry.

The relay's own app (``celery -A relay beat``, :func:`relay.celery.create_app`) uses it
(``beat_scheduler``); an app of your own opts in with
``beat_scheduler = "relay.celery:BeatScheduler"`` or ``celery beat -S
relay.celery:BeatScheduler``. Nothing of it is written to beat's schedule file: the entries
stay Celery's own, so an earlier release's beat reads the file as before.
"""

from __future__ import annotations

from typing import Any

from celery.beat import PersistentScheduler

#: The ``beat_scheduler`` setting that names :class:`BeatScheduler`.
NAME = "relay.celery:BeatScheduler"


class BeatScheduler(PersistentScheduler):
    """``PersistentScheduler`` that sleeps until a run is due instead of 10 ms less."""

    def adjust(self, n: Any, drift: float = 0.0) -> Any:
        """The time left until a run, as it is: no early wake to loop through."""
        return n
