"""Every Python code block of ``README.md`` and ``docs/*.md`` runs as a test (Sybil).

The collector is a glob (:data:`DOC_PATTERNS`), so a new page is picked up by merely existing.
Conventions for a page's Python blocks (``docs/CONTRIBUTING-docs.md`` says the same for writers):

- The blocks of one page run in order in one namespace, in a fresh temporary directory that is
  the working directory, with no ``RELAY_*`` variable set and the relay's tables already
  migrated on the embedded default (``sqlite:///relay.sqlite3``, ``filesystem://``): what a
  newcomer has after ``relay migrate`` in an empty folder. A block defines what it uses (an
  engine, a table) so that a reader can copy it whole.
- A block that needs a database server calls ``service_url("postgresql")`` (or ``"mysql"``),
  which the namespace holds: a migrated database of the page's own from the test services
  (``tests/support/databases.py``, ``RELAY_TEST_*_URL``), dropped after the page; the block is
  skipped when the server is down, and fails under ``CI``.
- A block that cannot run as a test (a fragment of someone else's file, a loop that never
  ends) is preceded by ``<!-- skip: next "why" -->``. Keep those few.
- Blocks in other languages (``sh``, ``sql``, ``ini``, ``yaml``) are not run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent
#: The documents whose Python blocks run; a glob, so new pages need no change here.
DOC_PATTERNS = ("README.md", "docs/*.md")
_STATE = "_relay_docs_state"
#: What a block calls for a database server of its own (see the module's docstring).
_SERVER = "service_url("


def _setup(namespace: dict[str, Any]) -> None:
    """A fresh folder, no RELAY_* variable, the relay's tables migrated on the default."""
    from kombu.transport import filesystem

    from relay.store.schema import upgrade

    folder = Path(tempfile.mkdtemp(prefix="relay-docs-"))
    saved_env = {k: v for k, v in os.environ.items() if k.startswith("RELAY_")}
    for name in saved_env:
        del os.environ[name]
    state = {"cwd": os.getcwd(), "env": saved_env, "folder": folder, "databases": []}
    os.chdir(folder)
    # Kombu's filesystem transport keeps the exchanges and bindings it declared in one
    # process-wide cache: a page declaring `outbox` again in its own folder must write them.
    filesystem.Transport.global_state.clear()
    upgrade.upgrade("sqlite:///relay.sqlite3")
    namespace[_STATE] = state
    namespace["service_url"] = lambda kind: _service_url(state, kind)


def _service_url(state: dict[str, Any], kind: str) -> str:
    """A migrated database of its own on the test service ``kind`` (``postgresql``, ``mysql``),
    dropped after the page; skipped when the service is down, failed under ``CI``."""
    from tests.support import databases

    pool = state.setdefault("pool", databases.BackendPool())
    backend = pool.get(kind)
    url = backend.create()
    state["databases"].append((backend, url))
    return url


def _teardown(namespace: dict[str, Any]) -> None:
    state = namespace.get(_STATE)
    if state is None:
        return
    from sqlalchemy import Engine

    for value in namespace.values():
        if isinstance(value, Engine):
            value.dispose()
    os.chdir(state["cwd"])
    for backend, url in state["databases"]:
        backend.drop(url)
    if "pool" in state:
        state["pool"].close()
    for name in [k for k in os.environ if k.startswith("RELAY_")]:
        del os.environ[name]
    os.environ.update(state["env"])
    shutil.rmtree(state["folder"], ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A run that allows no server (``make test-unit``, ``RELAY_TEST_NO_SERVICES``) leaves out the
    pages with a block calling ``service_url``: ``make test`` runs them."""
    from tests.support import services

    if not services.NO_SERVICES:
        return
    # A page's blocks share one namespace: the whole page goes.
    needs_server = {
        item.path
        for item in items
        if _SERVER in str(getattr(getattr(item, "example", None), "parsed", ""))
    }
    if needs_server:
        config.hook.pytest_deselected(items=[i for i in items if i.path in needs_server])
        items[:] = [i for i in items if i.path not in needs_server]


pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser()],
    patterns=list(DOC_PATTERNS),
    path=str(ROOT),
    setup=_setup,
    teardown=_teardown,
).pytest()
