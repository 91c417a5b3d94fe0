"""What the outbox's trigger costs writers while relays run (issue 27), both sides relayed.

On 2 cores a relay relaying a side's rows takes CPU from that side's writers: a table nobody
relays beside an outbox that is relayed compares the relay's CPU, not the writer's price. So
here both sides are outboxes, each relayed:

- two databases migrated alike: ``outbox`` (the schema as shipped) and ``untriggered`` (the
  same, then its triggers off: on PostgreSQL ``DISABLE TRIGGER USER``, which since migration
  0014 takes only 0012's numbering trigger; on MariaDB that trigger dropped);
- one ``relay dispatch --loop`` per database at the defaults, both publishing into one bench
  exchange; on PostgreSQL both watch their outbox's id sequence (the wake-up of 0014 needs no
  trigger), so the two relays are alike;
- K writers commit single-row plain-SQL INSERTs into one database's outbox for ``seconds``.
  In ``idle`` both outboxes are emptied before every run and the relays rest, then the relay
  of the side written to relays what the writers commit; in ``draining`` both outboxes hold a
  backlog of at least :data:`LOW` pending rows that both relays drain throughout, the writers'
  rows queued behind it.

Either way the relays do the same work whichever side the writers write to, so ``outbox /
untriggered`` is what the outbox's triggers cost a writer. Sides take turns, their order
flipping every repetition; each figure is the median of the repetitions.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from bench import procs, rows, services
from bench.timing import ratio, relay_env
from bench.writing import backlog, median, rate, write, writer_pool
from relay.store.engine import create_engine

MODES = ("idle", "draining")
SIDES = ("outbox", "untriggered")
#: A draining run starts with at least LOW pending rows in each outbox, topped up to BACKLOG
#: (the relays drain a few thousand a second each; a run with its lead-in lasts under 10 s).
LOW, BACKLOG = 50_000, 100_000
#: How long an emptied outbox rests before an ``idle`` run: the relays' last claims and the
#: watchers' looks for rows end well within it.
IDLE_REST_SECONDS = 1.5


def _untrigger(url: str, kind: str) -> None:
    """Turn ``outbox``'s triggers off in ``url``."""
    engine = create_engine(url)
    with engine.begin() as conn:
        if kind == "postgresql":
            conn.execute(sa.text("ALTER TABLE outbox DISABLE TRIGGER USER"))
        else:
            conn.execute(sa.text("DROP TRIGGER relay_outbox_seq"))
    engine.dispose()


@contextlib.contextmanager
def _relay(url: str, route: services.Route, extra: Mapping[str, str]) -> Iterator[None]:
    """One ``relay dispatch --loop`` on ``url`` at the defaults (plus ``extra``)."""
    env = relay_env(url, route, None, extra)
    del env["RELAY_TICK_SECONDS"]  # the defaults: the wake-up as shipped
    with procs.workers(procs.relay_command(), env, 1, ready=procs.RELAY_READY):
        yield


def _empty(url: str) -> None:
    engine = create_engine(url)
    rows.clear(engine)
    engine.dispose()


def _top_up(url: str, kind: str) -> None:
    """At least :data:`LOW` pending rows in ``url``'s outbox (topped up to :data:`BACKLOG`)."""
    engine = create_engine(url)
    count = sa.text("SELECT count(*) FROM outbox WHERE status = 'pending'")
    with engine.connect() as conn:
        pending = int(conn.execute(count).scalar_one())
    engine.dispose()
    if pending < LOW:
        backlog(url, kind, BACKLOG - pending)


def measure(
    kind: str, writers: Sequence[int], seconds: float, reps: int, modes: Sequence[str] = MODES
) -> dict[str, Any]:
    """Commits/s per mode, K and side on ``kind``, with the events the relays published."""
    out: dict[str, Any] = {}
    with (
        services.database("writers_shipped", kind) as shipped,
        services.database("writers_untriggered", kind) as untriggered,
        writer_pool() as workers,
        services.route(services.AMQP_URL, "writers") as route,
    ):
        _untrigger(untriggered, kind)
        urls = {"outbox": shipped, "untriggered": untriggered}
        with _relay(shipped, route, {}), _relay(untriggered, route, {}):
            for mode in modes:
                for k in writers:
                    runs: dict[str, list[float]] = {s: [] for s in SIDES}
                    relayed: dict[str, list[float]] = {s: [] for s in SIDES}
                    for rep in range(reps):
                        for side in SIDES if rep % 2 == 0 else SIDES[::-1]:
                            for url in urls.values():
                                _empty(url) if mode == "idle" else _top_up(url, kind)
                            time.sleep(IDLE_REST_SECONDS)
                            route.purge()
                            started = time.monotonic()
                            commits = rate(workers, write, urls[side], "outbox", k, seconds)
                            runs[side].append(commits)
                            published = route.purge()
                            relayed[side].append(published / (time.monotonic() - started))
                    row: dict[str, Any] = {s: round(median(v)) for s, v in runs.items()}
                    row["relayed"] = {s: round(median(v)) for s, v in relayed.items()}
                    row["runs"] = {s: [round(x) for x in v] for s, v in runs.items()}
                    row["ratio"] = ratio(row["outbox"], row["untriggered"])
                    # Each repetition's two runs are next to each other in time: their ratio
                    # cancels the load drifting between repetitions.
                    sides = zip(runs["outbox"], runs["untriggered"], strict=True)
                    pairs = [a / b for a, b in sides]
                    row["pair_ratios"] = [round(x, 3) for x in pairs]
                    row["pair_ratio"] = median(pairs)
                    out[f"{mode}/{k}"] = {"mode": mode, "writers": k, **row}
                    print(f"  writers relayed {kind} {mode} K={k}: {row}", flush=True)
    return out
