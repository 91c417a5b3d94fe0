"""``relay console``: serve the console with uvicorn (one per database, side by side, when the
settings name several); without a token, make one and print the sign-in link (as Jupyter does),
never an open console."""

from __future__ import annotations

import dataclasses
import logging
import re
from urllib.parse import quote

from relay.config import Settings
from relay.config.databases import each, several_databases
from relay.console.auth import new_token
from relay.store.engine import create_engine


class _HideTokens(logging.Filter):
    """Masks ``token=…`` and ``code=…`` in uvicorn's access log: a sign-in link's code, and a
    token someone put in a URL (refused, but logged by the server all the same)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _TOKEN.sub(r"\1=***", a) if isinstance(a, str) else a for a in record.args
            )
        return True


_TOKEN = re.compile(r"\b(token|code)=[^&\s]*")


def serve(settings: Settings, host: str, port: int) -> int:
    import uvicorn

    from relay import console

    made_up = not settings.console_token and not settings.console_readonly_token
    if made_up:
        settings = dataclasses.replace(settings, console_token=new_token())
    shown = f"[{host}]" if ":" in host else host
    databases = each(settings) if several_databases(settings) else (("", settings),)
    # Several databases: a console each at /<name>/; the link signs in to the first.
    first = f"{databases[0][0]}/" if several_databases(settings) else ""
    base = f"http://{shown}:{port}/{first}"
    code = new_token() if made_up else None
    if code:
        print(
            "relay console: no RELAY_CONSOLE_TOKEN set; this one-time link signs you in:\n"
            f"    {base}signin?code={quote(code)}",
            flush=True,
        )
    else:
        print(f"relay console: sign in at {base}signin", flush=True)
    logging.getLogger("uvicorn.access").addFilter(_HideTokens())
    engines = {name: (create_engine(s.database_url), s) for name, s in databases}
    try:
        served = (
            console.several(engines, signin_code=code)
            if several_databases(settings)
            else console.app(*engines[""], signin_code=code)
        )
        uvicorn.run(served, host=host, port=port, log_level="info")
    finally:
        for engine, _ in engines.values():
            engine.dispose()
    return 0


__all__ = ["serve"]
