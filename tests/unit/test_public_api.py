"""The public API is declared: ``relay.__all__`` and the ``__all__`` of the public modules match
the committed list (``public_api.txt``), the API reference lists exactly that, and the docs
cite only public Python paths and files that exist (docs/api.md says the rule)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import relay
from relay.celery import names

ROOT = Path(__file__).resolve().parents[2]
LISTED = ROOT / "tests" / "unit" / "public_api.txt"
API_PAGE = ROOT / "docs" / "api.md"
DOCS = [
    ROOT / "README.md",
    ROOT / "migrations" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
EXAMPLES = sorted((ROOT / "examples").rglob("*.py"))


def _surface() -> dict[str, list[str]]:
    surface: dict[str, list[str]] = {}
    for line in LISTED.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            module, _, name = line.partition(":")
            surface.setdefault(module, []).append(name)
    return surface


SURFACE = _surface()
#: ``relay.…`` words of the docs that are no Python path: the task names (a wire contract),
#: the Django system check ids and migrations (app label ``relay``), the embedded default's
#: database file, the audit logger's name (``relay.audit``), and a public module's dunder names
#: (``relay.__all__``).
NOT_PYTHON = re.compile(
    r"relay\.([EW]\d{3}|\d{4}_\w+|sqlite3|audit)$|relay(\.[a-z]+)*\.__\w+__$|"
    + "|".join(
        re.escape(n) + "$"
        for n in (names.CLAIM_AND_DISPATCH, names.TICK, names.PURGE_SENT, names.PURGE_INBOX)
    )
)


def _is_public(path: str) -> bool:
    """``relay.…`` is a public module, or a public module's public name (with any attribute of
    it: ``relay.config.Settings.from_env``)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in SURFACE:
            return cut == len(parts) or parts[cut] in SURFACE[module]
    return False


def test_all_is_sorted_and_complete() -> None:
    """Every name of ``relay.__all__`` resolves; everything public in the namespace is in it."""
    assert relay.__all__ == sorted(relay.__all__)
    for name in relay.__all__:
        assert getattr(relay, name).__module__.startswith("relay")
    public = {
        name
        for name, value in vars(relay).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("relay")
    }
    assert public <= set(relay.__all__)


def test_every_public_module_exports_exactly_the_committed_list() -> None:
    """A public name that disappears, or one added without being listed, fails here."""
    for module_name, listed in SURFACE.items():
        module = importlib.import_module(module_name)
        exported = list(module.__all__)
        assert exported == sorted(exported), module_name
        assert exported == sorted(listed), f"{module_name}: __all__ {exported} != {listed}"
        for name in exported:
            if (module_name, name) == ("relay.celery", "app"):
                # Built from the environment on first access: its annotation is the promise.
                assert module.__annotations__["app"] == "Celery"
                continue
            assert getattr(module, name) is not None, f"{module_name}.{name}"


def test_the_api_page_lists_exactly_the_public_surface() -> None:
    """docs/api.md renders one ``::: module.name`` per public name, and nothing else."""
    rendered = re.findall(r"^::: (\S+)$", API_PAGE.read_text(), re.M)
    assert len(rendered) == len(set(rendered))
    listed = {f"{module}.{name}" for module, names_ in SURFACE.items() for name in names_}
    assert set(rendered) == listed


def test_the_docs_cite_only_public_python_paths() -> None:
    """README, docs/ and the examples import and name public paths only (files are cited as
    ``relay/...`` paths instead)."""
    wrong = []
    for doc in [*DOCS, *EXAMPLES]:
        text = doc.read_text()
        for path in re.findall(r"(?<![\w./-])relay(?:\.\w+)+", text):
            if not NOT_PYTHON.match(path) and not _is_public(path):
                wrong.append(f"{doc.relative_to(ROOT)}: {path}")
        for module, imported in re.findall(
            r"^\s*from (relay[\w.]*) import (\([^)]*\)|[\w, ]+)", text, re.M
        ):
            for name in (n.split(" as ")[0].strip() for n in imported.strip("()").split(",")):
                if name and not _is_public(f"{module}.{name}"):
                    wrong.append(f"{doc.relative_to(ROOT)}: from {module} import {name}")
    assert not wrong, f"the docs cite internal paths (docs/api.md says what is public): {wrong}"


def test_the_files_the_docs_cite_exist() -> None:
    """A ``relay/...`` file or folder a page names exists (it goes stale when a module moves)."""
    missing = []
    for doc in DOCS:
        for path in re.findall(r"(?<![\w./-])relay/[\w/.]*\w/?", doc.read_text()):
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not missing, missing
