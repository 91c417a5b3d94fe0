"""What every ``relay`` command module declares: one :class:`Command` (its parser and its handler
in one place), and the one way commands open the outbox store."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relay.config import Settings

if TYPE_CHECKING:
    from relay.store.operations.store import OperationsStore

Handler = Callable[[Settings, argparse.Namespace], int]


@dataclass(frozen=True, slots=True)
class Command:
    """One ``relay`` sub-command: its name, what ``--help`` says, its arguments and handler."""

    name: str
    help: str
    #: Adds the command's arguments (and sub-commands) to its parser.
    arguments: Callable[[argparse.ArgumentParser], None]
    handler: Handler
    #: The settings it reads (None: all of them); see ``Settings.from_env(only=...)``.
    uses: frozenset[str] | None = None
    #: Extra keywords of ``add_parser`` (``description=``).
    parser_options: dict[str, Any] = field(default_factory=dict)


def store(settings: Settings) -> OperationsStore:
    """The outbox store the row commands read and act through."""
    from relay.store.operations.store import OperationsStore

    return OperationsStore.from_url(settings.database_url)
