"""``relay console``: serve the operators' web console (extra ``[console]``)."""

from __future__ import annotations

import argparse

from relay.commands.command import Command
from relay.config import Settings
from relay.config.settings import CONSOLE_ONLY
from relay.exceptions import ConfigError


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8200, help="port to listen on (default 8200)")


def _run(settings: Settings, args: argparse.Namespace) -> int:
    try:
        from relay.console.serve import serve
    except ImportError as exc:
        raise ConfigError(
            f"relay console needs the [console] extra: pip install 'celery-outbox-relay[console]' "
            f"({exc.name} is missing)"
        ) from exc
    return serve(settings, args.host, args.port)


COMMAND = Command(
    "console",
    "serve the web console (extra [console]): backlog, leases, dead letters, re-drive",
    _arguments,
    _run,
    uses=CONSOLE_ONLY,
    parser_options={
        "description": "Serve the operators' web console and its JSON API. Credentials: "
        "RELAY_CONSOLE_TOKEN (operator) and RELAY_CONSOLE_READONLY_TOKEN (view only); with "
        "neither set, a token is made up for this run and a sign-in link printed."
    },
)
