"""``docs/configuration.md``, generated from :class:`relay.config.Settings` so it cannot drift.

Each row comes from the code: the variable from the field's name, the default from the field
(and from a ``Settings`` built for PostgreSQL and for SQLite, where the two differ), the rule an
unset field follows from :data:`DERIVED` (whose figures are computed from live ``Settings``),
the refusals from the ``check(...)`` calls of ``relay/config/checks.py`` (read with ``ast``).
The meaning is :data:`MEANING`, else the field's ``#:`` comment; a field with neither stops the
generator, so a new setting cannot land undocumented.

``python -m tools.settings_page docs/configuration.md`` writes the page (``make docs-config``);
``--check`` exits 1 when the committed page differs (``.ci/run``; the test is
``tests/unit/test_settings_page.py``).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import Field
from pathlib import Path
from typing import Any

from relay.config import checks as checks_module
from relay.config import settings as settings_module
from relay.config.settings import (
    CONFIRM_SHARE_OF_LEASE,
    DATABASE_ONLY,
    POLLED_IDLE_SECONDS,
    POLLED_TICK_SECONDS,
    Settings,
    env_fields,
    env_name,
)

PG = "postgresql://db/app"
#: Where each field's default takes a value of its own, per database.
CONTEXTS = {"PostgreSQL, `RELAY_NOTIFY` on": PG, "elsewhere": "sqlite:///relay.sqlite3"}

#: What each setting means, for the fields whose ``#:`` comment is missing or too terse.
MEANING: dict[str, str] = {
    "database_url": "SQLAlchemy URL of the database holding `outbox` (`postgresql://` uses "
    "psycopg 3, `mysql://` and `mariadb://` PyMySQL: extra `[mysql]`)",
    "broker_url": "Celery broker of the relay's own tasks (`filesystem://`: folders in "
    "`./relay-broker`, or `filesystem:///some/dir`)",
    "events_url": "Kombu URL the events are published to",
    "exchange": "durable topic exchange the events go to",
    "batch_size": "rows per claim",
    "batch_max": "while claims come back full (a backlog), each drain doubles them from "
    "`RELAY_BATCH_SIZE` up to this; a short claim starts again from the batch size. Set it "
    "equal to the batch size for fixed batches (and a tighter duplicate bound)",
    "batch_max_bytes": "most bytes of payload and headers (as JSON text) one claim leases, "
    "whatever its row count, so a relay process holds a bounded amount when rows are large "
    "(plain SQL bypasses `RELAY_MAX_PAYLOAD_BYTES`; a drain holds at most two batches). A row "
    "larger than this is still claimed, never stranded: each lane of a claim (unordered rows, "
    "heads of ordering keys) takes its first row whatever its size "
    "([batches bounded by bytes](performance.md#batches-bounded-by-bytes))",
    "lease_seconds": "lease length; renewed every third of it while a batch publishes. Give "
    "Celery workers a stop grace period longer than this. The database deadlines derive from "
    "it: a dispatch call is abandoned after a third of it (at least 1 s), connecting may take "
    "a sixth (at least 2 s), TCP keepalives start after a tenth "
    "([Failover and dead connections](guarantees.md#failover-and-dead-connections))",
    "max_attempts": "after this many failed attempts a row becomes `failed` (a dead letter)",
    "backoff_base_seconds": "first backoff after a failed attempt: exponential with full "
    "jitter, capped by `RELAY_BACKOFF_MAX_SECONDS`",
    "backoff_max_seconds": "cap of the backoff between attempts",
    "tick_seconds": "interval of beat's safety-net tick (a Celery message each); set where "
    "nothing notifies, also the longest wait of a relay that polls for rows itself (see below)",
    "confirm_timeout_seconds": "how long a batch waits for broker confirms; silence that long "
    "is treated as a broker outage (attempts given back). Also the AMQP connect and read "
    "timeouts and heartbeat (a write stalled 5 s, or this if shorter, is cut)",
    "max_payload_bytes": "largest payload `enqueue` (and `send_task`) accepts, encoded as JSON",
    "expire_after": "default deadline per event type, `PATTERN=DURATION,...` "
    "(`orders.reminder=1h,orders.*=1d,*=7d`; durations `30s`, `15m`, `1h`, `7d`, `2w`, or "
    "`never`): an event enqueued without `expires_at`/`expires_in` (a Celery task without "
    "`expires`) expires that long after it is due; the most specific pattern wins, whatever "
    "the order. Read by the producer, once per process, at the first enqueue "
    "([Events that expire](operations.md#events-that-expire))",
    "queue": "Celery queue of the relay's own tasks (`relay.claim_and_dispatch`, `relay.tick`, "
    "`relay.purge_sent`)",
    "max_fanout": "most `claim_and_dispatch` tasks one tick starts: about the fleet's worker "
    "processes",
    "retention_seconds": "sent rows older than this are deleted by `relay.purge_sent`",
    "purge_interval_seconds": "how often beat sends `relay.purge_sent`",
    "notify": "PostgreSQL: the commit-time wake-up. `relay dispatch --loop` (and one watcher "
    "in beat) looks at the sequence of `outbox.id` (every poll floor while it moves, backing "
    "off to `RELAY_WATCH_IDLE_SECONDS`) and claims when it moved; "
    "writers run nothing for it, and it works through a transaction pooler "
    "([the wake-up](running.md#the-wake-up)). Off: poll only",
    "listen_url": "PostgreSQL: another URL of the same database for the wake-up's watcher; no "
    "longer needed behind a transaction pooler ([PostgreSQL in production](postgresql.md))",
    "poll_floor_seconds": "how often the PostgreSQL wake-up looks at the id sequence while it "
    "moves (and for a second after; then it backs off to `RELAY_WATCH_IDLE_SECONDS`); shortest "
    "wait of adaptive polling, doubling to the tick while idle; shortest gap between two "
    "wake-ups beat's watcher sends",
    "watch_idle_seconds": "PostgreSQL: the longest wait between two looks of the wake-up at "
    "the id sequence (over `RELAY_DATABASES`, at each server's written-rows figures) while "
    "nothing moves (it looks every poll floor after a move, doubling to this). A commit after "
    "a quiet spell waits at most about this long for its first claim; an idle watcher makes "
    "`1 / this` database transactions a second, less the one the tick's claim takes instead "
    "([what wakes an idle relay](running.md#what-wakes-an-idle-relay))",
    "metrics_port": "Prometheus endpoint (`/metrics`) of `relay dispatch --loop` and of "
    "`celery -A relay worker` ([metrics](operations.md#metrics)); unset: no endpoint, nothing "
    "counted",
    "metrics_max_event_types": "distinct `event_type` label values one relay process keeps "
    'apart in its metrics, the first it sees; later types count as `event_type="other"` '
    "([metrics](operations.md#metrics)); 0: every type as `other`",
    "console_token": "the web console's operator token: may view and act. Secret: never "
    "logged, shown as `***`",
    "console_readonly_token": "the web console's view-only token: may view, never act. Secret",
    "console_redact": "payload and header fields the console masks on every page and answer, "
    "comma-separated (`password,card_number`; any case, any depth)",
    "databases": "several outbox databases drained by one fleet, `name=URL` pairs separated "
    "by commas, or `@PATH` of a file with one pair a line, read again on SIGHUP by `relay "
    "dispatch --loop` and when it changes by a Celery fleet's workers (each its own lease "
    "domain; see [Many databases](many-databases.md))",
    "source": "the CloudEvents `source` of this outbox's messages, a URI-reference "
    "(`/shop/orders`); unset: `/relay/<kind>/<host>/<database>` from the database URL, without "
    "credentials. Descriptive: the event id is unique alone",
}


def _s(**values: Any) -> Settings:
    return Settings(**values, explicit=frozenset(values))


def _derived() -> dict[str, Callable[[], str]]:
    """The rule each derived default follows, its examples computed from live ``Settings``."""
    share = round(1 / CONFIRM_SHARE_OF_LEASE)
    return {
        "confirm_timeout_seconds": lambda: (
            f"unset: 1/{share} of the lease, at most {_n(Settings().confirm_timeout_seconds)} "
            f"(`RELAY_LEASE_SECONDS=6` gives {_n(_s(lease_seconds=6.0).confirm_timeout_seconds)})"
        ),
        "lease_seconds": lambda: (
            f"unset beside a set confirm timeout: at least {share} times it "
            f"(`RELAY_CONFIRM_TIMEOUT_SECONDS=60` gives "
            f"{_n(_s(confirm_timeout_seconds=60.0).lease_seconds)})"
        ),
        "batch_max": lambda: (
            f"unset: {_n(Settings().batch_max)}, or `RELAY_BATCH_SIZE` when that is set "
            f"(`RELAY_BATCH_SIZE=50` gives {_n(_s(batch_size=50).batch_max)})"
        ),
        "batch_size": lambda: (
            f"unset beside a set `RELAY_BATCH_MAX` below {_n(Settings().batch_size)}: follows "
            f"it down (`RELAY_BATCH_MAX=20` gives {_n(_s(batch_max=20).batch_size)})"
        ),
        "backoff_max_seconds": lambda: (
            "unset: at least a set `RELAY_BACKOFF_BASE_SECONDS` "
            f"(`=600` gives {_n(_s(backoff_base_seconds=600.0).backoff_max_seconds)})"
        ),
        "backoff_base_seconds": lambda: (
            "unset beside a set cap below it: the cap "
            f"(`RELAY_BACKOFF_MAX_SECONDS=0.5` gives "
            f"{_n(_s(backoff_max_seconds=0.5).backoff_base_seconds)})"
        ),
        "tick_seconds": lambda: (
            f"unset: {_n(Settings(database_url=PG).tick_seconds)} on PostgreSQL with "
            f"`RELAY_NOTIFY` on, {_n(POLLED_TICK_SECONDS)} where nothing wakes the relay (MySQL, "
            "MariaDB, SQLite, `RELAY_NOTIFY=0`): there the tick is how soon an idle relay looks; "
            "never below a set poll floor"
        ),
        "poll_floor_seconds": lambda: (
            f"unset: at most a set tick (`RELAY_TICK_SECONDS=0.01` gives "
            f"{_n(_s(tick_seconds=0.01).poll_floor_seconds)}). Set alone above the default "
            f"tick, the tick grows to it: above {_n(Settings(database_url=PG).tick_seconds)} "
            f"on PostgreSQL with the wake-up, above {_n(POLLED_TICK_SECONDS)} elsewhere "
            f"(`RELAY_POLL_FLOOR_SECONDS=2` gives a tick of "
            f"{_n(_s(poll_floor_seconds=2.0).tick_seconds)})"
        ),
        "watch_idle_seconds": lambda: (
            f"unset: {_n(Settings(database_url=PG).watch_idle_seconds)}, at most the tick and "
            f"at least the poll floor (`RELAY_TICK_SECONDS=0.1` gives "
            f"{_n(_s(tick_seconds=0.1).watch_idle_seconds)}). Set above the default tick, the "
            f"tick grows to it (`RELAY_WATCH_IDLE_SECONDS=2` gives a tick of "
            f"{_n(_s(database_url=PG, watch_idle_seconds=2.0).tick_seconds)})"
        ),
        "queue": lambda: f"unset while `RELAY_EXCHANGE=relay`: `{_s(exchange='relay').queue}`",
        "exchange": lambda: f"unset while `RELAY_QUEUE=outbox`: `{_s(queue='outbox').exchange}`",
        "events_url": lambda: "unset: `RELAY_BROKER_URL`",
        "listen_url": lambda: "unset: `RELAY_DATABASE_URL`",
    }


def _n(value: object) -> str:
    """A value as the page shows it: ``30.0`` as ``30``, ``None`` as unset."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}" if value < 1e6 else f"{value:.0f}"
    return str(value)


