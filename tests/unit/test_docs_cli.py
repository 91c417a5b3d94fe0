"""docs/operations.md documents every `relay` command and every flag the parser accepts."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from relay.commands import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def test_every_command_and_flag_is_documented() -> None:
    """Each subcommand has its name and each of its long flags on the page."""
    page = PAGE.read_text()
    missing = []
    for path, parser in _commands(build_parser()):
        if path and f"relay {path[0]}" not in page:
            missing.append(" ".join(path))
        for action in parser._actions:
            flags = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
            missing += [
                f"{' '.join(path)} {o}"
                for o in flags
                if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", page)
            ]
    assert not missing, f"undocumented in docs/operations.md: {missing}"
