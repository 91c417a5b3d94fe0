"""Where one relay process spends a dispatch cycle: claim, message building, publish with
confirms, recording outcomes. In-process ``Dispatcher.drain`` with timers around each phase."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from bench import fixtures, rows
from relay import message
from relay.config import Settings
from relay.dispatcher import Dispatcher


def _timed(spent: dict[str, float], name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - start

    return wrapper


def one_batch_size(url: str, route: fixtures.Route, count: int, batch: int) -> dict[str, Any]:
    """Drain ``count`` rows in batches of ``batch``; milliseconds per batch, by phase."""
    engine = sa.create_engine(url)
    settings = Settings(
        database_url=url, broker_url=route.url, exchange=route.exchange_name, batch_size=batch
    )
    dispatcher = Dispatcher.from_settings(settings)
    store, publisher = dispatcher.store, dispatcher.publisher
    spent: dict[str, float] = defaultdict(float)
    build = message.build
    try:
        rows.insert_pending(engine, batch)
        dispatcher.drain(budget_seconds=60)  # connect and warm up outside the clock
        store.claim = _timed(spent, "claim", store.claim)  # type: ignore[method-assign]
        store.complete = _timed(spent, "record outcomes", store.complete)  # type: ignore[method-assign]
        publisher.publish = _timed(spent, "publish + confirms", publisher.publish)  # type: ignore[method-assign]
        message.build = _timed(spent, "message.build (inside publish)", build)
        rows.insert_pending(engine, count)
        start = time.perf_counter()
        report = dispatcher.drain(budget_seconds=600)
        elapsed = time.perf_counter() - start
    finally:
        message.build = build
        publisher.close()
        store.dispose()
        engine.dispose()
        route.purge()
    cycles = max(1, report.cycles)
    per_batch = {k: v * 1000 / cycles for k, v in spent.items()}
    per_batch["cycle total"] = elapsed * 1000 / cycles
    return {
        "batch_size": batch,
        "rows": count,
        "rate": report.sent / elapsed,
        "ms_per_batch": per_batch,
    }


def run(amqp_url: str, count: int, batches: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with fixtures.database("phases") as url, fixtures.route(amqp_url, "phases") as route:
        for batch in batches:
            out[f"b{batch}"] = one_batch_size(url, route, count, batch)
    return out
