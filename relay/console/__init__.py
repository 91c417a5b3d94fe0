"""The web console for operators (extra ``[console]``): backlog, lag, leases, dead letters and
their re-drive, behind a token, with every action audited.

``relay.console.app(engine, settings)`` is an ASGI application to mount in a Starlette or
FastAPI application (``Mount("/relay", app=relay.console.app(engine, settings))``);
``relay console`` serves it alone. With several outbox databases (``RELAY_DATABASES``),
``relay.console.several({name: (engine, settings), ...})`` mounts one console per database at
``/<name>/`` with a switcher between them; ``relay console`` without ``--source`` serves that.
It reads and acts through the verbs of ``relay.store.operations.store`` only.
"""

from __future__ import annotations

from relay.console.app import app, several

__all__ = ["app", "several"]
