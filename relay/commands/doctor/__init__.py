"""``relay doctor``: checks a deployment and says, for each problem, how to fix it.

Each check gives ``pass``, ``warn`` or ``fail`` with a detail and, unless it passed, the fix.
The command exits non-zero when any check fails. Checks that need an earlier one (the schema
needs the database) are skipped, as a failure, when it failed.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from relay.commands.command import Command
from relay.commands.doctor import reach
from relay.commands.doctor import tls as doctor_tls
from relay.commands.doctor.verdicts import FAIL, PASS, WARN, Check
from relay.config import Settings
from relay.exceptions import BrokerUnavailable, ConfigError, RelayError, StoreError

if TYPE_CHECKING:
    from relay.store.operations.health import HealthStore

#: Database and host clocks further apart than this are worth a warning (Celery compares a
#: task's eta and expires with wall clocks; the relay itself uses only the database's).
SKEW_WARN_SECONDS = 2.0
#: Beat is missing when the last tick is older than this many ticks (and a minute).
TICKS_MISSED = 5


def run(settings: Settings | None, settings_error: str | None = None) -> list[Check]:
    """Every check, in order; ``settings`` None when the environment did not parse."""
    if settings is None:
        return [Check("settings", FAIL, settings_error or "", "correct the variable named")]
    from relay.store.operations.health import HealthStore

    checks = [Check("settings", PASS, "RELAY_* values are coherent")]
    store = HealthStore.from_url(settings.database_url)
    try:
        checks += list(_database(store, settings))
    finally:
        store.dispose()
    checks += list(doctor_tls.brokers(settings))
    checks += list(_broker(settings))
    return checks


def _database(store: HealthStore, settings: Settings) -> Iterator[Check]:
    try:
        reach.database(store)
    except StoreError as exc:
        why = doctor_tls.diagnose(store.url) if "certificate" in str(exc) else ""
        detail = f"{exc} ({why})" if why else str(exc)
        yield Check("database", FAIL, detail, "check RELAY_DATABASE_URL and the server")
        return
    yield Check("database", PASS, f"reachable ({store.backend_name})")
    yield _guarded("database TLS", lambda: doctor_tls.database(store))
    schema = _schema(store)
    yield schema
    if schema.status == FAIL:
        return
    from relay.commands.doctor import pooler as doctor_pooler
    from relay.commands.doctor.keys import stalled_keys
    from relay.commands.doctor.retention import retention

    steps: list[tuple[str, Callable[[], Check]]] = [("indexes", lambda: _indexes(store))]
    if store.backend_name == "postgresql":
        steps += [
            ("idle_in_transaction_session_timeout", lambda: _idle_timeout(store)),
            ("autovacuum", lambda: _autovacuum(store)),
            ("transaction pooler", lambda: doctor_pooler.pooler(settings)),
            ("wake-up", lambda: doctor_pooler.wakeup(settings)),
        ]
    steps += [
        ("clock skew", lambda: _clock(store)),
        ("tick", lambda: _tick(settings)),
        ("retention", lambda: retention(settings)),
        ("routing", lambda: _unroutable(store)),
        ("ordering keys", lambda: stalled_keys(settings)),
    ]
    for name, check in steps:
        yield _guarded(name, check)


def _guarded(name: str, check: Callable[[], Check]) -> Check:
    """``check``, or a failed check naming the database error that stopped it (a role without
    a grant the relay needs, most often), so that the other checks still run."""
    try:
        return check()
    except StoreError as exc:
        return Check(
            name,
            FAIL,
            f"could not check: {exc}",
            "grant the relay's role what docs/postgresql.md lists, or check the database",
        )


def _schema(store: HealthStore) -> Check:
    current, head = store.schema_revisions()
    if current == head:
        return Check("schema", PASS, f"migrated to head ({head})")
    return Check(
        "schema", FAIL, f"at {current or 'nothing'}, head is {head}", "run `relay migrate`"
    )


def _indexes(store: HealthStore) -> Check:
    missing = store.missing_indexes()
    if missing:
        return Check("indexes", FAIL, f"missing: {', '.join(missing)}", "run `relay migrate`")
    return Check("indexes", PASS, "the claim index and every other index exist")


def _idle_timeout(store: HealthStore) -> Check:
    value = store.idle_in_transaction_timeout()
    if value in ("0", "0ms"):
        return Check(
            "idle_in_transaction_session_timeout",
            WARN,
            "off: a frozen worker inside a transaction could hold row locks for ever",
            "ALTER ROLE <relay role> SET idle_in_transaction_session_timeout = '30s'",
        )
    return Check("idle_in_transaction_session_timeout", PASS, value)


#: How PostgreSQL spells a boolean storage parameter that is off.
_OFF = frozenset({"off", "false", "no", "0", "f", "n"})


def _autovacuum(store: HealthStore) -> Check:
    """PostgreSQL reuses a deleted or updated row's space only once vacuum has cleaned it: with
    autovacuum off the outbox (every row is updated twice, then purged) grows without bound,
    however short the retention."""
    found = store.autovacuum()
    fix = (
        "turn it on (autovacuum = on and track_counts = on in postgresql.conf, then "
        "SELECT pg_reload_conf()), or VACUUM outbox from cron every purge interval "
        "(docs/retention.md)"
    )
    for name, value in (("autovacuum", found.server), ("track_counts", found.track_counts)):
        if value.lower() in _OFF:
            detail = f"{name} = {value} on this server: nothing cleans the rows the relay updates "
            return Check("autovacuum", WARN, detail + "and purges, and the outbox grows", fix)
    if found.outbox is not None and found.outbox.lower() in _OFF:
        return Check(
            "autovacuum",
            WARN,
            f"the outbox table has autovacuum_enabled = {found.outbox}: it grows without bound",
            "ALTER TABLE outbox RESET (autovacuum_enabled), or VACUUM outbox from cron",
        )
    return Check("autovacuum", PASS, "on for the outbox")


def _clock(store: HealthStore) -> Check:
    before = time.time()
    db_now = store.clock()
    skew = db_now.timestamp() - (before + time.time()) / 2
    detail = f"database clock {skew:+.2f}s from this host's"
    if abs(skew) > SKEW_WARN_SECONDS:
        fix = "run NTP on both; the relay uses database time, Celery's eta/expires wall clocks"
        return Check("clock skew", WARN, detail, fix)
    return Check("clock skew", PASS, detail)


def _tick(settings: Settings) -> Check:
    from relay.store.operations.store import OperationsStore

    store = OperationsStore.from_url(settings.database_url)
    try:
        age = store.beat_ages().get("relay.tick")
    finally:
        store.dispose()
    limit = max(60.0, TICKS_MISSED * settings.tick_seconds)
    if age is None:
        return Check(
            "tick",
            WARN,
            "no tick recorded yet",
            "start exactly one `celery -A relay beat` (not needed with `relay dispatch --loop`)",
        )
    if age > limit:
        return Check(
            "tick",
            WARN,
            f"last tick {age:.0f}s ago (more than {limit:.0f}s)",
            "is `celery -A relay beat` running, and a worker consuming RELAY_QUEUE?",
        )
    return Check("tick", PASS, f"last tick {age:.1f}s ago")


def _unroutable(store: HealthStore) -> Check:
    rows = store.unroutable_types(5)
    if rows:
        types = ", ".join(f"{t} ({n})" for t, n in rows)
        return Check(
            "routing",
            WARN,
            f"events came back unroutable: {types}",
            "bind a queue to RELAY_EXCHANGE for these routing keys, then `relay failed retry`",
        )
    return Check("routing", PASS, "no event waiting or failed as unroutable")


def _broker(settings: Settings) -> Iterator[Check]:
    if settings.events_on_nats:
        from relay.commands.doctor import stream

        yield from stream.checks(settings)
        return
    try:
        with reach.broker(settings) as conn:
            yield Check("broker", PASS, f"reachable ({conn.transport_cls})")
            yield _exchange(conn, settings.exchange)
    except (BrokerUnavailable, ConfigError) as exc:
        yield Check("broker", FAIL, str(exc), "check RELAY_EVENTS_URL and the broker")


def _exchange(conn: Any, name: str) -> Check:
    import kombu

    channel = conn.channel()
    try:
        kombu.Exchange(name, type="topic", durable=True)(channel).declare(passive=True)
    except Exception:
        return Check(
            "exchange",
            WARN,
            f"{name!r} is not declared yet",
            "start the relay once (it declares it) and bind your consumers' queues to it",
        )
    bound = _bindings(channel, name)
    if bound == 0:
        return Check(
            "exchange",
            WARN,
            f"{name!r} exists but no queue is bound: every event would come back unroutable",
            "start your consumers (on_event declares its queues) before the first events",
        )
    known = "" if bound is None else f", {bound} binding(s)"
    return Check("exchange", PASS, f"{name!r} declared{known}")


def _bindings(channel: Any, name: str) -> int | None:
    """Bindings of a virtual transport's exchange; None on AMQP, which cannot list them
    (the routing check reads unroutable events from the outbox instead)."""
    get_table: Callable[[str], Any] | None = getattr(channel, "get_table", None)
    if get_table is None:
        return None
    try:
        return len(list(get_table(name)))
    except Exception:
        return None


def settings_or_error() -> tuple[Settings | None, str | None]:
    try:
        return Settings.from_env(), None
    except RelayError as exc:
        return None, str(exc)


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _run(_: Settings, args: argparse.Namespace) -> int:
    from relay.commands.sources import doctor_checks

    checks = doctor_checks(run, *settings_or_error(), getattr(args, "source", None))
    if args.json:
        print(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        for c in checks:
            print(f"{c.status.upper():<5} {c.name}: {c.detail}")
            if c.fix:
                print(f"      fix: {c.fix}")
    return 1 if any(c.status == FAIL for c in checks) else 0


COMMAND = Command(
    "doctor",
    "check the deployment; each problem comes with its fix",
    _arguments,
    _run,
    # The doctor reads every variable itself and reports a bad one as a failed check.
    uses=frozenset(),
)


__all__ = ["COMMAND", "FAIL", "PASS", "WARN", "Check", "run", "settings_or_error"]
