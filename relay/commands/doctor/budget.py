"""``relay doctor`` over several databases: the connection budget of one ``relay dispatch``
process (``RELAY_MAX_CONNECTIONS``, ``RELAY_MAX_SERVER_CONNECTIONS``) against each PostgreSQL
server's ``max_connections``, and the connections relay processes hold there now.

The budget's live use (connections held, databases waiting for one) is the process's own:
its metrics endpoint serves it (``relay_connections_in_use``, ``relay_databases_waiting``).
"""

from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa

from relay.commands.doctor.verdicts import FAIL, PASS, WARN, Check
from relay.config import Settings
from relay.config.databases import budget, each
from relay.exceptions import ConfigError, StoreError

#: The relay's share of a server's ``max_connections`` past which the doctor warns: the
#: budget exists to leave the server's connections to its applications.
SHARE_WARN = 0.25


def checks(settings: Settings) -> list[Check]:
    """One check of the budget, then one per PostgreSQL server."""
    try:
        total, per_server = budget(settings)
    except ConfigError as exc:
        return [Check("connection budget", FAIL, str(exc), "correct the variable named")]
    from relay.config.databases import server_of
    from relay.config.urls import normalize_url

    servers: dict[str, list[tuple[str, sa.URL]]] = defaultdict(list)
    for name, s in each(settings):
        url = sa.make_url(normalize_url(s.database_url))
        servers[server_of(url)].append((name, url))
    watched = sum(
        1
        for dbs in servers.values()
        if settings.notify and dbs[0][1].get_backend_name() == "postgresql"
    )
    databases = sum(len(d) for d in servers.values())
    detail = (
        f"{total} connections at most for {databases} databases on {len(servers)} servers "
        f"({watched} for the wake-ups, {total - watched} to relay with; at most {per_server} "
        "to one server); an idle database holds none"
    )
    if total > watched:
        found = [Check("connection budget", PASS, detail)]
    else:
        fix = f"RELAY_MAX_CONNECTIONS={watched + 1} at least (one per watched server, plus one)"
        found = [Check("connection budget", FAIL, detail, fix)]
    for server, dbs in servers.items():
        url = dbs[0][1]
        if url.get_backend_name() == "postgresql":
            found.append(_server(server, url, min(total, per_server)))
    return found


def _server(server: str, url: sa.URL, most: int) -> Check:
    from relay.store.operations.health import HealthStore

    name = f"connections on {server}"
    store = HealthStore.from_url(
        url.render_as_string(hide_password=False), poolclass=sa.pool.NullPool
    )
    try:
        found = store.server_connections()
    except StoreError as exc:
        return Check(name, WARN, f"not read: {exc}", "check the server")
    finally:
        store.dispose()
    limit = found.limit
    detail = (
        f"max_connections {limit}, {found.open_now} open now ({found.relay} of them relay "
        f"processes'); one relay process may hold {most}"
    )
    if most > limit * SHARE_WARN:
        fix = (
            f"lower RELAY_MAX_SERVER_CONNECTIONS (or RELAY_MAX_CONNECTIONS) to "
            f"{max(2, int(limit * SHARE_WARN))} or less per relay process"
        )
        return Check(name, WARN, detail + f": over {SHARE_WARN:.0%} of the server's", fix)
    if found.open_now + most > limit:
        return Check(
            name,
            WARN,
            detail + ": the server has fewer connections left than the relay may take",
            "raise max_connections, or lower the relay's budget",
        )
    return Check(name, PASS, detail)
