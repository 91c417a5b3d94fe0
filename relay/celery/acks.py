"""A worker's acknowledgements, sent as soon as its task has run (:class:`PromptAcks`)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

from celery import Celery

log = logging.getLogger(__name__)


class PromptAcks:
    """Keeps a worker's event loop from sleeping while it has callbacks due, so a task's
    acknowledgement leaves as soon as the task has run.

    Kombu's hub runs the callbacks queued with ``call_soon`` at the top of each pass, then
    waits on its sockets until its next timer (up to 10 s). Celery queues every ack that way,
    and the solo pool runs the task inside a hub callback: an ack queued there waits for the
    next pass, after that wait. Once a worker has run every task of its prefetch window, the
    broker may send it nothing more (RabbitMQ holds that window; Redis's transport keeps it in
    the worker), nothing wakes the wait, and the worker idles for seconds with wake-ups queued
    and rows waiting (the Celery-runner stalls of issue 16; celery#7718).

    Just before the wait (the hub's ``on_tick``), when callbacks are due, one byte written to
    a pipe the hub also watches makes the wait return at once; the hub then runs them as usual.
    """

    def __init__(self, hub: Any) -> None:
        self.hub = hub
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)
        #: Waits cut short so far.
        self.woken = 0

    def before_wait(self) -> None:
        if self.read_fd not in self.hub.readers:  # first pass, or the hub was reset (reconnect)
            self.hub.add_reader(self.read_fd, self._drain)
        # ``_ready`` (the queued callbacks) has no public accessor; Kombu 5.x keeps this name.
        if self.hub._ready:
            with contextlib.suppress(BlockingIOError):  # already full: the wait returns anyway
                os.write(self.write_fd, b"\0")
            self.woken += 1

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.read_fd, 4096)

    @classmethod
    def on_worker_ready(cls, app: Celery) -> Callable[..., None]:
        """The ``worker_ready`` handler that wires this into ``app``'s worker's event loop
        (none under gevent or eventlet, where Celery sends acks at once)."""

        def wire(sender: Any = None, **_: Any) -> None:
            hub = getattr(sender, "hub", None)
            if getattr(sender, "app", app) is not app or hub is None:
                return
            if not hasattr(hub, "_ready"):
                log.warning("unknown Kombu event loop: a solo worker's acks may wait up to 10s")
                return
            hub.on_tick.add(cls(hub).before_wait)

        return wire


__all__ = ["PromptAcks"]
