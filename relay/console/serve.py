"""``relay console``: serve the console with uvicorn (one per database, side by side, when the
settings name several); without a token, make one and print the sign-in link (as Jupyter does),
never an open console."""

from __future__ import annotations

import dataclasses
import logging
import re
from urllib.parse import quote

from relay.config import Settings
from relay.config.databases import each, several
from relay.console.auth import new_token
from relay.store.engine import create_engine


class _HideTokens(logging.Filter):
    """Masks ``token=…`` in uvicorn's access log: the sign-in link carries one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                _TOKEN.sub("token=***", a) if isinstance(a, str) else a for a in record.args
            )
        return True


_TOKEN = re.compile(r"token=[^&\s]*")


def serve(settings: Settings, host: str, port: int) -> int:
    import uvicorn

    from relay import console

    made_up = not settings.console_token and not settings.console_readonly_token
    if made_up:
        settings = dataclasses.replace(settings, console_token=new_token())
    shown = f"[{host}]" if ":" in host else host
    databases = each(settings) if several(settings) else (("", settings),)
    # Several databases: a console each at /<name>/; the link signs in to the first.
    first = f"{databases[0][0]}/" if several(settings) else ""
    base = f"http://{shown}:{port}/{first}"
    if made_up:
        print(
            "relay console: no RELAY_CONSOLE_TOKEN set; this run's operator token signs you in:\n"
            f"    {base}signin?token={quote(str(settings.console_token))}",
            flush=True,
        )
    else:
        print(f"relay console: sign in at {base}signin", flush=True)
    logging.getLogger("uvicorn.access").addFilter(_HideTokens())
    engines = {name: (create_engine(s.database_url), s) for name, s in databases}
    try:
        served = console.several(engines) if several(settings) else console.app(*engines[""])
        uvicorn.run(served, host=host, port=port, log_level="info")
    finally:
        for engine, _ in engines.values():
            engine.dispose()
    return 0


__all__ = ["serve"]
