"""PromptAcks on Kombu's real event loop (no broker): a callback queued by a callback, as Celery
queues a solo task's ack, runs before the loop waits for its next timer."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import pytest
from kombu.asynchronous import Hub

from relay.celery import PromptAcks

#: The hub's next timer: without PromptAcks it waits this long with the callback queued.
TIMER_SECONDS = 0.5


@pytest.fixture
def hub() -> Iterator[Hub]:
    """A hub watching one idle socket (a broker connection with nothing to say) and a timer
    ``TIMER_SECONDS`` away."""
    hub = Hub()
    quiet, other = socket.socketpair()
    hub.add_reader(quiet, lambda: None)
    hub.call_later(TIMER_SECONDS, lambda: None)
    yield hub
    hub.close()
    quiet.close()
    other.close()


def _queued_from_a_callback_runs_after(hub: Hub, wire: Callable[[Hub], None]) -> float:
    """Seconds between a callback queuing another (from the loop, like an ack queued by a task
    that ran in a callback) and that one running."""
    wire(hub)
    ran: list[float] = []
    queued_at: list[float] = []

    def task() -> None:
        queued_at.append(time.monotonic())
        hub.call_soon(lambda: ran.append(time.monotonic()))

    hub.call_soon(task)
    loop = hub.create_loop()
    deadline = time.monotonic() + TIMER_SECONDS * 5
    while not ran and time.monotonic() < deadline:
        next(loop)
    assert ran, "the queued callback never ran"
    return ran[0] - queued_at[0]


def test_kombu_waits_for_its_timer_with_a_callback_queued(hub: Hub) -> None:
    """The behaviour PromptAcks exists for (celery#7718): Kombu's loop waits on its sockets
    until its next timer although a callback is due. When this fails, Kombu no longer does, and
    PromptAcks can go."""
    assert _queued_from_a_callback_runs_after(hub, lambda hub: None) > TIMER_SECONDS * 0.8


def test_with_prompt_acks_a_queued_callback_runs_at_once(hub: Hub) -> None:
    """With PromptAcks on the loop's tick, the same callback runs within milliseconds, not at
    the timer."""

    def wire(hub: Hub) -> None:
        hub.on_tick.add(PromptAcks(hub).before_wait)

    assert _queued_from_a_callback_runs_after(hub, wire) < TIMER_SECONDS / 5


def test_prompt_acks_watches_its_pipe_again_after_the_hub_is_reset(hub: Hub) -> None:
    """A reconnect resets the hub (its readers are dropped): PromptAcks registers its pipe again
    on the next pass and still cuts the wait short."""
    prompt = PromptAcks(hub)
    hub.on_tick.add(prompt.before_wait)
    assert _queued_from_a_callback_runs_after(hub, lambda hub: None) < TIMER_SECONDS / 5
    hub.reset()
    assert prompt.read_fd not in hub.readers
    quiet, other = socket.socketpair()
    try:
        hub.add_reader(quiet, lambda: None)
        hub.call_later(TIMER_SECONDS, lambda: None)
        assert _queued_from_a_callback_runs_after(hub, lambda hub: None) < TIMER_SECONDS / 5
    finally:
        quiet.close()
        other.close()
