"""relay.aio writes in the caller's asyncio transaction on every async driver: commit, rollback,
keyed order, the after-commit wake-up, and an event loop that is never blocked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

import relay
import relay.aio
from relay.exceptions import EventError
from relay.produce.enqueue import default
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine
from tests.support import databases
from tests.support.rows import rows
from tests.support.windows import within_two

pytestmark = pytest.mark.timeout(120)

#: (backend, async driver) pairs: every driver relay.aio supports.
DRIVERS = [
    ("postgresql", "postgresql+asyncpg"),
    ("postgresql", "postgresql+psycopg_async"),
    ("mysql", "mysql+asyncmy"),
    ("sqlite", "sqlite+aiosqlite"),
]
#: Longest the event loop may be late on a 1 ms ticker while enqueues run (a loaded 2-core CI
#: machine: a blocked loop shows as the length of a whole statement or commit, or more).
LATENESS_BOUND_SECONDS = 0.05


@pytest.fixture(params=DRIVERS, ids=[d for _, d in DRIVERS])
def urls(
    request: pytest.FixtureRequest, backend_pool: databases.BackendPool
) -> Iterator[tuple[str, str]]:
    """A fresh migrated database: (sync URL, the same database through the async driver)."""
    backend, driver = request.param
    with backend_pool.database(backend) as url:
        async_url = sa.make_url(url).set(drivername=driver).render_as_string(False)
        yield url, async_url


@pytest.fixture
def sync_engine(urls: tuple[str, str]) -> Iterator[sa.Engine]:
    engine = create_engine(urls[0])
    yield engine
    engine.dispose()


def run(urls: tuple[str, str], body: Callable[[AsyncEngine], Awaitable[Any]]) -> Any:
    """Run ``body`` with an async engine on the test database, disposed afterwards."""

    async def main() -> Any:
        engine = create_async_engine(urls[1])
        try:
            return await body(engine)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def test_commit_writes_and_rollback_leaves_nothing(
    urls: tuple[str, str], sync_engine: sa.Engine
) -> None:
    """An AsyncSession's and an AsyncConnection's commit keep their events; a rollback keeps
    none."""

    async def body(engine: AsyncEngine) -> list[int]:
        async with AsyncSession(engine) as session, session.begin():
            first = await relay.aio.enqueue(session, "order.created", {"id": 1}, headers={"t": "a"})
        async with engine.begin() as conn:
            second = await relay.aio.enqueue(conn, "order.paid", [1, 2], delay=0.0)
        async with AsyncSession(engine) as session:
            await session.begin()
            await relay.aio.enqueue(session, "order.lost", {})
            await session.rollback()
        async with engine.connect() as conn:
            await conn.begin()
            await relay.aio.enqueue(conn, "order.lost", {})
            await conn.rollback()
        return [first, second]

    first, second = run(urls, body)
    found = rows(sync_engine)
    assert sorted(found) == [first, second]
    assert (found[first]["payload"], found[first]["headers"]) == ({"id": 1}, {"t": "a"})
    assert (found[second]["event_type"], found[second]["payload"]) == ("order.paid", [1, 2])


def test_bad_event_and_wrong_target_are_refused_before_anything_is_written(
    urls: tuple[str, str], sync_engine: sa.Engine
) -> None:
    """The core's checks run before any await: EventError naming the field, no row; a
    connection without a transaction and a sync Session are refused by name."""

    async def body(engine: AsyncEngine) -> None:
        async with AsyncSession(engine) as session, session.begin():
            with pytest.raises(EventError, match="ordering_key"):
                await relay.aio.enqueue(session, "t", {}, ordering_key="")
            with pytest.raises(EventError, match="payload"):
                await relay.aio.enqueue(session, "t", {"x": {1, 2}})
            with pytest.raises(EventError, match="delay"):
                await relay.aio.enqueue(session, "t", {}, delay=-1)
            with pytest.raises(EventError, match="ordering_keys"):
                await relay.aio.lock_keys(session, "abc")
        async with engine.connect() as conn:
            with pytest.raises(EventError, match="no transaction open"):
                await relay.aio.enqueue(conn, "t", {})
        with pytest.raises(EventError, match="AsyncSession or AsyncConnection"):
            await relay.aio.enqueue(sa.orm.Session(), "t", {})  # type: ignore[arg-type]

    run(urls, body)
    assert rows(sync_engine) == {}


def test_keyed_events_are_numbered_in_commit_order_while_the_first_stays_open(
    urls: tuple[str, str], sync_engine: sa.Engine
) -> None:
    """A keyed pair where the first transaction stays open: the second waits for it (it does
    not finish while the first is open), both commit, the first is number 1 and is claimed
    before the second; lock_keys over two keys takes its turn as well."""

    async def body(engine: AsyncEngine) -> tuple[int, int, bool]:
        async with AsyncSession(engine) as first:
            await first.begin()
            a = await relay.aio.enqueue(first, "k.first", {}, ordering_key="k")

            async def second() -> int:
                async with AsyncSession(engine) as session, session.begin():
                    await relay.aio.lock_keys(session, ["k", "other"])
                    return await relay.aio.enqueue(session, "k.second", {}, ordering_key="k")

            task = asyncio.ensure_future(second())
            done, _ = await asyncio.wait([task], timeout=0.5)
            waited = not done
            await first.commit()
        return a, await task, waited

    a, b, waited = run(urls, body)
    assert waited, "the second writer of key k did not wait for the first's transaction"
    found = rows(sync_engine)
    assert (found[a]["seq"], found[b]["seq"]) == (1, 2)
    claimed = DispatchStore(sync_engine).claim("w", 10, lease_seconds=60)
    assert [(e.event_type, e.seq) for e in sorted(claimed, key=lambda e: e.seq or 0)] == [
        ("k.first", 1),
        ("k.second", 2),
    ]


def test_wake_fires_once_after_each_commit_and_never_after_a_rollback(
    urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default producer's wake-up fires once per committed asyncio transaction, however
    many events it wrote, for an AsyncSession and an AsyncConnection alike."""
    wakes: list[float] = []
    monkeypatch.setattr(default(), "wake", lambda: wakes.append(time.monotonic()))

    async def body(engine: AsyncEngine) -> None:
        async with AsyncSession(engine) as session, session.begin():
            await relay.aio.enqueue(session, "t", {})
            await relay.aio.enqueue(session, "t", {})
        assert len(wakes) == 1  # a Session's after_commit runs before the block exits
        async with engine.begin() as conn:
            await relay.aio.enqueue(conn, "t", {})
        async with AsyncSession(engine) as session:
            await session.begin()
            await relay.aio.enqueue(session, "t", {})
            await session.rollback()
        deadline = time.monotonic() + 5
        while len(wakes) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the Connection's wake comes from the helper thread

    run(urls, body)
    assert len(wakes) == 2


