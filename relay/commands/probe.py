"""Health probes for Docker and Kubernetes: ``relay probe ready`` and ``relay probe live``.

Readiness: the database answers and the events broker accepts a connection, checked from the
probe's own process: during an outage the relay is handling, it names what is unavailable.
Liveness of a ``relay dispatch --loop`` process: the heartbeat file its loop touches on every
pass, and every second while it rests or waits out an outage (its breaker open, the database's
retry backoff), is fresher than the bound the relay wrote into it
(:func:`relay.config.timing.liveness_seconds`); a loop stuck in a call stops touching it.
Under ``RELAY_DATABASES`` the file carries the oldest child's beat, so one hung child fails it.
A Celery worker's liveness is Celery's own ``celery -A relay inspect ping -d celery@$HOSTNAME``.
"""

from __future__ import annotations

import argparse
import sys

from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import DATABASE_ONLY
from relay.exceptions import BrokerUnavailable, ConfigError, StoreError
from relay.observe.heartbeat import live


def ready(settings: Settings) -> tuple[bool, str]:
    """(healthy, why): the database and the events broker are reachable."""
    from relay.commands.doctor import reach
    from relay.store.operations.health import HealthStore

    store = HealthStore.from_url(settings.database_url)
    try:
        reach.database(store)
    except StoreError as exc:
        return False, str(exc)
    finally:
        store.dispose()
    try:
        with reach.broker(settings):
            pass
    except (BrokerUnavailable, ConfigError) as exc:
        return False, str(exc)
    return True, "ready: database and broker reachable"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "kind",
        choices=["ready", "live"],
        help="ready: database and broker reachable; live: a dispatch loop's heartbeat is fresh",
    )
    p.add_argument("--heartbeat-file", help="live: the file `relay dispatch --loop` touches")
    p.add_argument(
        "--max-age",
        type=float,
        help="live: seconds (default: the bound the relay wrote into the file, from its lease "
        "and confirm timeout: 2 x RELAY_LEASE_SECONDS + RELAY_CONFIRM_TIMEOUT_SECONDS)",
    )


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
