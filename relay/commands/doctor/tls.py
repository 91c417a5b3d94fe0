"""``relay doctor``'s TLS checks: is each connection to the database and to the brokers
encrypted, and is the server it reaches verified (chain and host name)?

A connection that never leaves the machine (loopback, a Unix socket, SQLite, the embedded
broker) passes unencrypted; one that crosses a network warns when it is not encrypted or not
verified. The database's answer is the server's own (``pg_stat_ssl``, MySQL's ``Ssl_version``);
whether the server was verified comes from the URL (libpq's ``sslmode``, also read from
``PGSSLMODE``; PyMySQL's ``ssl_ca`` and ``ssl_check_hostname``).
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from relay.commands.doctor.verdicts import FAIL, PASS, WARN, Check
from relay.config import Settings, tls
from relay.config.urls import redact

if TYPE_CHECKING:
    import sqlalchemy as sa

    from relay.store.operations.health import HealthStore

DATABASE_FIX_PG = "add ?sslmode=verify-full&sslrootcert=/path/to/ca.pem to RELAY_DATABASE_URL"
DATABASE_FIX_MYSQL = "add ?ssl_ca=/path/to/ca.pem to RELAY_DATABASE_URL"
BROKER_FIX = (
    "use amqps:// (rediss://, NATS: tls://) with the server's CA in ssl_ca_certs= or "
    "SSL_CERT_FILE, and drop ssl_cert_reqs=none / ssl_check_hostname=false (docs/security.md)"
)


def _local(host: str | None) -> bool:
    return not host or host.startswith("/") or host in tls.LOOPBACK


def database(store: HealthStore) -> Check:
    """Whether the outbox database's connection is encrypted and its server verified."""
    url, kind = store.url, store.backend_name
    name = "database TLS"
    if kind == "sqlite":
        return Check(name, PASS, "SQLite: a file, no network")
    session = store.session_tls()
    if session is None:
        return Check(name, PASS, f"{kind}: not checked")
    if kind == "postgresql":
        mode = str(url.query.get("sslmode") or os.environ.get("PGSSLMODE") or "prefer")
        verified = mode == "verify-full"
        how, fix = f"sslmode={mode}", DATABASE_FIX_PG
    else:
        check_name = str(url.query.get("ssl_check_hostname", "true")).lower() != "false"
        verified = bool(url.query.get("ssl_ca") or url.query.get("ssl_capath")) and check_name
        how = "ssl_ca given" if verified else "no ssl_ca or no host name check"
        fix = DATABASE_FIX_MYSQL
    local = _local(url.host)
    return _verdict(name, session.encrypted, verified, local, f"{session.version}, {how}", fix)


def _verdict(name: str, encrypted: bool, verified: bool, local: bool, how: str, fix: str) -> Check:
    if not encrypted:
        if local:
            return Check(name, PASS, "not encrypted, but the connection stays on this machine")
        return Check(name, WARN, "NOT encrypted: passwords and events cross the network", fix)
    if not verified:
        return Check(name, WARN, f"encrypted ({how}) but the server is NOT verified", fix)
    return Check(name, PASS, f"encrypted and verified ({how})")


def brokers(settings: Settings) -> Iterator[Check]:
    """One check per broker URL the relay uses (the events broker, Celery's if it differs)."""
    urls = {"events broker TLS": settings.events_connection_url}
    if settings.broker_url != settings.events_connection_url:
        urls["Celery broker TLS"] = settings.broker_url
    for name, url in urls.items():
        yield broker(name, url)


def broker(name: str, url: str) -> Check:
    """The worst verdict among the nodes of ``url``; a TLS file that is not there fails."""
    verdicts: list[Check] = []
    for node in tls.nodes(url):
        bare, found = tls.parse(node)
        where = redact(bare.split("?", 1)[0])
        missing = [
            f"{option}={path}" for option, path in tls.files(found) if not Path(path).is_file()
        ]
        if missing:
            return Check(name, FAIL, f"{where}: no such file: {', '.join(missing)}", BROKER_FIX)
        if found.encrypted and found.verified:
            verdicts.append(Check(name, PASS, f"{where}: {found.describe()}"))
        elif found.encrypted:
            verdicts.append(Check(name, WARN, f"{where}: {found.describe()}", BROKER_FIX))
        elif found.local or "://" not in node or node.split("://", 1)[0] in _NO_NETWORK:
            verdicts.append(Check(name, PASS, f"{where}: not encrypted, stays on this machine"))
        else:
            verdicts.append(
                Check(
                    name,
                    WARN,
                    f"{where}: NOT encrypted: credentials and events in clear",
                    BROKER_FIX,
                )
            )
    order = {FAIL: 0, WARN: 1, PASS: 2}
    return min(verdicts, key=lambda c: order[c.status])


#: Kombu transports that never touch a network.
_NO_NETWORK = frozenset({"filesystem", "memory", "sqla", "sqlalchemy"})


#: libpq's request to switch a new connection to TLS (protocol code 1234.5679).
_PG_SSL_REQUEST = struct.pack("!II", 8, 80877103)


def diagnose(url: sa.URL, timeout: float = 5.0) -> str:
    """Why a PostgreSQL server's certificate is refused, in Python's words ("certificate has
    expired", "Hostname mismatch ..."): libpq says only "certificate verify failed". Empty when
    the handshake succeeds here or the URL is not PostgreSQL over TCP."""
    if url.get_backend_name() != "postgresql" or not url.host or url.host.startswith("/"):
        return ""
    root = url.query.get("sslrootcert") or os.environ.get("PGSSLROOTCERT")
    context = ssl.create_default_context(cafile=str(root) if root else None)
    context.check_hostname = str(url.query.get("sslmode") or "") == "verify-full"
    try:
        with socket.create_connection((url.host, url.port or 5432), timeout=timeout) as sock:
            sock.sendall(_PG_SSL_REQUEST)
            if sock.recv(1) != b"S":
                return "the server does not offer TLS"
            with context.wrap_socket(sock, server_hostname=url.host):
                return ""
    except ssl.SSLCertVerificationError as exc:
        return f"TLS: {exc.verify_message}"
    except (OSError, ssl.SSLError) as exc:
        return f"TLS: {exc}"
