"""The import layers of DESIGN.md §4 hold."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "relay"


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return {name.split(".")[0] for name in out.split()}


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("relay.policy", {"sqlalchemy", "kombu", "celery", "amqp", "redis"}),
        ("relay.ordering", {"sqlalchemy", "kombu", "celery", "amqp", "redis"}),
        ("relay.config", {"sqlalchemy", "kombu", "celery", "amqp", "redis"}),
        ("relay.records", {"sqlalchemy", "kombu", "celery"}),
        ("relay.store.dispatch", {"kombu", "celery", "amqp"}),
        ("relay.store.operations", {"kombu", "celery", "amqp"}),
        ("relay.store.protocol", {"sqlalchemy", "kombu", "celery"}),
        ("relay.store.dialects.postgresql", {"kombu", "celery", "amqp"}),
        ("relay.publishers", {"sqlalchemy", "celery", "kombu", "amqp", "redis"}),
        ("relay.publishers.amqp", {"sqlalchemy", "celery"}),
        ("relay.publishers.frames", {"sqlalchemy", "celery", "kombu", "amqp"}),
        ("relay.store.engine", {"kombu", "celery", "amqp"}),
        ("relay.publishers.virtual", {"sqlalchemy", "celery"}),
        ("relay.testing", {"sqlalchemy", "kombu", "celery"}),
        ("relay.publishers.transports", {"sqlalchemy", "celery"}),
        ("relay", {"celery", "kombu"}),
        ("relay.dispatch.dispatcher", {"celery", "prometheus_client", "opentelemetry"}),
        ("relay.dispatch.cycle", {"celery", "prometheus_client", "opentelemetry"}),
        (
            "relay.observe.observers",
            {"sqlalchemy", "kombu", "celery", "prometheus_client", "opentelemetry"},
        ),
        (
            "relay.observe.tracing",
            {"sqlalchemy", "kombu", "celery", "prometheus_client", "opentelemetry"},
        ),
        ("relay.produce.enqueue", {"kombu", "celery", "prometheus_client", "opentelemetry"}),
        ("relay.consume.inbox", {"kombu", "celery", "amqp"}),
        ("relay.consume.consumer", {"celery", "prometheus_client", "opentelemetry"}),
        ("relay.consume.deadletters", {"sqlalchemy", "celery"}),
        ("relay.dispatch.listener", {"kombu", "celery", "amqp", "redis"}),
        ("relay.console", {"kombu", "celery", "amqp", "redis", "prometheus_client"}),
    ],
)
def test_module_does_not_load_a_lower_layer(module: str, forbidden: set[str]) -> None:
    """Importing a layer loads none of the packages it must not depend on."""
    assert _loaded_after_import(module) & forbidden == set()


def test_only_the_celery_glue_and_cli_import_celery() -> None:
    """Nothing but the modules of relay/celery/ and the demo command (which starts a worker)
    names celery in an import."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE / "celery" or path == PACKAGE / "commands" / "demo.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "celery"]
    assert offenders == []


def test_importing_transports_leaves_kombu_alone_until_registered() -> None:
    """``import relay.publishers.transports`` changes no Kombu alias; ``register()`` does,
    idempotently."""
    code = (
        "import kombu.transport as k, relay.publishers.transports as t\n"
        "before = k.TRANSPORT_ALIASES['filesystem']\n"
        "assert before != 'relay.publishers.transports:Transport', before\n"
        "t.register(); t.register()\n"
        "assert k.TRANSPORT_ALIASES['filesystem'] == 'relay.publishers.transports:Transport'\n"
        "import kombu\n"
        "assert kombu.Connection('filesystem://').transport_cls == 'filesystem'\n"
        "assert isinstance(kombu.Connection('filesystem://').transport, t.Transport)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


#: Runs with OpenTelemetry made unimportable, as if it were not installed.
_WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # an import of it now raises ImportError
import sqlalchemy as sa
import relay
from relay.observe import observers as observe
from relay.observe import tracing
from relay.config import Settings
from relay.store.schema import metadata, outbox
engine = sa.create_engine("sqlite://")
metadata.create_all(engine)
with engine.begin() as conn:
    relay.enqueue(conn, "shop.order", {}, headers=None)
    relay.enqueue(conn, "shop.order", {}, headers={"tenant": "a"})
with engine.connect() as conn:
    print(list(conn.execute(sa.select(outbox.c.headers).order_by(outbox.c.id)).scalars()))
assert not tracing.available()
assert type(observe.for_settings(Settings())) is observe.Observer
with tracing.consuming(object(), "q") as note:
    note("done")
loaded = sorted(n for n in sys.modules if n.startswith(("opentelemetry.", "prometheus_client")))
assert loaded == [], loaded
"""


def test_without_opentelemetry_nothing_changes_and_nothing_is_imported() -> None:
    """With OpenTelemetry absent, enqueue writes the headers it was given, the dispatcher gets
    the no-op observer (metrics off), the consumer hook does nothing, and neither OpenTelemetry
    nor prometheus_client is imported."""
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[None, {'tenant': 'a'}]"