def _field_comments() -> dict[str, str]:
    """Each field's ``#:`` comment in ``relay/config/settings.py``, joined into one line."""
    lines = inspect.getsource(settings_module).splitlines()
    tree = ast.parse("\n".join(lines))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    out: dict[str, str] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            above: list[str] = []
            i = node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#:"):
                above.insert(0, lines[i].strip()[2:].strip())
                i -= 1
            if above:
                out[node.target.id] = " ".join(above).replace("``", "`")
    return out


def _message(node: ast.expr) -> str:
    """A ``check`` message as text: f-string values dropped, ``VAR=`` left as ``VAR``."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        text = "".join(str(v.value) for v in node.values if isinstance(v, ast.Constant))
        return re.sub(r"(?<=[A-Z0-9_])=", "", text)
    return ""


def _refusals() -> dict[str, list[str]]:
    """What each variable refuses, from the ``check(ok, VAR, value, problem)`` calls."""
    tree = ast.parse(inspect.getsource(checks_module))
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "check"):
            continue
        var = node.args[1]
        if isinstance(var, ast.Constant) and isinstance(var.value, str):
            out.setdefault(var.value, []).append(_message(node.args[3]))
        elif isinstance(var, ast.Name):  # a loop over (variable, value) pairs
            for loop in ast.walk(tree):
                if isinstance(loop, ast.For) and node in list(ast.walk(loop)):
                    for elt in getattr(loop.iter, "elts", []):
                        first = getattr(elt, "elts", [None])[0]
                        if isinstance(first, ast.Constant) and str(first.value) != "":
                            out.setdefault(str(first.value), []).append(_message(node.args[3]))
    return out


def _default(f: Field[Any]) -> str:
    per_db = {label: getattr(Settings(database_url=url), f.name) for label, url in CONTEXTS.items()}
    if f.name == "database_url":
        return f"`{Settings().database_url}`"
    if len({repr(v) for v in per_db.values()}) > 1:
        return ", ".join(f"{_n(v)} ({label})" for label, v in per_db.items())
    value = getattr(Settings(), f.name)
    return f"`{value}`" if isinstance(value, str) else _n(value)


def _kind(f: Field[Any]) -> str:
    kind = f.type if isinstance(f.type, str) else f.type.__name__
    return {
        "str": "text",
        "str | None": "text",
        "int": "integer",
        "int | None": "integer",
        "float": "seconds" if f.name.endswith("_seconds") else "number",
        "bool": "boolean",
    }.get(kind, kind)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The whole page."""
    comments, refusals, derived = _field_comments(), _refusals(), _derived()
    rows = []
    for f in env_fields():
        var = env_name(f)
        meaning = MEANING.get(f.name) or comments.get(f.name)
        if not meaning:
            raise SystemExit(f"{var}: add a meaning to tools/settings_page.py MEANING")
        rule = derived[f.name]() if f.name in derived else ""
        refused = "; ".join(dict.fromkeys(r for r in refusals.get(var, []) if r))
        rows.append(
            f"| `{var}` | {_kind(f)} | {_default(f)} | {_cell(rule)} | {_cell(refused)} "
            f"| {_cell(meaning)} |"
        )
    database_only = ", ".join(f"`{env_name(f)}`" for f in env_fields() if f.name in DATABASE_ONLY)
    return TEMPLATE.format(
        rows="\n".join(rows),
        database_only=database_only,
        polled_idle=_n(POLLED_IDLE_SECONDS),
        polled_tick=_n(POLLED_TICK_SECONDS),
    )


