"""Every ``relay.…`` name the prose cites resolves: a module, or an attribute of one.

The prose is the package's and the tests' docstrings and comments, ``README.md`` and
``docs/*.md``. A reference is a dotted name (``relay.store.engine.create_engine``, also in a
``:mod:``/``:func:``-style role, in backticks or called: ``relay.replay()``) or an entry point
(``relay.commands:main``); in the Python files, a ``relay/``, ``tests/``, ``docs/`` or
``bench/`` path too (the pages' paths are ``test_public_api.py``'s and ``test_docs_links.py``'s).
A module that moves leaves such names behind; this finds them, each as ``file:line: name``.

No server, no subprocess: each named module is imported once, here. Alone:
``pytest tests/unit/test_references.py``, or ``python -m tests.unit.test_references`` for the
bare list.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from relay.celery import names
from relay.config import Settings
from relay.replays import replayer

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sorted([*(ROOT / "relay").rglob("*.py"), *(ROOT / "tests").rglob("*.py")])
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: A dotted name (not the tail of a longer word, path or address), with an entry point's
#: ``:attribute`` when one follows.
DOTTED = re.compile(r"(?<![\w./-])(relay(?:\.\w+)+)(?::(\w+))?")
#: A file or folder of the repository named by its path, in a Python file's prose.
FILE = re.compile(r"(?<![\w./-])(?:relay|tests|docs|bench)/[\w/.-]*\w/?")

#: The relay's Celery task names: a wire contract (relay/celery/names.py), not modules.
TASK_NAMES = {
    "relay.claim_and_dispatch",
    "relay.tick",
    "relay.purge_sent",
    "relay.purge_inbox",
}
#: The audit logger's name, which no module bears (relay/replays/replayer.py).
AUDIT_LOGGER = "relay.audit"
#: The embedded default's database file (``sqlite:///relay.sqlite3``).
DEFAULT_FILE = "relay.sqlite3"
#: Words spelled like a Python path that name something else on purpose.
NOT_PYTHON = {*TASK_NAMES, AUDIT_LOGGER, DEFAULT_FILE}
#: A citation of the team's notes, which are not in the repository (``test_docs_links.py`` holds
#: the pages and the package to the same): a test cites a docs page or says the rule itself.
NOTES = re.compile(r"\b(?:DESIGN|FACTS)\.md|§")
#: Modules that do their work when imported (the CLI, Alembic's environment): they exist, and
#: are not imported here.
RUN_ON_IMPORT = {"relay.__main__", "relay.migrations.env"}
#: Django's system check ids (``relay.E001``) and migration names (``relay.0001_relay_0011``).
NOT_PYTHON_PATTERN = re.compile(r"relay\.([EW]\d{3}|\d{4}_\w+)$")


def _prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every comment and docstring line of a Python file."""
    source = path.read_text()
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        # A bare string statement: a module's, class's or function's docstring, or the one
        # under an attribute that mkdocstrings renders.
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            assert node.end_lineno is not None
            for number in range(node.lineno, node.end_lineno + 1):
                yield number, lines[number - 1]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def _page_lines(path: Path) -> Iterator[tuple[int, str]]:
    yield from enumerate(path.read_text().splitlines(), start=1)


def _sources() -> Iterator[tuple[Path, int, str]]:
    for path in PYTHON:
        for number, text in _prose_lines(path):
            yield path, number, text
    for path in PAGES:
        for number, text in _page_lines(path):
            yield path, number, text


#: An attribute that is declared but built on first access (``relay.celery``'s ``app``): it is
#: not built here, and what follows it is not checked.
DECLARED = object()
MISSING = object()


def _attribute(owner: Any, name: str) -> Any:
    """``owner.name``, :data:`DECLARED` for a name only annotated (a module's lazy attribute, a
    dataclass field with no default), or :data:`MISSING`."""
    if isinstance(owner, ModuleType) or inspect.isclass(owner):
        for scope in inspect.getmro(owner) if inspect.isclass(owner) else (owner,):
            if name in vars(scope):
                return vars(scope)[name]
            if name in inspect.get_annotations(scope):
                return DECLARED
    return getattr(owner, name, MISSING)


def _resolves(dotted: str) -> bool:
    """The longest importable prefix is a module; each further part is an attribute."""
    if dotted in RUN_ON_IMPORT:
        return True
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            owner: Any = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            # Only the named module may be missing: a module failing on an import of its own
            # is broken, which its own tests say, not a stale reference.
            if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
                raise
            continue
        for name in parts[cut:]:
            owner = _attribute(owner, name)
            if owner is MISSING:
                return False
            if owner is DECLARED:
                return True
        return True
    return False


def _stale() -> list[str]:
    wrong = []
    checked: dict[str, bool] = {}
    for path, number, text in _sources():
        where = f"{path.relative_to(ROOT)}:{number}"
        for dotted, attribute in DOTTED.findall(text):
            if dotted in NOT_PYTHON or NOT_PYTHON_PATTERN.match(dotted):
                continue
            full = f"{dotted}.{attribute}" if attribute else dotted
            if full not in checked:
                checked[full] = _resolves(full)
            if not checked[full]:
                wrong.append(f"{where}: {dotted}{':' + attribute if attribute else ''}")
        if path.suffix == ".py":
            for named in FILE.findall(text):
                if not (ROOT / named).exists():
                    wrong.append(f"{where}: {named}")
    return wrong


def test_the_allow_list_names_what_it_says() -> None:
    """Each exempt word is still a task name, the audit logger's or the default file's: one
    that stops being so leaves the allow-list too."""
    assert {names.CLAIM_AND_DISPATCH, names.TICK, names.PURGE_SENT, names.PURGE_INBOX} == TASK_NAMES
    assert replayer.audit_log.name == AUDIT_LOGGER
    assert Settings().database_url.endswith("/" + DEFAULT_FILE)


def test_every_reference_resolves() -> None:
    """Each ``relay.…`` name and ``relay/…`` path of the prose names what exists today."""
    wrong = _stale()
    assert not wrong, "references to nothing:\n" + "\n".join(wrong)


def test_no_test_cites_a_document_outside_the_repository() -> None:
    """A test's docstrings and comments point at docs/*.md or say the rule, never at notes a
    reader of the repository cannot open."""
    citing = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in PYTHON
        if path.is_relative_to(ROOT / "tests")
        for number, text in _prose_lines(path)
        if NOTES.search(text)
    ]
    assert not citing, citing


if __name__ == "__main__":
    print("\n".join(_stale()))
