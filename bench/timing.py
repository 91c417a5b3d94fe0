"""The benchmark's two clocks, and the statistics of what they read.

- **Drain clock** (throughput): workers wait on an empty outbox, N rows commit at once, and the
  rate is N over the time from that commit until no row is pending or processing; optionally
  the CPU that groups of processes spent meanwhile, per event.
- **Arrival clock** (latency): a consumer thread notes when each message id arrives on
  ``time.monotonic()``, the same system-wide clock a producer reads just before its COMMIT.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kombu
import sqlalchemy as sa

from bench import procs, rows
from bench.services import Route
from relay.store.engine import create_engine


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and relative spread ((max - min) / median) of ``values``."""
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return {
        "median": med,
        "min": lo,
        "max": hi,
        "spread": (hi - lo) / med if med else 0.0,
        "runs": list(values),
    }


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def median_ms(call: Callable[[], object], reps: int) -> dict[str, float]:
    """Milliseconds of ``call``: median, min and max of ``reps`` after one warm-up call."""
    call()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"median_ms": times[len(times) // 2], "min_ms": times[0], "max_ms": times[-1]}


@dataclass(frozen=True)
class Workload:
    """``argv`` run ``processes`` times against ``database_url``, publishing to ``route``."""

    argv: Sequence[str]
    ready: str
    processes: int
    #: ``RELAY_BATCH_SIZE``; None leaves it (and so ``RELAY_BATCH_MAX``) at the relay's default.
    batch_size: int | None
    database_url: str
    route: Route
    extra_env: Mapping[str, str] | None = None

    def env(self) -> dict[str, str]:
        return relay_env(self.database_url, self.route, self.batch_size, self.extra_env)


def relay_env(
    database_url: str,
    route: Route,
    batch_size: int | None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ``RELAY_*`` settings of relay processes draining into ``route``. A batch size set
    here is kept fixed (``RELAY_BATCH_MAX`` follows it); None leaves both at the defaults."""
    return {
        "RELAY_DATABASE_URL": database_url,
        "RELAY_BROKER_URL": route.url,
        "RELAY_EVENTS_URL": route.url,
        "RELAY_EXCHANGE": route.exchange_name,
        **({} if batch_size is None else {"RELAY_BATCH_SIZE": str(batch_size)}),
        # The empty-outbox rest: short, so a drain starts within 50 ms of the commit.
        "RELAY_TICK_SECONDS": "0.05",
        **(extra or {}),
    }


#: Process groups whose CPU a drain can account for, by the pattern of their command line.
SERVERS = {"postgresql": "postgres", "rabbitmq": "beam.smp"}


def drain_once(
    engine: sa.Engine,
    count: int,
    running: Sequence[Any],
    *,
    insert: Callable[[sa.Engine, int], None] = rows.insert_pending,
    cpu: Mapping[str, Sequence[int]] | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Commit ``count`` rows with ``insert`` and wait until the ``running`` workers drained
    them: ``rate`` in rows/s, and ``cpu_us``, the CPU microseconds per row of each group of
    pids in ``cpu`` (read from just after the commit). The progress is polled on one
    connection whose server process is left out of every group, even one listed before the
    drain: its ``count(*)`` every 20 ms is the benchmark's own cost, not the relay's."""
    with engine.connect() as poll:
        poller = rows.backend_pid(poll)
        groups = {
            name: [pid for pid in pids if pid != poller] for name, pids in (cpu or {}).items()
        }
        insert(engine, count)
        committed = time.perf_counter()
        before = {name: procs.cpu_seconds(pids) for name, pids in groups.items()}
        deadline = committed + timeout
        while rows.unfinished(poll):
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{count} rows not drained within {timeout:g}s")
            procs.check_alive(running)
            time.sleep(0.02)
        elapsed = time.perf_counter() - committed
        used = {name: procs.cpu_seconds(pids) - before[name] for name, pids in groups.items()}
    return {"rate": count / elapsed, "cpu_us": {k: v / count * 1e6 for k, v in used.items()}}


def measure(
    work: Workload,
    count: int,
    reps: int,
    *,
    check_queue: bool = True,
    reset: Callable[[sa.Engine], None] = rows.clear,
) -> dict[str, Any]:
    """Drain ``count`` rows ``reps`` times with one set of workers; rates in rows/s.

    ``reset`` runs before the workers start and after every drain (default: empty the table).
    """
    engine = create_engine(work.database_url)
    rates: list[float] = []
    delivered: list[int] = []
    try:
        reset(engine)
        work.route.purge()
        with procs.workers(work.argv, work.env(), work.processes, ready=work.ready) as running:
            time.sleep(0.3)  # let every worker finish its first (empty) claim
            for _ in range(reps):
                rates.append(drain_once(engine, count, running)["rate"])
                if check_queue:
                    delivered.append(work.route.depth())
                work.route.purge()
                reset(engine)
    finally:
        engine.dispose()
    result = summarize(rates)
    result.update(rows=count, processes=work.processes, batch_size=work.batch_size)
    if check_queue:
        result["delivered"] = delivered
        if any(d != count for d in delivered):
            result["warning"] = f"queue held {delivered} messages, expected {count} each run"
    return result


def grid(
    argv: Sequence[str],
    ready: str,
    database_url: str,
    route: Route,
    count: int,
    reps: int,
    processes: list[int],
    batches: list[int],
    *,
    check_queue: bool = True,
) -> dict[str, Any]:
    """:func:`measure` for every (processes, batch size), keyed ``p<N>_b<batch>``; rows/s."""
    out: dict[str, Any] = {}
    for n in processes:
        for batch in batches:
            work = Workload(argv, ready, n, batch, database_url, route)
            out[f"p{n}_b{batch}"] = measure(work, count, reps, check_queue=check_queue)
    return out


class Arrivals:
    """Consumes a queue of its own bound to ``exchange`` with ``#``, in a thread: when each
    message id arrived (``time.monotonic()``): by its ``outbox_id`` header, or with ``key=
    "message_id"`` by its message id (the event id); ``routing_key`` narrows the binding."""

    def __init__(
        self, url: str, exchange: str, *, routing_key: str = "#", key: str = "outbox_id"
    ) -> None:
        self.url, self.exchange, self.routing_key, self.key = url, exchange, routing_key, key
        self.at: dict[Any, float] = {}
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Arrivals:
        self._thread.start()
        if not self.ready.wait(30):
            raise RuntimeError("consumer not ready")
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        exchange = kombu.Exchange(self.exchange, type="topic", durable=True)
        bound = kombu.Queue(
            f"{self.exchange}.arrivals", exchange, routing_key=self.routing_key, auto_delete=True
        )

        def on_message(body: Any, message: Any) -> None:
            if self.key == "message_id":
                self.at.setdefault(message.properties["message_id"], time.monotonic())
            else:
                self.at.setdefault(int(message.headers["outbox_id"]), time.monotonic())

        with (
            kombu.Connection(self.url) as conn,
            # Auto-ack: an ack round trip per message would make the consumer the bottleneck.
            conn.Consumer([bound], callbacks=[on_message], no_ack=True, accept=["json"]),
        ):
            self.ready.set()
            while not self._stop.is_set():
                try:
                    conn.drain_events(timeout=0.1)
                except TimeoutError:
                    continue

    def wait_for(self, ids: Sequence[Any], timeout: float) -> int:
        """Wait (bounded) until every id arrived; returns how many never did."""
        deadline = time.monotonic() + timeout
        while (missing := sum(i not in self.at for i in ids)) and time.monotonic() < deadline:
            time.sleep(0.01)
        return missing

    def latencies_ms(self, committed: Mapping[Any, float]) -> list[float]:
        """Sorted commit-to-arrival times in ms of the ids in ``committed`` that arrived."""
        return sorted((self.at[i] - t) * 1000 for i, t in committed.items() if i in self.at)


def latency_summary(ms: Sequence[float]) -> dict[str, float]:
    """p50, p95, p99 and max of sorted latencies in ms, to 0.1 ms."""
    out = {f"p{q}_ms": round(percentile(ms, q / 100), 1) for q in (50, 95, 99)}
    out["max_ms"] = round(ms[-1], 1) if ms else float("nan")
    return out
