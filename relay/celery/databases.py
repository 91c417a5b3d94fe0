"""The Celery fleet over several outbox databases (``RELAY_DATABASES``): one
:class:`~relay.celery.runtime.Runtime` per database in each worker process (each on one
connection, given back after each task), and the tick that shares the fan-out between them.

A fleet tick does no claim of its own: it counts each database's claimable rows (a bounded
count, the databases asked in parallel so one that is down costs only its own timeout) and
sends ``claim_and_dispatch(source=NAME)`` tasks as :func:`relay.policy.share_fanout` deals
them: every database with work gets one before any gets a second, ``RELAY_MAX_FANOUT`` in all.
A database's drain in such a fleet stops after one tick (:func:`drain_budget`), so a worker
process held by the busy database is free again for the next tick's tasks, which reach the
queue interleaved.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from relay.celery.names import TICK
from relay.celery.runtime import Runtime
from relay.config import Settings
from relay.config.databases import each, several
from relay.policy import share_fanout

log = logging.getLogger(__name__)


class Runtimes:
    """Each configured database's :class:`Runtime` in this worker process, by name."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.several = several(settings)
        self.by_name = {name: Runtime(s, one_connection=self.several) for name, s in each(settings)}
        self._turns = itertools.count()

    def __iter__(self) -> Iterator[tuple[str, Runtime]]:
        return iter(self.by_name.items())

    def get(self, source: str | None) -> Runtime:
        """The named database's runtime; None: the only (or first) one."""
        if source is None:
            return next(iter(self.by_name.values()))
        try:
            return self.by_name[source]
        except KeyError:
            raise LookupError(f"relay task for unknown database {source!r}") from None

    def chosen(self, source: str | None) -> list[Runtime]:
        """What one ``claim_and_dispatch(source)`` drains: the named database, or with none
        named (a wake-up after an ``enqueue`` commit, which does not know its database) each
        database in turn."""
        if source is None and self.several:
            return list(self.by_name.values())
        return [self.get(source)]

    def turn(self) -> int:
        """This process's tick count, rotating who goes first when tasks are short."""
        return next(self._turns)

    # Signal handlers: each database's runtime follows the worker's process life.
    def forget(self, *args: Any, **kwargs: Any) -> None:
        for rt in self.by_name.values():
            rt.forget(*args, **kwargs)

    def stop(self, *args: Any, **kwargs: Any) -> None:
        for rt in self.by_name.values():
            rt.stop(*args, **kwargs)

    def close(self, *args: Any, **kwargs: Any) -> None:
        for rt in self.by_name.values():
            rt.close(*args, **kwargs)


def drain_budget(settings: Settings, runtimes: Runtimes) -> float | None:
    """A drain's budget: one tick when several databases share the workers (None: the
    lease-derived default of one database)."""
    if not runtimes.several:
        return None
    return min(settings.drain_budget_seconds, max(settings.tick_seconds, 0.5))


def backlogs(runtimes: Runtimes, limit: int, timeout: float) -> dict[str, int]:
    """Each database's claimable rows, counted up to ``limit``, asked in parallel; a database
    that fails or does not answer within ``timeout`` counts as one row, so it still gets a
    task whose own claim reports (and retries) its outage."""
    found: dict[str, int] = {}
    # At most RELAY_MAX_CONNECTIONS at once, each given back after its count.
    most = min(len(runtimes.by_name), runtimes.settings.max_connections)
    pool = ThreadPoolExecutor(max_workers=most, thread_name_prefix="relay-count")
    try:
        asked = {pool.submit(_beat_and_count, rt, limit): name for name, rt in runtimes}
        done, _ = wait(asked, timeout=timeout)
        for future, name in asked.items():
            try:
                found[name] = future.result(timeout=0) if future in done else 1
            except Exception as exc:
                log.warning("relay tick: backlog of database %r unknown: %s", name, exc)
                found[name] = 1
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return found


def _beat_and_count(runtime: Runtime, limit: int) -> int:
    with runtime.held():
        runtime.operations().beat(TICK)  # `relay doctor --source NAME`: when beat last ticked
        return runtime.store().backlog(limit)


def fleet_tick(
    settings: Settings, runtimes: Runtimes, send: Callable[[str], None]
) -> dict[str, int]:
    """One tick of a fleet over several databases: count, share, send; the tasks per name."""
    s = settings
    counts = backlogs(runtimes, s.batch_size * s.max_fanout, timeout=max(0.2, s.tick_seconds / 2))
    sends = share_fanout(counts, s.batch_size, s.max_fanout, turn=runtimes.turn())
    for name in sends:
        send(name)
    return {name: sends.count(name) for name in counts}
