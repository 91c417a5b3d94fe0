"""The import layers hold: the floors of ``relay/__init__.py``'s docstring (docs/development.md's
Layout draws them too), each room importing only its own floor or those below."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import import_graph

PACKAGE = Path(__file__).resolve().parents[2] / "relay"


#: Every third-party package that does I/O or drives a framework.
_IO = frozenset({"sqlalchemy", "kombu", "celery", "amqp", "redis"})
#: What the optional extras bring.
_EXTRAS = frozenset({"prometheus_client", "opentelemetry"})

#: Module -> the third-party packages importing it must not load (by its floor: FLOORS below).
#: Moving a module means renaming its key here; a key naming no module fails its test.
FORBIDDEN: dict[str, frozenset[str]] = {
    "relay.policy": _IO,
    "relay.dispatch.decisions": _IO,
    "relay.dispatch.batching": _IO,
    "relay.wakeup.polling": _IO,
    "relay.retention.pacing": _IO,
    "relay.store.dispatch_path.lease_sweep": _IO,
    "relay.ordering": _IO,
    "relay.threads": _IO,
    "relay.runners.many.schedule": _IO,
    "relay.config": _IO,
    "relay.records": frozenset({"celery", "kombu", "sqlalchemy"}),
    "relay.store.dispatch_path.store": frozenset({"amqp", "celery", "kombu"}),
    "relay.store.operations.store": frozenset({"amqp", "celery", "kombu"}),
    "relay.store.dispatch_path.protocol": frozenset({"celery", "kombu", "sqlalchemy"}),
    "relay.store.dialects.postgresql": frozenset({"amqp", "celery", "kombu"}),
    "relay.publishers": _IO,
    "relay.publishers.amqp": frozenset({"celery", "sqlalchemy"}),
    "relay.publishers.frames": frozenset({"amqp", "celery", "kombu", "sqlalchemy"}),
    "relay.store.engine": frozenset({"amqp", "celery", "kombu"}),
    "relay.publishers.virtual": frozenset({"celery", "sqlalchemy"}),
    "relay.testing": frozenset({"celery", "kombu", "sqlalchemy"}),
    # pytest loads it in every project that installs the relay: fixtures only, nothing heavy.
    "relay.testing.pytest_plugin": frozenset({"celery", "kombu", "sqlalchemy"}),
    "relay.publishers.transports": frozenset({"celery", "sqlalchemy"}),
    "relay": frozenset({"celery", "django", "kombu", "sqlalchemy"}),
    "relay.django": frozenset({"celery", "kombu"}),
    "relay.dispatch.dispatcher": frozenset({"celery"}) | _EXTRAS,
    "relay.dispatch.cycle": frozenset({"celery"}) | _EXTRAS,
    "relay.observe.observers": frozenset({"celery", "kombu", "sqlalchemy"}) | _EXTRAS,
    "relay.observe.tracing": frozenset({"celery", "kombu", "sqlalchemy"}) | _EXTRAS,
    "relay.produce.enqueue": frozenset({"celery", "kombu"}) | _EXTRAS,
    "relay.aio": frozenset({"celery", "kombu"}) | _EXTRAS,
    "relay.consume.inbox": frozenset({"amqp", "celery", "kombu"}),
    "relay.inbox": frozenset({"amqp", "celery", "kombu"}),
    "relay.consume": frozenset({"celery", "kombu", "sqlalchemy"}),
    "relay.consume.consumer": frozenset({"celery"}) | _EXTRAS,
    "relay.consume.deadletters": frozenset({"celery", "sqlalchemy"}),
    "relay.wakeup.watcher": frozenset({"amqp", "celery", "kombu", "redis"}),
    "relay.console": frozenset({"amqp", "celery", "kombu", "prometheus_client", "redis"}),
    "relay.runners.loop": frozenset({"celery", "kombu", "psycopg"}) | _EXTRAS,
    "relay.commands": frozenset(
        {"amqp", "celery", "kombu", "prometheus_client", "psycopg", "rich", "starlette"}
    ),
}

#: The import-time graph of this checkout's package and of what it imports, read from sources
#: (tests/support/import_graph.py): one reading instead of an interpreter per module.
IMPORTS = import_graph.ImportGraph(
    [str(PACKAGE.parent), *sys.path],
    hidden={
        # register_yaml(), called at the end of the module, imports PyYAML when it is there.
        "kombu.serialization": ["yaml"],
        # Its package imports greenlet through a shim it initialises at import.
        "sqlalchemy.ext.asyncio": ["greenlet"],
    },
)


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_module_does_not_load_a_lower_layer(module: str) -> None:
    """Importing a layer loads none of the packages it must not depend on."""
    assert IMPORTS.exists(module), f"FORBIDDEN names {module}, which does not exist: moved?"
    loaded = import_graph.top_level(IMPORTS.loaded_by([module]))
    chains = [" -> ".join(IMPORTS.chain(module, p)) for p in sorted(loaded & FORBIDDEN[module])]
    assert chains == []


#: Imported one after the other in one fresh interpreter, to hold the static view to the real
#: one: the package's front door, a light layer beside it, then one that loads Kombu.
_CHECKED = ("relay", "relay.policy", "relay.publishers.transports")

#: Prints, as JSON, the modules each of its arguments' imports added to ``sys.modules``; then
#: (needing the same fresh interpreter) checks that ``import relay.publishers.transports``
#: changed no Kombu alias and that ``register()`` does, idempotently.
_REALITY = """
import json, sys
added, before = {}, set(sys.modules)
for name in sys.argv[1:]:
    __import__(name)
    added[name] = sorted(set(sys.modules) - before)
    before = set(sys.modules)
