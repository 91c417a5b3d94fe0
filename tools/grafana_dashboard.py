"""``deploy/grafana/relay.json``, the relay's Grafana dashboard, generated from this code so it is
reviewed as code and regenerated, never edited by hand.

A small generator of our own rather than a dashboard SDK: the panels are a list of rows of
(title, PromQL, unit) below, and the JSON is the subset of Grafana's dashboard model (schema 39,
Grafana 10 and later) that import needs. The queries use the recording rules of
``deploy/prometheus/alerts.yml`` where an alert and a panel share an expression, so the
dashboard shows what the alerts test.

``python -m tools.grafana_dashboard`` writes the file; ``--check`` exits 1 when the committed
file differs (``tests/unit/test_grafana_dashboard.py`` does the same).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "relay.json"

#: Every query's selector: the variables of the dashboard (``source`` matches gauges without
#: the label too: a one-database endpoint carries none, and ".*" matches the empty value).
SEL = 'job="$job", instance=~"$instance"'
SRC = 'job="$job", source=~"$source"'
#: The data source every query reads: the dashboard's ``datasource`` variable.
DS = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True)
class Panel:
    """One time series (or stat) panel: a title, its queries as (PromQL, legend), a unit."""

    title: str
    queries: tuple[tuple[str, str], ...]
    unit: str = "short"
    description: str = ""
    kind: str = "timeseries"
    #: Grid width (of 24).
    width: int = 8


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def _q(expr: str, legend: str) -> tuple[str, str]:
    return (expr, legend)


def _quantile(q: float, histogram: str) -> tuple[str, str]:
    """The ``q`` quantile of a histogram over every selected relay, as a query and its legend."""
    rate = f"rate({histogram}_bucket{{{SEL}}}[5m])"
    return (f"histogram_quantile({q}, sum by (le) ({rate}))", f"p{round(q * 100)}")


ROWS: tuple[Row, ...] = (
    Row(
        "Delivery",
        (
            Panel(
                "Events per second",
                (
                    _q(
                        f"sum by (event_type) (rate(relay_events_sent_total{{{SEL}}}[5m]))",
                        "sent {{event_type}}",
                    ),
                    _q(f"sum(rate(relay_events_failed_total{{{SEL}}}[5m]))", "failed"),
                    _q(f"sum(rate(relay_events_rescheduled_total{{{SEL}}}[5m]))", "rescheduled"),
                ),
                "ops",
                "Rows marked sent (by event type), dead-lettered and rescheduled by the relays.",
                width=12,
            ),
            Panel(
                "Oldest pending event",
                (_q(f"relay:oldest_pending_age_seconds:max{{{SRC}}}", "{{source}}"),),
                "s",
                "Age of the oldest pending row per database (RelayBacklogAging above 300 s).",
                width=6,
            ),
            Panel(
                "Pending rows",
                (_q(f"relay:pending_rows:max{{{SRC}}}", "{{source}}"),),
                "short",
                "Pending rows per database, counted up to 100,000.",
                width=6,
            ),
            Panel(
                "Since the last confirmed publish",
                (_q('relay:last_publish_success_age_seconds{job="$job"}', "age"),),
                "s",
                "Seconds since any relay of the job had a batch confirmed (RelayDeliveryStopped).",
                kind="stat",
                width=6,
            ),
            Panel(
                "Relays up",
                (_q(f"sum(up{{{SEL}}})", "up"),),
                "short",
                "Relay endpoints the last scrape reached (RelayNoneAlive at 0).",
                kind="stat",
                width=6,
            ),
        ),
    ),
    Row(
        "Latency",
        (
            Panel(
                "Commit to broker (lag)",
                (
                    _quantile(0.5, "relay_delivery_lag_seconds"),
                    _quantile(0.99, "relay_delivery_lag_seconds"),
                ),
                "s",
                "A row's created_at to the relay recording it sent.",
            ),
            Panel(
                "Publish latency",
                (
                    _quantile(0.5, "relay_publish_seconds"),
                    _quantile(0.99, "relay_publish_seconds"),
                ),
                "s",
                "Publishing one batch, until the broker's last confirm.",
            ),
            Panel(
                "Claim transaction",
                (_quantile(0.99, "relay_claim_seconds"),),
                "s",
                "The transaction that leases a batch.",
            ),
        ),
    ),
    Row(
        "Dead letters and expiry",
        (
            Panel(
                "Dead letters",
                (_q(f"relay:failed_rows:max{{{SRC}}}", "{{source}}"),),
                "short",
                "Failed rows waiting for an operator (RelayDeadLetters).",
            ),
            Panel(
                "Dead-lettered per second",
                (_q(f"relay:events_failed:rate5m{{{SRC}}}", "{{source}}"),),
                "ops",
            ),
            Panel(
                "Expired unpublished",
                (
                    _q(
                        f"sum by (event_type) (increase(relay_events_expired_total{{{SEL}}}[10m]))",
                        "{{event_type}}",
                    ),
                ),
                "short",
                "Events past their deadline, dead-lettered unpublished (RelayEventsExpired).",
            ),
        ),
    ),
    Row(
        "Broker",
        (
            Panel(
                "Circuit breaker open",
                (_q(f"max by (instance) (relay_breaker_open{{{SEL}}})", "{{instance}}"),),
                "short",
                "1 while a relay finds the broker unreachable (RelayBrokerUnreachable).",
            ),
            Panel(
                "Blocked by the broker",
                (_q(f"max by (instance) (relay_broker_blocked{{{SEL}}})", "{{instance}}"),),
                "short",
                "1 while RabbitMQ blocks publishing: a memory or disk alarm (RelayBrokerBlocked).",
            ),
            Panel(
                "Rows given back",
                (
                    _q(
                        f"sum by (instance) (rate(relay_events_released_total{{{SEL}}}[5m]))",
                        "{{instance}}",
                    ),
                ),
                "ops",
                "Rows given back without spending an attempt (broker down, behind a failed row).",
            ),
        ),
    ),
    Row(
        "Leases and keys",
        (
            Panel(
                "Expired leases",
                (_q(f"max by (source) (relay_expired_leases{{{SRC}}})", "{{source}}"),),
                "short",
                "Processing rows whose lease ran out: a dead relay's (RelayLeasesExpired).",
            ),
            Panel(
                "Leases lost",
                (
                    _q(
                        f"sum by (instance) (increase(relay_lease_lost_total{{{SEL}}}[15m]))",
                        "{{instance}}",
                    ),
                ),
                "short",
                "Rows another relay reclaimed before this one recorded them (RelayLeaseLost).",
            ),
            Panel(
                "Stalled keys",
                (_q(f"max by (source) (relay_stalled_keys{{{SRC}}})", "{{source}}"),),
                "short",
                "Ordering keys whose next row cannot be claimed (RelayStalledKeys).",
            ),
        ),
    ),
    Row(
        "Levers",
        (
            Panel(
                "Pauses in force",
                (_q(f"max by (source) (relay_pauses{{{SRC}}})", "{{source}}"),),
                "short",
            ),
            Panel(
                "Paused rows",
                (_q(f"max by (source) (relay_paused_rows{{{SRC}}})", "{{source}}"),),
                "short",
                "Pending rows held back by the pauses.",
            ),
            Panel(
                "Oldest pause",
                (_q(f"max by (source) (relay_oldest_pause_age_seconds{{{SRC}}})", "{{source}}"),),
                "s",
                "Age of the oldest pause in force (RelayPausedTooLong).",
            ),
        ),
    ),
    Row(
        "Connections (many databases)",
        (
            Panel(
                "Connection budget",
                (
                    _q(
                        f"max by (instance) (relay_connections_budget{{{SEL}}})",
                        "budget {{instance}}",
                    ),
                    _q(
                        f"max by (instance) (relay_connections_in_use{{{SEL}}})",
                        "in use {{instance}}",
                    ),
                ),
                "short",
                "RELAY_MAX_CONNECTIONS and the connections held (RelayConnectionBudgetExhausted).",
                width=12,
            ),
            Panel(
                "Databases waiting",
                (
                    _q(
                        f"max by (instance) (relay_databases_waiting{{{SEL}}})",
                        "waiting {{instance}}",
                    ),
                    _q(f"max by (instance) (relay_databases{{{SEL}}})", "relayed {{instance}}"),
                ),
                "short",
                "Databases due for a claim, waiting for a connection.",
                width=12,
            ),
        ),
    ),
    Row(
        "Retention, replay, the gauges' reads",
        (
            Panel(
                "Purge behind",
                (_q(f"max by (source) (relay_outbox_purge_behind_rows{{{SRC}}})", "{{source}}"),),
                "short",
                "Sent rows past the retention the last purge left (RelayRetentionBehind).",
                width=6,
            ),
            Panel(
                "Oldest sent row kept",
                (_q(f"max by (source) (relay_oldest_sent_age_seconds{{{SRC}}})", "{{source}}"),),
                "s",
                width=6,
            ),
            Panel(
                "Replayed per second",
                (_q("sum by (source) (rate(relay_events_replayed_total[5m]))", "{{source}}"),),
                "ops",
                "Sent events published again by a replay (counted by the replaying process).",
                width=6,
            ),
            Panel(
                "Outbox gauges read",
                (
                    _q(f"min by (instance) (relay_outbox_up{{{SEL}}})", "up {{instance}}"),
                    _q(
                        f"max by (instance) (relay_outbox_read_seconds{{{SEL}}})",
                        "seconds {{instance}}",
                    ),
                ),
                "short",
                "Whether the endpoint could read the outbox (RelayOutboxUnreadable), and the cost.",
                width=6,
            ),
        ),
    ),
)


def _variable(name: str, query: str, *, include_all: bool) -> dict[str, Any]:
    var: dict[str, Any] = {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "includeAll": include_all,
        "multi": include_all,
    }
    if include_all:
        var["allValue"] = ".*"
        var["current"] = {"text": "All", "value": "$__all"}
    return var


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DS,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}}
        if panel.kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"]}},
        "targets": [
            {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def render() -> str:
    """The dashboard's JSON text, as committed."""
    panels: list[dict[str, Any]] = []
    y, next_id = 0, 1
    for row in ROWS:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id, y, x = next_id + 1, y + 1, 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y = 0, y + 8
            panels.append(_panel(panel, next_id, x, y))
            next_id, x = next_id + 1, x + panel.width
        y += 8
    dashboard = {
        "title": "celery-outbox-relay",
        "uid": "celery-outbox-relay",
        "description": "Generated by tools/grafana_dashboard.py (alerts: deploy/prometheus).",
        "tags": ["outbox", "celery", "relay"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "links": [],
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                },
                {
                    "name": "job",
                    "label": "job",
                    "type": "custom",
                    "query": "relay",
                    "current": {"text": "relay", "value": "relay"},
                },
                _variable(
                    "source", 'label_values(relay_outbox_up{job="$job"}, source)', include_all=True
                ),
                _variable("instance", 'label_values(up{job="$job"}, instance)', include_all=True),
            ]
        },
        "panels": panels,
    }
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run python -m tools.grafana_dashboard", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
