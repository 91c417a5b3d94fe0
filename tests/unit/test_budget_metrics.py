"""The connection budget's gauges of a many-databases relay process (relay.observe.budget)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from relay.observe.budget import BudgetCollector


def test_the_budget_gauges_read_the_scheduler_at_scrape_time() -> None:
    """Each scrape reads the scheduler's numbers: the budget, connections held, databases
    waiting for a connection, databases relayed."""
    values = {"budget": 10, "in_use": 4, "waiting": 0, "databases": 100}
    registry = CollectorRegistry()
    registry.register(BudgetCollector(lambda: values))
    first = generate_latest(registry).decode()
    assert "relay_connections_budget 10.0" in first
    assert "relay_connections_in_use 4.0" in first
    assert "relay_databases_waiting 0.0" in first
    assert "relay_databases 100.0" in first
    values.update(in_use=10, waiting=7)
    again = generate_latest(registry).decode()
    assert "relay_connections_in_use 10.0" in again
    assert "relay_databases_waiting 7.0" in again
