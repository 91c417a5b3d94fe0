"""The one lifecycle of the relay's background threads (relay.threads): named daemon threads,
a stop that is idempotent and bounded, and a failure that reaches the log."""

from __future__ import annotations

import gc
import logging
import threading
import time
import weakref

import pytest

from relay.threads import Background, Stop


class Ticker(Background):
    """Counts its steps, one every ``every`` seconds, until stopped."""

    def __init__(self, every: float = 0.01) -> None:
        super().__init__("relay-test-ticker", self._run)
        self.every = every
        self.steps = 0

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.steps += 1


@pytest.mark.timeout(10)
def test_a_started_thread_is_a_named_daemon_and_stop_ends_it() -> None:
    """start() returns the object, its thread carries the given name and is a daemon (it never
    holds the process up); stop() waits for it to end."""
    ticker = Ticker().start()
    names = {t.name: t for t in threading.enumerate()}
    assert names["relay-test-ticker"].daemon
    while ticker.steps < 2:
        time.sleep(0.005)
    ticker.stop()
    assert "relay-test-ticker" not in {t.name for t in threading.enumerate()}


@pytest.mark.timeout(10)
def test_stop_is_idempotent_and_harmless_before_start() -> None:
    """stop() before start() waits for nothing, and a second stop() does nothing more."""
    ticker = Ticker()
    ticker.stop()
    ticker.stop()
    started = Ticker().start()
    started.stop()
    started.stop()


@pytest.mark.timeout(10)
def test_stop_waits_no_longer_than_its_timeout() -> None:
    """A loop that ignores its stop flag holds stop(timeout) for that timeout, no more."""
    release = threading.Event()
    stuck = Background("relay-test-stuck", lambda: release.wait(5)).start()
    t0 = time.monotonic()
    stuck.stop(0.2)
    assert 0.15 <= time.monotonic() - t0 < 2
    release.set()
    stuck.stop()


@pytest.mark.timeout(10)
def test_stop_from_the_thread_itself_does_not_wait_for_itself() -> None:
    """A loop that stops its own object ends instead of joining itself (a RuntimeError)."""
    done = threading.Event()

    class SelfStopping(Background):
        def __init__(self) -> None:
            super().__init__("relay-test-self", self._run)

        def _run(self) -> None:
            self.stop()
            done.set()

    SelfStopping().start()
    assert done.wait(5)


@pytest.mark.timeout(10)
def test_an_unexpected_error_is_logged_with_the_thread_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An exception escaping the loop ends the thread and is logged (with its traceback) under
    the thread's name, not left to threading.excepthook's stderr."""

    def fail() -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="relay.threads"):
        thread = Background("relay-test-failing", fail).start()
        thread.stop()
    [record] = caplog.records
    assert record.getMessage() == "relay-test-failing ended on an unexpected error"
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ValueError)


@pytest.mark.timeout(10)
def test_the_stop_flag_wakes_a_waiter_and_survives_concurrent_sets() -> None:
    """Stop.wait returns True as soon as the flag is set, at once once set, False on timeout;
    many threads setting it together raise nothing."""
    flag = Stop()
    assert flag.wait(0.01) is False
    assert flag.wait(0) is False
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(flag.wait(5)))
    waiter.start()
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def set_together() -> None:
        barrier.wait()
        try:
            flag.set()
        except BaseException as exc:  # collected: the assertion below names it
            errors.append(exc)

    setters = [threading.Thread(target=set_together) for _ in range(8)]
    for t in setters:
        t.start()
    for t in [*setters, waiter]:
        t.join(5)
    assert errors == []
    assert woke == [True]
    assert flag.is_set()
    assert flag.wait(1) is True


def test_a_finished_background_thread_holds_nothing_without_the_collector() -> None:
    """Once its thread ended, a Background (here a subclass whose loop is its own bound method,
    as the lease keeper's is) is freed by reference counting alone, and with it what it holds:
    a lease keeper kept alive until the next collection held its batch of events, which put the
    large-events run's peak RSS past its bound (194 MiB against 122)."""

    class Holder(Background):
        def __init__(self) -> None:
            self.payload = bytearray(1024)
            super().__init__("relay-test-holder", self._loop)

        def _loop(self) -> None:
            self._stop.wait(5)

    gc.disable()
    try:
        holder = Holder().start()
        holder.stop(5)
        gone = weakref.ref(holder)
        del holder
        assert gone() is None
    finally:
        gc.enable()
