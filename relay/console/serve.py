"""``relay console``: serve the console with uvicorn; without a token, make one and print the
sign-in link (as Jupyter does), never an open console."""

from __future__ import annotations

import dataclasses
import logging
import re
from urllib.parse import quote

from relay.config import Settings
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

    from relay.console import app

    made_up = not settings.console_token and not settings.console_readonly_token
    if made_up:
        settings = dataclasses.replace(settings, console_token=new_token())
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}/"
    if made_up:
        print(
            "relay console: no RELAY_CONSOLE_TOKEN set; this run's operator token signs you in:\n"
            f"    {base}signin?token={quote(str(settings.console_token))}",
            flush=True,
        )
    else:
        print(f"relay console: sign in at {base}signin", flush=True)
    logging.getLogger("uvicorn.access").addFilter(_HideTokens())
    engine = create_engine(settings.database_url)
    try:
        uvicorn.run(app(engine, settings), host=host, port=port, log_level="info")
    finally:
        engine.dispose()
    return 0


__all__ = ["serve"]
