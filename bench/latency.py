"""Commit-to-consumer latency, and the idle CPU of the relay processes.

One method for every case: a producer process commits a transaction every few milliseconds
holding ``rate * period`` rows, written as plain SQL (one multi-row ``INSERT``), through
``relay.enqueue`` on a Core connection or on an ORM Session, optionally with the after-commit
wake-up (``relay.configure(wake=Waker(...))``, style "…, woken"); it notes ``time.monotonic()``
just before each COMMIT, and the arrival clock (:class:`bench.timing.Arrivals`) notes each
arrival on the same system-wide clock. Idle CPU is the relay processes' user + system CPU over
a quiet interval, as a share of one core.

Three sections use it:

- ``wakeup``: default settings (tick 1 s with the wake-up, 0.4 s where the relay polls) on
  PostgreSQL, PostgreSQL with ``RELAY_NOTIFY=0`` and MariaDB, each with 2 x ``relay dispatch
  --loop`` and with beat + 2 Celery workers; no after-commit wake-up (the watcher or the poll
  finds rows).
- ``latency_polling``: one ``relay dispatch --loop`` on PostgreSQL that only polls, every tick
  (``RELAY_NOTIFY=0``, ``RELAY_POLL_FLOOR_SECONDS`` = ``RELAY_TICK_SECONDS``).
- ``latency_wakeup``: the Celery fleet polling every 5 s only, with and without the after-commit
  wake-up: single commits 50 ms apart (1 worker), then offered loads (2 workers).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from celery import Celery
from sqlalchemy.orm import Session

import relay
from bench import procs, services
from bench.timing import Arrivals, latency_summary
from relay.celery import celery_config
from relay.celery.wakeup import Waker
from relay.config import Settings
from relay.store.engine import create_engine
from relay.store.schema.tables import outbox

DISPATCH, CELERY = "x relay dispatch --loop", "Celery workers"
STYLES = ["plain SQL", "enqueue, Core", "enqueue, Session"]
WOKEN = ", woken"
_PERCENTILES = ("p50_ms", "p95_ms", "p99_ms", "max_ms")


@dataclass(frozen=True)
class Setup:
    """Where the relay runs: a fresh database of ``backend``, ``runner`` in ``processes``
    processes (Celery: beat + that many workers), with ``settings`` beside the URLs."""

    database: str
    backend: str
    runner: str
    processes: int = 2
    settings: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        if self.runner == DISPATCH:
            return f"{self.processes} {DISPATCH}"
        return f"beat + {self.processes} {CELERY}"


#: The ``wakeup`` section's set-ups: every database and runner at the defaults.
DEFAULTS = [
    Setup(database, backend, runner, settings=settings)
    for database, backend, settings in (
        ("postgresql", "postgresql", ()),
        ("postgresql, RELAY_NOTIFY=0", "postgresql", (("RELAY_NOTIFY", "0"),)),
        ("mariadb", "mariadb", ()),
    )
    for runner in (DISPATCH, CELERY)
]


def _polling_only(tick: float) -> tuple[tuple[str, str], ...]:
    """Settings under which the relay only looks every ``tick``: no wake-up, no adaptive poll."""
    t = f"{tick:g}"
    return (("RELAY_NOTIFY", "0"), ("RELAY_TICK_SECONDS", t), ("RELAY_POLL_FLOOR_SECONDS", t))


def _commit(engine: sa.Engine, style: str, payloads: list[Any]) -> tuple[list[int], float]:
    """One transaction of ``payloads`` written in ``style``; their ids and the time just before
    COMMIT."""
    if style == "plain SQL":
        with engine.connect() as conn:
            rows = [{"event_type": "bench.latency", "payload": p} for p in payloads]
            ids = list(conn.execute(sa.insert(outbox).returning(outbox.c.id), rows).scalars())
            began = time.monotonic()
            conn.commit()
        return ids, began
    if style == "enqueue, Core":
        with engine.connect() as conn:
            transaction = conn.begin()
            ids = [relay.enqueue(conn, "bench.latency", p) for p in payloads]
            began = time.monotonic()
            transaction.commit()
        return ids, began
    with Session(engine) as session:
        ids = [relay.enqueue(session, "bench.latency", p) for p in payloads]
        began = time.monotonic()
        session.commit()
    return ids, began


def _produce(
    env: dict[str, str], style: str, rate: int, period: float, seconds: float, out: Any
) -> None:
    """The producer process: a transaction every ``period`` holding ``rate * period`` events."""
    if style.endswith(WOKEN):
        settings = Settings.from_env(env)
        app = Celery("bench-latency")
        app.conf.update(celery_config(settings))
        relay.configure(wake=Waker(app, settings))
        style = style.removesuffix(WOKEN)
    engine = create_engine(env["RELAY_DATABASE_URL"])
    per_txn = max(1, round(rate * period))
    committed: list[tuple[int, float]] = []
    start = time.monotonic()
    n = 0
    while (due := start + n * period) < start + seconds:
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)  # pacing of the producer, not synchronization
        ids, began = _commit(engine, style, [{"n": n, "i": i} for i in range(per_txn)])
        committed += [(i, began) for i in ids]
        n += 1
    elapsed = time.monotonic() - start
    engine.dispose()
    out.put({"committed": committed, "seconds": elapsed})


@dataclass
class _Running:
    env: dict[str, str]
    arrivals: Arrivals
    pids: list[int]


@contextlib.contextmanager
def running(setup: Setup) -> Iterator[_Running]:
    """A fresh database, the relay processes of ``setup`` and a consumer, with four events
    already delivered (the processes are warm when the clock starts)."""
    with services.database("latency", setup.backend) as url:
        exchange = f"bench.latency.{uuid.uuid4().hex[:8]}"
        env = {
            "RELAY_DATABASE_URL": url,
            "RELAY_BROKER_URL": services.AMQP_URL,
            "RELAY_EXCHANGE": exchange,
            "RELAY_QUEUE": f"bench.latency.tasks.{uuid.uuid4().hex[:8]}",
            **dict(setup.settings),
        }
        engine = create_engine(url)
        try:
            with Arrivals(services.AMQP_URL, exchange) as arrivals, _runner(setup, env) as pids:
                warm = [_commit(engine, "plain SQL", [{"warm": i}])[0][0] for i in range(4)]
                if arrivals.wait_for(warm, 30 + 3 * _tick(env)):
                    raise RuntimeError(f"{setup.database} / {setup.label}: warm-up never arrived")
                yield _Running(env, arrivals, pids)
        finally:
            engine.dispose()


def _tick(env: dict[str, str]) -> float:
    return float(env.get("RELAY_TICK_SECONDS", "1"))


@contextlib.contextmanager
def _runner(setup: Setup, env: dict[str, str]) -> Iterator[list[int]]:
    if setup.runner == DISPATCH:
        started = procs.workers(
            procs.relay_command(), env, setup.processes, ready=procs.RELAY_READY
        )
    else:
        started = procs.celery_fleet(env, setup.processes)
    with started as ps:
        yield [p.pid for p in ps]


def idle_cpu(run: _Running, seconds: float) -> float:
    """The relay processes' CPU over ``seconds`` of quiet, in % of one core."""
    time.sleep(2.0)  # let the polls back off to the tick before timing idle
    cpu_before, wall_before = procs.cpu_seconds(run.pids), time.monotonic()
    time.sleep(seconds)  # the idle interval measured, not synchronization
    used = procs.cpu_seconds(run.pids) - cpu_before
    return round(used / (time.monotonic() - wall_before) * 100, 2)


