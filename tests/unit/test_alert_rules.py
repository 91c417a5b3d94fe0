"""The shipped Prometheus rules (deploy/prometheus/alerts.yml): valid, unit-tested by promtool,
and each alert complete (severity, summary, description, a runbook section that exists).

No server: ``promtool`` is a binary (skipped locally when missing, failed in CI). That a running
relay exports every series the rules query is tests/acceptance/test_metrics_kit.py; that a real
Prometheus fires them is tests/integration/test_prometheus_alerts.py.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.support.prometheus import ROOT, RULE_TESTS, RULES, promtool, series_in, shortened

RUNBOOKS = ROOT / "docs" / "runbooks.md"
OPERATIONS = ROOT / "docs" / "operations.md"


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [r for r in _rules() if "alert" in r]


def _anchor(heading: str) -> str:
    """The anchor MkDocs (and GitHub) give a heading made of one word."""
    return re.sub(r"[^a-z0-9-]", "", heading.strip().lower().replace(" ", "-"))


def test_promtool_checks_the_rules() -> None:
    done = promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout


def test_promtool_unit_tests_pass() -> None:
    """deploy/prometheus/tests.yml: each alert fires on its failure's series (not before its
    ``for:``) and no alert fires on a healthy relay's."""
    done = promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_complete_and_reaches_its_runbook() -> None:
    headings = {
        _anchor(line[3:]) for line in RUNBOOKS.read_text().splitlines() if line.startswith("## ")
    }
    for alert in _alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in {"critical", "warning"}, name
        notes = alert["annotations"]
        assert notes["summary"], name
        assert notes["description"], name
        page, _, anchor = notes["runbook_url"].partition("#")
        assert page == "docs/runbooks.md", name
        assert anchor == name.lower(), name
        assert anchor in headings, f"{name}: no runbook section"
        # Directly, or through a recording rule that does (every relay: rule selects it).
        assert 'job="relay"' in alert["expr"] or "relay:" in alert["expr"], name
    for rule in _rules():
        if "record" in rule:
            assert 'job="relay"' in rule["expr"], rule["record"]


def test_every_alert_is_tested_firing_and_quiet() -> None:
    """tests.yml holds, for every alert, a case where it fires, and the healthy case lists
    every alert as quiet: an alert added without its tests fails here."""
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case["alert_rule_test"] if t["exp_alerts"]}
    healthy = next(c for c in tests if c["name"].startswith("a healthy relay"))
    quiet = {t["alertname"] for t in healthy["alert_rule_test"] if not t["exp_alerts"]}
    names = {a["alert"] for a in _alerts()}
    assert fired == names
    assert quiet == names


def test_every_series_the_rules_query_is_in_the_documented_metric_list() -> None:
    documented = series_in(
        "\n".join(
            line for line in OPERATIONS.read_text().splitlines() if line.startswith("| `relay_")
        )
    )
    queried = series_in(RULES.read_text())
    assert queried, "no relay_ series found in the rules"
    # Counters are documented with their _total suffix, as they are queried.
    assert queried <= documented, sorted(queried - documented)


def test_shortening_rewrites_every_for_and_nothing_else() -> None:
    text = RULES.read_text()
    short = shortened(text, 3)
    assert short.count("for: 3s") == text.count("for: ")
    assert yaml.safe_load(short)["groups"][0]["rules"][0] == _rules()[0]
