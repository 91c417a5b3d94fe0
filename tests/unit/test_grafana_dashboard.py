"""deploy/grafana/relay.json is what tools/grafana_dashboard.py makes, and queries only what
exists: documented relay series and the recording rules of deploy/prometheus/alerts.yml."""

from __future__ import annotations

import json
import re

import yaml

from tests.support.prometheus import DASHBOARD, ROOT, RULES, series_in
from tools import grafana_dashboard


def _queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def test_the_committed_dashboard_is_what_the_generator_makes() -> None:
    assert DASHBOARD.read_text() == grafana_dashboard.render(), (
        "stale: run python -m tools.grafana_dashboard"
    )
    assert grafana_dashboard.main(["--check"]) == 0


def test_every_panel_queries_documented_series_and_shipped_recording_rules() -> None:
    queries = _queries()
    assert len(queries) >= 30
    documented = series_in(
        "\n".join(
            line
            for line in (ROOT / "docs" / "operations.md").read_text().splitlines()
            if line.startswith("| `relay_")
        )
    )
    queried = series_in("\n".join(queries))
    assert queried <= documented, sorted(queried - documented)
    groups = yaml.safe_load(RULES.read_text())["groups"]
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    used = set(re.findall(r"\b(relay:[a-z0-9_:]+)", "\n".join(queries)))
    assert used
    assert used <= recorded, sorted(used - recorded)


def test_the_dashboard_covers_what_the_issue_asks_for() -> None:
    """Throughput, backlog, lag, publish latency, dead letters, breaker and broker state,
    leases, connection budget, retention and replay each have a panel."""
    text = "\n".join(_queries())
    for needed in (
        "relay_events_sent_total",
        "relay_events_rescheduled_total",
        "relay:oldest_pending_age_seconds:max",
        "relay_delivery_lag_seconds_bucket",
        "relay_publish_seconds_bucket",
        "relay:failed_rows:max",
        "relay_breaker_open",
        "relay_broker_blocked",
        "relay_expired_leases",
        "relay_connections_in_use",
        "relay_outbox_purge_behind_rows",
        "relay_events_replayed_total",
    ):
        assert needed in text, needed
    variables = {v["name"] for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    assert {"source", "instance", "job", "datasource"} <= variables
