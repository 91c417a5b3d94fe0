"""The benchmark's sections, each one function of the plan returning a JSON-able dict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import (
    ceiling,
    console,
    consumer,
    fixtures,
    history,
    metrics_cost,
    ordering,
    phases,
    polling_latency,
    services,
    tasks,
    throughput,
    versus,
    wakeup,
)
from bench import fleet as celery_fleet
from bench import latency as wakeup_latency
from bench.plan import Plan


def env(plan: Plan) -> dict[str, Any]:
    return services.versions()


def publish_ceiling(plan: Plan) -> dict[str, Any]:
    return ceiling.publish_ceilings(
        services.AMQP_URL, services.REDIS_URL, plan.publish_messages, plan.reps, plan.windows
    )


def sql_ceiling(plan: Plan) -> dict[str, Any]:
    with fixtures.database("sql") as url, fixtures.route(services.AMQP_URL, "sql") as route:
        return ceiling.sql_ceiling(
            url, route, plan.grid_rows, plan.reps, plan.processes, plan.batches
        )


def naive(plan: Plan) -> dict[str, Any]:
    with fixtures.database("naive") as url, fixtures.route(services.AMQP_URL, "naive") as route:
        return throughput.naive(url, route, plan.naive_rows, plan.reps, plan.naive_processes)


def relay_rabbitmq(plan: Plan) -> dict[str, Any]:
    with fixtures.database("rabbit") as url, fixtures.route(services.AMQP_URL, "relay") as route:
        return throughput.relay_grid(
            url, route, plan.grid_rows, plan.reps, plan.processes, plan.batches
        )


def relay_redis(plan: Plan) -> dict[str, Any]:
    with fixtures.database("redis") as url, fixtures.route(services.REDIS_URL, "relay") as route:
        return throughput.relay_grid(
            url, route, plan.grid_rows, plan.reps, plan.redis_processes, plan.redis_batches
        )


def relay_phases(plan: Plan) -> dict[str, Any]:
    return phases.run(services.AMQP_URL, plan.grid_rows, [100, 500])


def latency_polling(plan: Plan) -> dict[str, Any]:
    return polling_latency.run(
        services.AMQP_URL, plan.latency_rates, plan.latency_ticks, plan.latency_seconds
    )


def history_scaling(plan: Plan) -> dict[str, Any]:
    return history.run(
        services.AMQP_URL, plan.history_sizes, plan.history_pending, plan.history_reps
    )


def fleet(plan: Plan) -> dict[str, Any]:
    return celery_fleet.run(quick=plan.name == "quick")


def latency_wakeup(plan: Plan) -> dict[str, Any]:
    return wakeup_latency.run(quick=plan.name == "quick")


def relay_vs_kombu(plan: Plan) -> dict[str, Any]:
    return versus.run(
        services.AMQP_URL, plan.versus_events, plan.reps, plan.versus_processes, plan.baselines
    )


SECTIONS: dict[str, Callable[[Plan], dict[str, Any]]] = {
    "env": env,
    "versus": relay_vs_kombu,
    "publish_ceiling": publish_ceiling,
    "sql_ceiling": sql_ceiling,
    "naive": naive,
    "relay_rabbitmq": relay_rabbitmq,
    "relay_redis": relay_redis,
    "relay_phases": relay_phases,
    "latency_polling": latency_polling,
    "history": history_scaling,
    "fleet": fleet,
    "latency_wakeup": latency_wakeup,
    "ordering": ordering.run,
    "wakeup": wakeup.run,
    "metrics_cost": metrics_cost.run,
    "console": console.run,
    "consumer": consumer.section,
    "tasks": tasks.section,
}
