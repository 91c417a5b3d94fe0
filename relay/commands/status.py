"""``relay status``: rows per status, the oldest pending age, expired leases, stalled ordering
keys and the pauses in force (``relay pause``), once (a table or ``--json``) or as a live view
refreshed every second (``--watch``, extra ``[watch]``)."""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from relay.commands import command
from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import DATABASE_ONLY
from relay.exceptions import ConfigError

if TYPE_CHECKING:
    from rich.table import Table

    from relay.store.operations.store import OperationsStore


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--watch", action="store_true", help="a live view, refreshed every second")
    p.add_argument("--count", type=int, default=None, help="with --watch: stop after N refreshes")


def _run(settings: Settings, args: argparse.Namespace) -> int:
    if args.watch:
        return watch(command.store(settings), count=args.count)
    report = command.store(settings).status().as_dict()
    report["pauses"] = _pauses(settings)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for status, count in report["counts"].items():
        print(f"{status:<12}{count:>12}")
    age = report["oldest_pending_age_seconds"]
    print(f"{'oldest pending':<12} {'-' if age is None else f'{age:.1f}s':>11}")
    print(f"{'expired leases':<12} {report['expired_leases']:>10}")
    if report["deleted_at_send"]:
        print(f"{'deleted at send (last day)':<12} {report['deleted_at_send']:>10}")
    print(f"{'stalled keys':<12} {report['stalled_keys']:>12}")
    for key in report["stalled_sample"]:
        print(f"  {key['key']}: {key['why']}\n    fix: {key['fix']}")
    print(f"{'pauses':<12} {len(report['pauses']):>12}")
    for p in report["pauses"]:
        why = f" ({p['reason']})" if p["reason"] else ""
        print(f"  {p['kind']} {p['value']!r} for {p['age_seconds']:.0f}s{why}")
    return 0


def _pauses(settings: Settings) -> list[dict[str, Any]]:
    """The pauses in force (``relay paused``), for the report."""
    from relay.store.operations.pausing import PauseStore

    return [p.as_dict() for p in PauseStore.from_url(settings.database_url).paused()]


def watch(store: OperationsStore, *, interval: float = 1.0, count: int | None = None) -> int:
    """Redraw counts, send rate, oldest pending age and expired leases until Ctrl-C (or
    ``count`` refreshes)."""
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError as exc:
        raise ConfigError(
            "relay status --watch needs the [watch] extra: "
            f"pip install 'celery-outbox-relay[watch]' ({exc.name} is missing)"
        ) from exc
    previous: tuple[float, int] | None = None
    shown = 0
    try:
        with Live(console=Console(), auto_refresh=False) as live:
            while count is None or shown < count:
                report, now = store.status().as_dict(), time.monotonic()
                sent = int(report["counts"].get("sent", 0)) + int(report["deleted_at_send"])
                rate = None
                if previous is not None and now > previous[0]:
                    rate = max(0.0, (sent - previous[1]) / (now - previous[0]))
                previous = (now, sent)
                live.update(_table(report, rate), refresh=True)
                shown += 1
                if count is None or shown < count:
                    time.sleep(interval)
    except KeyboardInterrupt:
        pass
    return 0


def _table(report: dict[str, Any], rate: float | None) -> Table:
    from rich.table import Table

    table = Table(title="relay status (Ctrl-C to quit)", show_header=True)
    table.add_column("status")
    table.add_column("rows", justify="right")
    for status, n in report["counts"].items():
        style = "bold red" if status == "failed" and n else None
        table.add_row(status, f"{n:,}", style=style)
    age = report["oldest_pending_age_seconds"]
    table.add_section()
    table.add_row("sent / s", "-" if rate is None else f"{rate:,.0f}")
    table.add_row("oldest pending", "-" if age is None else f"{age:,.1f} s")
    expired = report["expired_leases"]
    table.add_row("expired leases", str(expired), style="yellow" if expired else None)
    stalled = report["stalled_keys"]
    table.add_row("stalled keys", str(stalled), style="yellow" if stalled else None)
    return table


COMMAND = Command(
    "status",
    "rows per status, oldest pending age, failed count, stalled ordering keys",
    _arguments,
    _run,
    uses=DATABASE_ONLY,
)
