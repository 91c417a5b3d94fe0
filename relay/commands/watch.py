"""``relay status --watch``: a live terminal view of the outbox, refreshed every second."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from relay.store.operations import OperationsStore


def watch(store: OperationsStore, *, interval: float = 1.0, count: int | None = None) -> int:
    """Redraw counts, send rate, oldest pending age and expired leases until Ctrl-C (or
    ``count`` refreshes)."""
    console = Console()
    previous: tuple[float, int] | None = None
    shown = 0
    try:
        with Live(console=console, auto_refresh=False) as live:
            while count is None or shown < count:
                report, now = store.status().as_dict(), time.monotonic()
                sent = int(report["counts"].get("sent", 0))
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
    return table