def _run_delay() -> float:
    """Seconds this thread has waited on a run queue (Linux schedstat), 0 where unknown."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


async def worst_lateness(work: Awaitable[Any]) -> float:
    """Seconds a 1 ms ticker was late at worst while ``work`` ran, not counting the time the
    thread waited for a CPU (other processes on the shared cores), only a blocked loop's."""
    stop = asyncio.Event()
    worst = 0.0

    async def ticker() -> None:
        nonlocal worst
        while not stop.is_set():
            before, queued = time.perf_counter(), _run_delay()
            await asyncio.sleep(0.001)
            late = time.perf_counter() - before - 0.001
            worst = max(worst, late - (_run_delay() - queued))

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.005)  # the ticker runs before the work starts
    try:
        await work
    finally:
        stop.set()
        await tick
    return worst


def test_the_lateness_check_sees_a_blocked_loop() -> None:
    """The check can fail: a 100 ms blocking sleep in a coroutine shows as >= 80 ms."""

    async def blocking() -> None:
        await asyncio.sleep(0.002)
        time.sleep(0.1)

    assert asyncio.run(worst_lateness(blocking())) >= 0.08


# A lateness bound on the wall clock: a second test on the same 2 cores distorts it (214 ms
# seen beside one), so it runs in the serial phase (see the Makefile).
@pytest.mark.serial
def test_the_event_loop_is_never_blocked_while_enqueues_run(urls: tuple[str, str]) -> None:
    """A 1 ms ticker's worst lateness stays under 50 ms while 4 tasks commit 50 keyed and
    unkeyed enqueues each (a blocking call would stall it a whole statement or commit); the
    time the thread waited for a CPU is not counted."""

    async def body(engine: AsyncEngine) -> tuple[float, int]:
        async def writer(n: int) -> int:
            for i in range(50):
                async with AsyncSession(engine) as session, session.begin():
                    key = f"key-{(n + i) % 7}" if i % 2 else None
                    await relay.aio.enqueue(session, "t", {"n": n, "i": i}, ordering_key=key)
            return 50

        async with engine.connect():
            pass  # the pool's first connection (and the driver's imports) off the clock
        # The keys exist before the clock starts: InnoDB may pick a deadlock victim among
        # writers taking brand-new keys at the same moment (docs/producing.md), which is not
        # what this test measures.
        async with AsyncSession(engine) as session, session.begin():
            await relay.aio.lock_keys(session, [f"key-{k}" for k in range(7)])
        written: list[int] = []

        async def work() -> None:
            written.extend(await asyncio.gather(*(writer(n) for n in range(4))))

        return await worst_lateness(work()), sum(written)

    def measure(n: int) -> tuple[float, int]:
        worst, written = run(urls, body)
        print(
            f"\n{urls[1].split(':')[0]} window {n}: {written} enqueues, worst loop lateness "
            f"{worst * 1e3:.1f} ms"
        )
        return worst, written

    # One stall of the machine decides a worst case (125 ms seen once on aiosqlite in a
    # fresh-clone run's serial phase, 1.5-10.5 ms in the run after it): a miss is measured
    # once more, and only an event loop blocked in both fails.
    (worst, written), _ = within_two(measure, lambda r: r[0] >= LATENESS_BOUND_SECONDS)
    assert written == 200
    assert worst < LATENESS_BOUND_SECONDS, f"the event loop was blocked {worst * 1e3:.1f} ms"


def test_deadlines_are_written_and_checked_before_any_await(
    urls: tuple[str, str], sync_engine: sa.Engine
) -> None:
    """``expires_at`` and ``expires_in`` reach the row as with ``relay.enqueue``; both given,
    or a naive time, are refused naming the fields before anything is written."""
    at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)

    async def body(engine: AsyncEngine) -> tuple[int, int]:
        async with AsyncSession(engine) as session, session.begin():
            with pytest.raises(EventError, match="expires_at and expires_in are exclusive"):
                await relay.aio.enqueue(session, "t", {}, expires_at=at, expires_in=60)
            with pytest.raises(EventError, match="expires_at must be timezone-aware"):
                await relay.aio.enqueue(session, "t", {}, expires_at=datetime(2031, 1, 1))
            fixed = await relay.aio.enqueue(session, "t", {}, expires_at=at)
            within = await relay.aio.enqueue(session, "t", {}, expires_in=timedelta(days=1))
        return fixed, within

    fixed, within = run(urls, body)
    found = rows(sync_engine)
    assert sorted(found) == [fixed, within]
    assert found[fixed]["expires_at"] == at
    assert found[within]["expires_at"] - found[within]["created_at"] > timedelta(hours=23)
