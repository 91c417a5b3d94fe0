"""The documentation names only files, tests and links that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    ROOT / "migrations" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
TEST_DEFS = {
    name
    for path in (ROOT / "tests").rglob("*.py")
    for name in re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M)
}


def test_every_test_file_and_test_the_docs_cite_exists() -> None:
    """`tests/<file>.py`, `tests/<file>.py::test_y` and a bare `test_y` name a test that exists
    today."""
    wrong = []
    for doc in DOCS:
        text = doc.read_text()
        for path, name in re.findall(r"(tests/[\w/]+\.py)(?:::(test_\w+))?", text):
            if not (ROOT / path).is_file():
                wrong.append(f"{doc.name}: {path}")
            elif name and f"def {name}(" not in (ROOT / path).read_text():
                wrong.append(f"{doc.name}: {path}::{name}")
        for name in re.findall(r"`(test_\w+)`", text):
            if name not in TEST_DEFS:
                wrong.append(f"{doc.name}: {name}")
    assert not wrong, f"the docs cite what does not exist: {wrong}"


def test_the_readme_links_only_to_files_that_exist() -> None:
    """Every relative link of README.md (which the site does not check) reaches a file."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert not missing, missing


def test_no_page_or_module_points_at_files_outside_the_repository() -> None:
    """The team's notes (its design and facts files) are not shipped: nothing cites them (the
    tests' prose is test_references.py's)."""
    sources = [*DOCS, *(ROOT / "relay").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    sources.append(ROOT / "bench" / "report_template.md")
    citing = [
        str(p.relative_to(ROOT))
        for p in sources
        if re.search(r"\b(DESIGN|FACTS)\.md", p.read_text())
    ]
    assert not citing, citing
