"""The ``relay`` commands are found through one registry, each declared in its own module."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import pytest

import relay.commands
from relay.commands import COMMANDS, build_parser
from relay.commands.command import Command
from relay.commands.status import watch
from relay.exceptions import ConfigError


def test_every_declared_command_is_registered_once() -> None:
    """Each command a module of relay/commands/ declares (COMMAND or COMMANDS) is in COMMANDS,
    and no two share a name."""
    declared = []
    for info in pkgutil.iter_modules(relay.commands.__path__):
        module = importlib.import_module(f"relay.commands.{info.name}")
        single = getattr(module, "COMMAND", None)
        declared += [single] if isinstance(single, Command) else []
        declared += list(getattr(module, "COMMANDS", ()))
    assert sorted(c.name for c in declared) == sorted(c.name for c in COMMANDS)
    assert len({c.name for c in COMMANDS}) == len(COMMANDS) == 15


def test_the_parser_offers_every_registered_command() -> None:
    """``relay --help`` lists the registry's commands, in its order."""
    # argparse keeps the sub-commands on this one action only.
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert list(sub.choices or ()) == [c.name for c in COMMANDS]


def test_status_watch_without_rich_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without rich installed, ``relay status --watch`` refuses with the [watch] extra to
    install (a ConfigError: exit 2), before it reads the store."""
    for name in ("rich", "rich.console", "rich.live", "rich.table"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigError, match=r"\[watch\] extra"):
        watch(object(), count=1)
