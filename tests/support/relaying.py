"""A relay inside the test process: a dispatcher that is always closed, drained once or looped
in a thread (`relay dispatch --once|--loop` without a subprocess)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from relay.config import Settings
from relay.dispatch.dispatcher import Dispatcher, Report


@contextmanager
def dispatcher(settings: Settings) -> Iterator[Dispatcher]:
    """A dispatcher whose publisher connection and database engine are closed afterwards."""
    d = Dispatcher.from_settings(settings)
    try:
        yield d
    finally:
        d.close()
        d.publisher.close()
        d.store.dispose()


def drain(settings: Settings, budget_seconds: float = 120) -> Report:
    """Relay everything claimable now (`relay dispatch --once`)."""
    with dispatcher(settings) as d:
        return d.drain(budget_seconds=budget_seconds)


@contextmanager
def running(settings: Settings) -> Iterator[Dispatcher]:
    """`relay dispatch --loop` in a thread of this process, stopped at exit."""
    with dispatcher(settings) as d:
        stop = threading.Event()
        thread = threading.Thread(target=d.loop, args=(stop,), daemon=True)
        thread.start()
        try:
            yield d
        finally:
            stop.set()
            thread.join(30)
