"""``--source NAME``: which of the fleet's databases (``RELAY_DATABASES``) a command acts on.

The kinds of command (:data:`SCOPES`):

- ``one`` (``failed``, ``pending``, ``purge-sent``, ``inbox``, ``replay``): acts on one
  database; with several configured and no ``--source``, refused naming the choices.
- ``all`` (``console``): one process over every database (a console each, side by side), or
  the one ``--source`` names.
- ``each`` (``migrate``, ``status``, ``doctor``, ``probe``): runs once per database, or for the
  one ``--source`` names; its text output is headed by the database's name, and its ``--json``
  becomes ``{"databases": {"orders": ..., "billing": ...}}`` (one database: unchanged).
- ``self`` (``doctor``, which reads the environment itself to report a bad value as a failed
  check): :func:`doctor_checks` runs its checks per database, each named ``NAME: check``.
- ``fleet`` (``dispatch``, ``demo``): takes the whole configuration (``dispatch`` runs a relay
  per database).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from relay.config import Settings
from relay.config.databases import each, pick, several_databases
from relay.exceptions import ConfigError

if TYPE_CHECKING:
    from relay.commands.doctor.verdicts import Check

#: The commands that act on one database, and those run once per database; others: the fleet.
SCOPES: dict[str, str] = {
    "failed": "one",
    "pending": "one",
    "purge-sent": "one",
    "inbox": "one",
    "replay": "one",
    "console": "all",
    "migrate": "each",
    "status": "each",
    "doctor": "self",
    "probe": "each",
}


def add_option(name: str, parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the ``--source`` option when command ``name`` acts per database."""
    scope = SCOPES.get(name)
    if scope is None:
        return
    what = "the database to act on" if scope == "one" else "only this database"
    scope = "each" if scope in ("self", "all") else scope
    text = (
        f"{what}, by its RELAY_DATABASES name (needed when several are configured)"
        if scope == "one"
        else f"{what} (default: each configured database in turn)"
    )
    parser.add_argument("--source", metavar="NAME", default=None, help=text)
    # Also after the sub-command (relay failed list --source orders); SUPPRESS keeps a value
    # given before it.
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        for sub, child in getattr(action, "choices", {}).items():
            if name == "inbox" and sub != "purge":
                continue  # dead letters live on the broker, not in a database
            child.add_argument("--source", metavar="NAME", default=argparse.SUPPRESS, help=text)


def run(
    name: str,
    handler: Callable[[Settings, argparse.Namespace], int],
    settings: Settings,
    args: argparse.Namespace,
) -> int:
    """Run ``handler`` on the database(s) command ``name`` acts on."""
    scope = SCOPES.get(name)
    source = getattr(args, "source", None)
    if scope in (None, "self") or (name == "inbox" and args.action != "purge"):
        return int(handler(settings, args) or 0)
    if scope == "one":
        return int(handler(pick(settings, source)[1], args) or 0)
    if scope == "all":  # one process serving every database unless --source names one
        return int(handler(settings if source is None else pick(settings, source)[1], args) or 0)
    chosen = [pick(settings, source)] if source is not None else list(each(settings))
    if not several_databases(settings) or source is not None:
        return int(handler(chosen[0][1], args) or 0)
    if getattr(args, "json", False):
        return _as_one_document(handler, chosen, args)
    worst = 0
    for database, s in chosen:
        print(f"== {database} ==", flush=True)
        worst = max(worst, int(handler(s, args) or 0))
    return worst


def _as_one_document(
    handler: Callable[[Settings, argparse.Namespace], int],
    chosen: list[tuple[str, Settings]],
    args: argparse.Namespace,
) -> int:
    documents, worst = {}, 0
    for database, s in chosen:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            worst = max(worst, int(handler(s, args) or 0))
        documents[database] = json.loads(out.getvalue())
    print(json.dumps({"databases": documents}, indent=2))
    return worst


def doctor_checks(
    run_checks: Callable[[Settings | None, str | None], list[Check]],
    settings: Settings | None,
    error: str | None,
    source: str | None,
) -> list[Check]:
    """``relay doctor``'s checks for each database (or the one ``source`` names), each check
    named after its database when several are configured."""
    if settings is None or (settings.databases is None and source is None):
        return run_checks(settings, error)
    try:
        chosen = [pick(settings, source)] if source is not None else list(each(settings))
    except ConfigError as exc:
        return run_checks(None, str(exc))
    if len(chosen) == 1:
        return run_checks(chosen[0][1], None)
    from relay.commands.doctor import budget as doctor_budget

    return [
        replace(c, name=f"{database}: {c.name}")
        for database, s in chosen
        for c in run_checks(s, None)
    ] + doctor_budget.checks(settings)