TEMPLATE = """\
<!-- Generated by `python -m tools.settings_page docs/configuration.md` (make docs-config) from
relay/config/settings.py. Do not edit by hand: tests/unit/test_settings_page.py fails when this
page and the code differ. -->
# Configuration

Every setting is a `RELAY_*` environment variable, read by `relay.config.Settings.from_env()`
(`celeryconfig.py` reads the same). Unset or empty: the default. A bad value stops the process at
start-up with a message naming the variable (exit code 2 for `relay` commands); passwords in URLs
are never logged, and the console tokens never echoed. Each `relay` command reads only the
variables it uses: `relay migrate`, `status`, `failed`, `pending` and `purge-sent` read only
{database_only} (`migrate` also looks at the broker URLs, to create the embedded transport's
folders), and `relay console` reads the database and the three console variables, so a bad value
of a setting a command never uses cannot stop it.

Defaults follow what you set, so setting one variable never makes another's default wrong (the
*unset* column). Only two values that you set and that contradict each other are refused, and
the message names both (`RELAY_CONFIRM_TIMEOUT_SECONDS=10.0 must be below
RELAY_LEASE_SECONDS=10.0 ...`). Booleans take `1/0`, `true/false`, `yes/no`, `on/off`; seconds
take a number (`0.5`).

| variable | type | default | unset, it follows | checked at start-up | meaning |
| --- | --- | --- | --- | --- | --- |
{rows}

A relay process that polls for rows itself (`relay dispatch --loop` where nothing wakes it, a
wake-up that cannot read the id sequence, beat's poller) waits at most {polled_idle} s between
two looks while idle, unless `RELAY_TICK_SECONDS` was set where nothing wakes it (then the tick),
and never less than the poll floor: one bounded statement per look. Where nothing wakes the
relay, the tick itself defaults to {polled_tick} s.

Other variables the relay reads:

- `PROMETHEUS_MULTIPROC_DIR`: where a prefork Celery worker's children write their counters
  when `RELAY_METRICS_PORT` is set (unset: a fresh temporary directory removed at exit; set it,
  and empty it between runs yourself).
- The OpenTelemetry SDK's own variables (`OTEL_*`), when you install and configure an SDK
  ([tracing](operations.md#tracing)).
- The tests read `RELAY_TEST_POSTGRES_URL`, `RELAY_TEST_MYSQL_URL`, `RELAY_TEST_AMQP_URL` and
  `RELAY_TEST_REDIS_URL` ([development](development.md#running-the-tests)); the relay never does.
"""


def main(argv: list[str] | None = None) -> int:
    """Write the page to PATH, or with ``--check`` exit 1 when PATH differs from it."""
    parser = argparse.ArgumentParser(prog="python -m tools.settings_page")
    parser.add_argument("path", type=Path)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        current = args.path.read_text() if args.path.exists() else ""
        if current != page:
            print(f"{args.path} is stale: run `make docs-config`", file=sys.stderr)
            return 1
        return 0
    args.path.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