import kombu.transport as k, relay.publishers.transports as t
before = k.TRANSPORT_ALIASES['filesystem']
assert before != 'relay.publishers.transports:Transport', before
t.register(); t.register()
assert k.TRANSPORT_ALIASES['filesystem'] == 'relay.publishers.transports:Transport'
import kombu
assert kombu.Connection('filesystem://').transport_cls == 'filesystem'
assert isinstance(kombu.Connection('filesystem://').transport, t.Transport)
print(json.dumps(added))
"""


@pytest.fixture(scope="module")
def reality() -> dict[str, list[str]]:
    """What importing each of :data:`_CHECKED` added to a fresh interpreter's modules."""
    run = subprocess.run(
        [sys.executable, "-c", _REALITY, *_CHECKED],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
    )
    assert run.returncode == 0, run.stderr
    added: dict[str, list[str]] = json.loads(run.stdout)
    return added


def test_the_static_view_agrees_with_an_interpreter(reality: dict[str, list[str]]) -> None:
    """For a few modules imported in turn, the static graph predicts exactly the ``relay``
    modules a real import loads, and every third-party package it loads (the graph may name
    more: it counts both branches of an ``if`` or a ``try``)."""
    earlier: set[str] = set()
    for module in _CHECKED:
        predicted = IMPORTS.loaded_by([module]) - earlier
        earlier |= predicted
        real = set(reality[module])
        ours = {m for m in real if m.split(".")[0] == "relay"}
        assert ours == {m for m in predicted if m.split(".")[0] == "relay"}, module
        unseen = import_graph.third_party(real) - import_graph.third_party(predicted)
        assert unseen == set(), module


def test_importing_transports_leaves_kombu_alone_until_registered(
    reality: dict[str, list[str]],
) -> None:
    """``import relay.publishers.transports`` changes no Kombu alias; ``register()`` does,
    idempotently (asserted in the interpreter of :func:`reality`, which fails otherwise)."""
    assert "kombu" in import_graph.top_level(reality["relay.publishers.transports"])


