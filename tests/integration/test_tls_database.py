"""PostgreSQL over TLS with the relay's URLs, against a throw-away server with ``ssl=on`` and
certificates made in the test: ``sslmode=verify-full`` connects and ``relay doctor`` says it is
verified; a wrong name, an unknown CA and an expired certificate are refused with the reason;
client-certificate authentication (``cert`` in pg_hba.conf) works; ``sslmode=require`` is
encrypted but reported as not verified."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from relay.commands.doctor import tls as doctor_tls
from relay.commands.doctor.verdicts import PASS, WARN
from relay.exceptions import StoreError
from relay.store.engine import create_engine, ping
from relay.store.operations.health import HealthStore
from tests.support.pgserver import PgServer, throwaway_server
from tests.support.tlsfront import Pki

#: The role that signs in with a client certificate (its CN) and nothing else.
CERT_ROLE = "relay_cert"


def _own(path: Path) -> None:
    """Make ``path`` the server's: initdb refuses root, and a key must be 0600 and its own."""
    path.chmod(0o600)
    if os.geteuid() == 0:
        shutil.chown(path, user="postgres", group="postgres")


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PgServer, Pki]]:
    """A throw-away PostgreSQL with ssl=on, a certificate for ``localhost`` and a CA for client
    certificates; ``relay_cert`` may sign in over TLS with a client certificate only."""
    pki = Pki(tmp_path_factory.mktemp("pki"))
    pki.leaf("server", "localhost")
    pki.leaf("expired", "localhost", expired=True)
    pki.leaf(CERT_ROLE, "relay-cert.example", common_name=CERT_ROLE)
    with throwaway_server() as pg:
        for name in ("ca.pem", "server.pem", "server.key", "expired.pem", "expired.key"):
            shutil.copy(pki.folder / name, pg.root / name)
            _own(pg.root / name)
        hba = pg.data / "pg_hba.conf"
        rules = (
            f"hostssl all {CERT_ROLE} 127.0.0.1/32 cert\nhost all {CERT_ROLE} 0.0.0.0/0 reject\n"
        )
        hba.write_text(rules + hba.read_text())
        admin = sa.create_engine(pg.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                for setting, value in (
                    ("ssl", "on"),
                    ("ssl_cert_file", str(pg.root / "server.pem")),
                    ("ssl_key_file", str(pg.root / "server.key")),
                    ("ssl_ca_file", str(pg.root / "ca.pem")),
                ):
                    conn.execute(sa.text(f"ALTER SYSTEM SET {setting} = '{value}'"))
                conn.execute(sa.text(f"CREATE ROLE {CERT_ROLE} LOGIN"))
                conn.execute(sa.text("SELECT pg_reload_conf()"))
        finally:
            admin.dispose()
        yield pg, pki


def _url(pg: PgServer, host: str = "localhost", user: str = "postgres", **query: str) -> str:
    options = "&".join(f"{k}={v}" for k, v in query.items())
    return f"postgresql+psycopg://{user}@{host}:{pg.port}/postgres?{options}"


def _error(url: str) -> str:
    engine = create_engine(url)
    try:
        with pytest.raises(StoreError) as caught:
            ping(engine)
    finally:
        engine.dispose()
    return str(caught.value)


def test_verify_full_connects_and_doctor_says_verified(tls_server: tuple[PgServer, Pki]) -> None:
    pg, pki = tls_server
    engine = create_engine(_url(pg, sslmode="verify-full", sslrootcert=str(pki.ca_file)))
    try:
        ping(engine)
        check = doctor_tls.database(HealthStore(engine))
    finally:
        engine.dispose()
    assert check.status == PASS, check
    assert "encrypted and verified" in check.detail


def test_wrong_name_is_refused(tls_server: tuple[PgServer, Pki]) -> None:
    """The certificate is for localhost, the URL says 127.0.0.1."""
    pg, pki = tls_server
    error = _error(_url(pg, "127.0.0.1", sslmode="verify-full", sslrootcert=str(pki.ca_file)))
    assert 'server certificate for "localhost" does not match host name "127.0.0.1"' in error
    assert "mismatch" in doctor_tls.diagnose(
        sa.make_url(_url(pg, "127.0.0.1", sslmode="verify-full", sslrootcert=str(pki.ca_file)))
    )


def test_unknown_ca_is_refused(tls_server: tuple[PgServer, Pki], tmp_path: Path) -> None:
    pg, _ = tls_server
    other = Pki(tmp_path)
    error = _error(_url(pg, sslmode="verify-full", sslrootcert=str(other.ca_file)))
    assert "certificate verify failed" in error


def test_client_certificate_authentication(tls_server: tuple[PgServer, Pki]) -> None:
    """``relay_cert`` signs in with its certificate (no password), and is refused without."""
    pg, pki = tls_server
    certfile, keyfile = pki.files(CERT_ROLE)
    base = {"sslmode": "verify-full", "sslrootcert": str(pki.ca_file)}
    error = _error(_url(pg, user=CERT_ROLE, **base))
    assert "certificate" in error
    engine = create_engine(_url(pg, user=CERT_ROLE, sslcert=certfile, sslkey=keyfile, **base))
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT current_user")).scalar() == CERT_ROLE
    finally:
        engine.dispose()


def test_require_is_encrypted_but_not_verified(tls_server: tuple[PgServer, Pki]) -> None:
    """sslmode=require: encrypted (the server says so) but nothing checked: doctor warns."""
    pg, _ = tls_server
    engine = create_engine(_url(pg, sslmode="require"))
    try:
        check = doctor_tls.database(HealthStore(engine))
    finally:
        engine.dispose()
    assert check.status == WARN
    assert "NOT verified" in check.detail
    assert "sslmode=verify-full" in check.fix


def test_expired_certificate_is_refused(tls_server: tuple[PgServer, Pki]) -> None:
    """The server presents an expired certificate from the trusted CA: refused. (Last: it
    switches the server's certificate.)"""
    pg, pki = tls_server
    admin = sa.create_engine(pg.admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f"ALTER SYSTEM SET ssl_cert_file = '{pg.root / 'expired.pem'}'"))
            conn.execute(sa.text(f"ALTER SYSTEM SET ssl_key_file = '{pg.root / 'expired.key'}'"))
            conn.execute(sa.text("SELECT pg_reload_conf()"))
    finally:
        admin.dispose()
    url = _url(pg, sslmode="verify-full", sslrootcert=str(pki.ca_file))
    assert "certificate verify failed" in _error(url)
    # libpq says no more; relay doctor finds out why.
    assert doctor_tls.diagnose(sa.make_url(url)) == "TLS: certificate has expired"
