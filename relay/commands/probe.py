"""Health probes for Docker and Kubernetes: ``relay probe ready`` and ``relay probe live``.

Readiness: the database answers and the events broker accepts a connection. Liveness of a
``relay dispatch --loop`` process: the heartbeat file it touches after every pass of its loop
is fresh (a hung loop stops touching it). A Celery worker's liveness is Celery's own
``celery -A relay inspect ping -d celery@$HOSTNAME``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from relay.commands.base import Command
from relay.config import DATABASE_ONLY, Settings
from relay.exceptions import BrokerUnavailable, ConfigError, StoreError


def ready(settings: Settings) -> tuple[bool, str]:
    """(healthy, why): the database and the events broker are reachable."""
    from relay.commands import reach
    from relay.store.engine import create_engine

    engine = create_engine(settings.database_url)
    try:
        reach.database(engine)
    except StoreError as exc:
        return False, str(exc)
    finally:
        engine.dispose()
    try:
        with reach.broker(settings):
            pass
    except (BrokerUnavailable, ConfigError) as exc:
        return False, str(exc)
    return True, "ready: database and broker reachable"


def live(heartbeat_file: str | None, max_age: float) -> tuple[bool, str]:
    """(healthy, why): ``heartbeat_file`` was touched within ``max_age`` seconds."""
    if not heartbeat_file:
        return False, "give --heartbeat-file (the one `relay dispatch --loop` touches)"
    try:
        age = time.time() - os.stat(heartbeat_file).st_mtime
    except OSError as exc:
        return False, f"no heartbeat: {exc}"
    if age > max_age:
        return False, f"stale heartbeat: the loop last passed {age:.0f}s ago (> {max_age:g}s)"
    return True, f"live: the loop passed {age:.1f}s ago"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "kind",
        choices=["ready", "live"],
        help="ready: database and broker reachable; live: a dispatch loop's heartbeat is fresh",
    )
    p.add_argument("--heartbeat-file", help="live: the file `relay dispatch --loop` touches")
    p.add_argument("--max-age", type=float, default=60.0, help="live: seconds (default 60)")


def _run(settings: Settings, args: argparse.Namespace) -> int:
    ok, detail = (
        ready(settings) if args.kind == "ready" else live(args.heartbeat_file, args.max_age)
    )
    print(detail, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


COMMAND = Command(
    "probe",
    "health probes for Docker and Kubernetes (exit 0 = healthy)",
    _arguments,
    _run,
    uses=DATABASE_ONLY | {"broker_url", "events_url"},
)