def test_only_the_celery_glue_and_cli_import_celery() -> None:
    """Nothing but the modules of relay/celery/ and the demo command (which starts a worker)
    names celery in an import."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE / "celery" or path == PACKAGE / "commands" / "demo_run.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "celery"]
    assert offenders == []


#: Runs with OpenTelemetry made unimportable, as if it were not installed.
_WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # an import of it now raises ImportError
import sqlalchemy as sa
import relay
from relay.dispatch import runtime
from relay.observe import observers as observe
from relay.observe import tracing
from relay.config import Settings
from relay.store.schema.tables import metadata, outbox
engine = sa.create_engine("sqlite://")
metadata.create_all(engine)
with engine.begin() as conn:
    relay.enqueue(conn, "shop.order", {}, headers=None)
    relay.enqueue(conn, "shop.order", {}, headers={"tenant": "a"})
with engine.connect() as conn:
    print(list(conn.execute(sa.select(outbox.c.headers).order_by(outbox.c.id)).scalars()))
assert not tracing.available()
assert type(runtime.observer(Settings())) is observe.Observer
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


#: The floors, lowest first (``relay/__init__.py``'s docstring draws the same map). A module may
#: import its own floor or any below, never one above; a room not named here fails the test
#: until it is given a floor.
#: - settings, errors, value objects, lease-derived times and pure policy import nothing above
#:   (the pure decisions that live beside their users in dispatch/, wakeup/, retention/ and
#:   store/ too), nor does the lifecycle of the background threads that the publishers,
#:   dispatch, wake-ups and retention share;
#: - the store, the publishers and the observers (which the dispatcher and the producer call)
#:   stand on them, and ``relay.testing`` ships a publisher double;
#: - the producer API (and ``relay`` itself, which re-exports it) writes through the store and
#:   carries trace context; the migrations run on the store's schema;
#: - consuming (its inbox commits through the producer's transaction), dispatching (claim ->
#:   publish -> record, and the one per-database runtime), wake-ups, retention and replay use
#:   all of the above;
#: - the runners drive per-database runtimes: when and how many (the loop, many databases in
#:   one process, a process per database);
#: - the Celery glue, the console and the pytest plugin (``relay.testing.outbox``) drive
#:   dispatchers, consumers and the store; the Django
#:   glue writes through the producer and builds task messages with the Celery glue;
#: - the CLI commands sit on top of everything (``relay demo`` runs a Celery worker).
FLOORS: tuple[tuple[str, ...], ...] = (
    (
        "relay.exceptions",
        "relay.records",
        "relay.policy",
        "relay.ordering",
        "relay.config",
        "relay.dispatch.decisions",
        "relay.dispatch.batching",
        "relay.wakeup.polling",
        "relay.retention.pacing",
        "relay.store.dispatch_path.lease_sweep",
        "relay.threads",
    ),
    ("relay.store", "relay.publishers", "relay.observe", "relay.testing"),
    ("relay", "relay.aio", "relay.produce", "relay.migrations"),
    (
        "relay.consume",
        "relay.inbox",
        "relay.dispatch",
        "relay.wakeup",
        "relay.retention",
        "relay.replays",
    ),
    ("relay.runners",),
    (
        "relay.celery",
        "relay.console",
        "relay.django",
        "relay.testing.outbox",
        "relay.testing.pytest_plugin",
    ),
    ("relay.commands", "relay.__main__"),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


#: Every module of the package (the migration scripts are Alembic's, loaded by path).
MODULES = {
    _module_name(p): p
    for p in PACKAGE.rglob("*.py")
    if "versions" not in p.relative_to(PACKAGE).parts
}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> set[str]:
    """The modules of ``relay`` that ``module`` imports anywhere in its body (functions too),
    outside ``if TYPE_CHECKING:``. ``from package import name`` imports the submodule when
    ``name`` is one, else the package's ``__init__`` (a re-export); the implicit import of a
    module's parent packages is not counted (every submodule would otherwise close a circle
    with an ``__init__`` that re-exports it)."""
    named: set[str] = set()
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit_node(other)
            else:
                visit_node(child)

    def visit_node(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1]
                base = ".".join([*up, node.module] if node.module else up)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                named.add(sub if sub in MODULES else base)
        visit(node)

    visit(ast.parse(path.read_text()))
    found = set()
    for name in named:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name.startswith("relay") and name != module:
            found.add(name)
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _floor(module: str) -> int:
    rooms = {room: n for n, floor in enumerate(FLOORS) for room in floor}
    name = module
    while name not in rooms:
        assert "." in name, f"{module} is on no floor: give its room one in FLOORS"
        name = name.rpartition(".")[0]
    return rooms[name]


def test_no_import_runs_up_a_floor() -> None:
    """No module of ``relay`` imports one on a higher floor (see FLOORS)."""
    upward = sorted(
        f"{module} (floor {_floor(module)}) imports {target} (floor {_floor(target)})"
        for module, targets in GRAPH.items()
        for target in targets
        if _floor(target) > _floor(module)
    )
    assert upward == []


def test_no_import_circle() -> None:
    """No set of ``relay`` modules imports itself round a circle (strongly connected
    components of the import graph, Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def connect(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in GRAPH[module]:
            if target not in index:
                connect(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component: list[str] = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            connect(module)
    assert circles == []


def test_the_graph_sees_function_level_imports_and_skips_type_checking() -> None:
    """The graph counts an import inside a function (the runtime loads metrics lazily) and leaves
    out one under ``if TYPE_CHECKING:`` (the console's pages name ``Console`` only for mypy)."""
    assert "relay.observe.metrics" in GRAPH["relay.dispatch.runtime"]
    assert "relay.console.context" not in GRAPH["relay.console.pages"]
    assert "relay.commands.rows" in GRAPH["relay.commands"]


def test_the_package_stays_small_enough_to_read() -> None:
    """No folder of ``relay/`` holds more than 14 modules directly, ``relay/`` itself lists at
    most 25 entries (its ``__init__.py`` and ``__main__.py`` aside), and no module is over 400
    lines: a reader sees the rooms in the folder names and each room at a glance."""
    entries = [p.name for p in PACKAGE.iterdir() if not p.name.startswith((".", "__"))]
    assert len(entries) <= 25, sorted(entries)
    # relay/migrations/versions/ is the Alembic chain, one frozen script a revision: the
    # applications that chain it into their own history name that folder in their
    # version_locations (migrations/app-example/alembic.ini), so it cannot be split.
    crowded = {
        str(folder.relative_to(PACKAGE.parent)): n
        for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]
        if (n := len(list(folder.glob("*.py")))) > 14 and folder.name != "versions"
    }
    assert crowded == {}
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert long == {}
