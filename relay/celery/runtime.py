"""One worker process's dispatcher, as the relay's tasks reach it."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from relay.config import Settings
from relay.dispatch.dispatcher import Dispatcher
from relay.retention.purger import Purger
from relay.runners import loop as runner
from relay.store.dispatch_path.store import DispatchStore
from relay.store.operations.retention import RetentionStore
from relay.store.operations.store import OperationsStore


class Runtime:
    """One worker process's dispatcher: built on first use after fork, closed at shutdown."""

    def __init__(self, settings: Settings, *, one_connection: bool = False) -> None:
        self.settings = settings
        #: Over several databases: an engine of one connection, given back after each task
        #: (:meth:`release`), so that a worker process holds none for a database it is not
        #: relaying (docs/many-databases.md, "The connection budget").
        self.one_connection = one_connection
        self._users = 0
        self._lock = threading.Lock()
        #: Set by a warm shutdown: drains stop after the batch in flight.
        self.stopping = threading.Event()
        self._dispatcher: Dispatcher | None = None
        self._store: DispatchStore | None = None
        self._operations: OperationsStore | None = None
        self._pid = 0

    def dispatcher(self) -> Dispatcher:
        if self._pid != os.getpid():
            self.forget()
        if self._dispatcher is None:
            pool = {"pool_size": 1, "max_overflow": 0} if self.one_connection else {}
            self._store = DispatchStore.from_settings(self.settings, **pool)
            self._dispatcher = runner.dispatcher(self.settings, self._store)
            self._pid = os.getpid()
        return self._dispatcher

    def store(self) -> DispatchStore:
        """The dispatcher's store, for the tick's backlog."""
        self.dispatcher()
        assert self._store is not None  # built with the dispatcher
        return self._store

    def operations(self) -> OperationsStore:
        """The operator's verbs (heartbeat, retention) on the dispatcher's engine."""
        store = self.store()  # first: after a fork it drops the parent's stores
        if self._operations is None:
            self._operations = OperationsStore(store.engine)
        return self._operations

    def purger(self) -> Purger:
        """The retention purger on the dispatcher's engine, leasing as this worker."""
        relay = self.dispatcher()
        store = RetentionStore(self.store().engine)
        return Purger(store, self.settings.retention_seconds, relay.worker_id)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Around each use (a drain, a count, a purge): over several databases, when the last
        use in this process ends, close this database's connection (and the drain's database
        thread); the dispatcher, its breaker and its retries stay. Counted, because a tick's
        count that outlived its wait may still run beside the next task's drain."""
        with self._lock:
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                last = self._users == 0
            if last and self.one_connection and self._pid == os.getpid():
                if self._dispatcher is not None:
                    self._dispatcher.close()
                if self._store is not None:
                    self._store.engine.dispose()

    def forget(self, *_: Any, **__: Any) -> None:
        """After fork: drop what the parent built without closing it (its sockets are shared)."""
        if self._store is not None:
            self._store.engine.dispose(close=False)
        self._dispatcher, self._store, self._operations, self._pid = None, None, None, 0
        self.stopping.clear()

    def stop(self, *_: Any, **__: Any) -> None:
        self.stopping.set()

    def close(self, *_: Any, **__: Any) -> None:
        dispatcher, self._dispatcher = self._dispatcher, None
        self._store = self._operations = None
        if dispatcher is not None and self._pid == os.getpid():
            runner.shutdown(dispatcher)