def one_load(run: _Running, style: str, rate: int, seconds: float, period: float) -> dict[str, Any]:
    """Latency percentiles (ms) of one producer style at one offered rate."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    producer = ctx.Process(target=_produce, args=(run.env, style, rate, period, seconds, out))
    cpu_before, wall_before = procs.cpu_seconds(run.pids), time.monotonic()
    producer.start()
    deadline = time.monotonic() + seconds + 120
    try:
        while True:
            try:
                made = out.get(timeout=1.0)
                break
            except queue.Empty:
                if not producer.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"the {style} producer failed") from None
    finally:
        producer.join(timeout=30)
    committed = dict(made["committed"])
    lost = run.arrivals.wait_for(list(committed), 60 + 3 * _tick(run.env))
    cpu = (procs.cpu_seconds(run.pids) - cpu_before) / (time.monotonic() - wall_before) * 100
    return {
        "style": style,
        "rate": rate,
        "achieved_per_s": round(len(committed) / made["seconds"]),
        "events": len(committed),
        "lost": lost,
        **latency_summary(run.arrivals.latencies_ms(committed)),
        "relay_cpu_pct": round(cpu, 1),
    }


def wakeup(seconds: float, idle: float, rates: list[int], period: float) -> dict[str, Any]:
    """The ``wakeup`` section: idle CPU, then every (rate, style), per set-up at the defaults."""
    runs = []
    for setup in DEFAULTS:
        styles = STYLES if not setup.settings else STYLES[:1]
        with running(setup) as run:
            idle_pct = idle_cpu(run, idle)
            loads = [one_load(run, s, r, seconds, period) for r in rates for s in styles]
        runs.append(
            {
                "database": setup.database,
                "runner": setup.label,
                "idle_cpu_pct": idle_pct,
                "idle_seconds": idle,
                "loads": loads,
            }
        )
    return {"seconds": seconds, "commit_period_s": period, "runs": runs}


def polling(rates: list[int], ticks: list[float], seconds: float) -> dict[str, Any]:
    """The ``latency_polling`` section: one relay process that only polls, per (tick, rate);
    a transaction every 10 ms holding rate/100 events."""
    out: dict[str, Any] = {}
    for tick in ticks:
        setup = Setup("postgresql", "postgresql", DISPATCH, 1, _polling_only(tick))
        with running(setup) as run:
            for rate in rates:
                load = one_load(run, "plain SQL", rate, seconds, 0.01)
                out[f"tick{tick:g}_r{rate}"] = {
                    "producer": "plain SQL",
                    "offered_rate": rate,
                    "achieved_rate": load["achieved_per_s"],
                    "tick_seconds": tick,
                    "events": load["events"],
                    "received": load["events"] - load["lost"],
                    **{k: load[k] for k in _PERCENTILES},
                }
    return out


#: The after-commit wake-up against the tick alone: the Celery fleet's tick, in seconds.
HOOK_TICK_SECONDS = 5.0


def hook(events: int, seconds: float, rates: list[int]) -> dict[str, Any]:
    """The ``latency_wakeup`` section: the Celery fleet polling every 5 s only, with and without
    the after-commit wake-up; ``events`` single commits 50 ms apart, then offered loads."""
    settings = _polling_only(HOOK_TICK_SECONDS)
    period = 0.05
    out: dict[str, Any] = {"tick_seconds": HOOK_TICK_SECONDS, "interval_seconds": period}
    out["method"] = "bench.latency"
    with running(Setup("postgresql", "postgresql", CELERY, 1, settings)) as run:
        for key, style in (
            ("with_wakeup", "enqueue, Session, woken"),
            ("with_wakeup_core", "enqueue, Core, woken"),
            ("without_wakeup", "enqueue, Session"),
        ):
            load = one_load(run, style, round(1 / period), events * period, period)
            out[key] = {
                "wakeup": style.endswith(WOKEN),
                "style": style.removesuffix(WOKEN).removeprefix("enqueue, ").lower(),
                "events": load["events"],
                **{f"{q}_s": round(load[f"{q}_ms"] / 1000, 4) for q in ("p50", "p99", "max")},
            }
    with running(Setup("postgresql", "postgresql", CELERY, 2, settings)) as run:
        loads = {
            (rate, style): one_load(run, style, rate, seconds, 0.01)
            for rate in rates
            for style in ("enqueue, Session, woken", "enqueue, Session", "enqueue, Core, woken")
        }
    for (rate, style), load in loads.items():
        section = "under_load_core" if "Core" in style else "under_load"
        row: dict[str, Any] = {"rate": rate, "wakeup": style.endswith(WOKEN)}
        row["style"] = "core" if "Core" in style else "session"
        row.update({k: load[k] for k in ("achieved_per_s", "events", *_PERCENTILES)})
        out.setdefault(section, []).append(row)
    out["loadavg"] = services.loadavg()
    return out
