"""NATS JetStream's TLS and credentials (docs/brokers.md), each against a throw-away
``nats-server -js`` of the test module's own (tests/support/natsserver.py), the relay draining a
real PostgreSQL outbox in this process:

- ``tls://`` verified like ``amqps://``: the chain against ``ssl_ca_certs`` or ``SSL_CERT_FILE``,
  the host name of each server; a name the certificate lacks is an outage that says why; the
  opt-out delivers and warns; a ``tls://`` server that offers no TLS is refused before the
  credentials are sent;
- user and password, a token, an NKEY seed (``nkey=``), a credentials file (``creds=``, on an
  operator-mode server whose JWTs the test signs): the right ones deliver, a wrong one is an
  outage (no attempt spent) naming the authorization, the secret printed nowhere;
- several servers, tried in the order given;
- ``relay doctor`` words the TLS verdict as for ``amqps://``.
"""

from __future__ import annotations

import json
import logging
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay import publishers
from relay.config import Settings
from relay.exceptions import BrokerUnavailable
from relay.store.schema.tables import outbox
from tests.support.env import relay_env
from tests.support.fleet import RELAY_BIN
from tests.support.jetstream import Stream, drain
from tests.support.natsserver import NatsServer, new_key, operator_setup, throwaway_server
from tests.support.tlsfront import Pki

pytestmark = pytest.mark.timeout(120)
pytest.importorskip("nats", reason="nats-py is not installed (the [nats] extra)")
pytest.importorskip("nkeys", reason="nkeys is not installed (the [nats] extra)")

PASSWORD = "pw-Mk7xSECRETq-nats"  # the throw-away servers', a marker to look for
TOKEN = "tok-Mk7xSECRETq-nats"


@dataclass(frozen=True)
class Servers:
    """The module's servers and the files their clients need."""

    tls: NatsServer  # TLS (a certificate for localhost); user/password and an NKEY user
    token: NatsServer  # plain, a token; protocol trace on (what a client sent is logged)
    operator: NatsServer  # operator mode: JWT accounts, a user's credentials file
    ca: str
    seed: str  # the NKEY user's seed file
    creds: str


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    root = tmp_path_factory.mktemp("nats-auth")
    pki = Pki(root)
    cert, key = str(root / "server.pem"), str(root / "server.key")
    pki.leaf("server", "localhost")
    user = new_key("user")
    (root / "seed.nk").write_text(user.seed + "\n")
    op = operator_setup()
    (root / "user.creds").write_text(op.creds)
    tls_conf = (
        f'tls {{ cert_file: "{cert}", key_file: "{key}", timeout: 5 }}\n'
        f'authorization {{ users: [ {{user: relay, password: "{PASSWORD}"}}, '
        f"{{nkey: {user.public}}} ] }}\n"
    )
    with (
        throwaway_server(tls_conf) as tls_server,
        throwaway_server(f'trace: true\nauthorization {{ token: "{TOKEN}" }}\n') as token,
        throwaway_server(op.config) as operator,
    ):
        yield Servers(
            tls_server,
            token,
            operator,
            str(pki.ca_file),
            str(root / "seed.nk"),
            str(root / "user.creds"),
        )


def _stream(url: str) -> Stream:
    tag = uuid.uuid4().hex[:10]
    return Stream(url, f"AUTHTEST_{tag}", f"authtest{tag}")


def _settings(pg_url: str, stream: Stream) -> Settings:
    return stream.settings(
        pg_url,
        confirm_timeout_seconds=3,
        backoff_base_seconds=0.05,
        backoff_max_seconds=0.2,
        tick_seconds=0.1,
    )


def _drain(pg_url: str, engine: sa.Engine, stream: Stream, n: int = 3) -> list[tuple[str, int]]:
    """Enqueue ``n`` events, drain once in this process; each row's (status, attempt)."""
    with Session(engine) as session, session.begin():
        for i in range(n):
            relay.enqueue(session, "auth.checked", {"n": i})
    drain(_settings(pg_url, stream))
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(outbox.c.status, outbox.c.attempt))]  # type: ignore[misc]


def _delivers(pg_url: str, engine: sa.Engine, url: str) -> None:
    stream = _stream(url)
    assert _drain(pg_url, engine, stream) == [("sent", 1)] * 3
    stored = stream.messages()
    assert len(stored) == 3
    assert {m.subject for m in stored} == {f"{stream.exchange}.auth.checked"}


def _refused(pg_url: str, engine: sa.Engine, url: str, caplog: pytest.LogCaptureFixture) -> str:
    """Drain to ``url``: nothing sent, no attempt spent; the error of a direct connect, which
    must also be what the relay logged."""
    with caplog.at_level(logging.DEBUG):
        assert _drain(pg_url, engine, _stream(url)) == [("pending", 0)] * 3
    publisher = publishers.for_url(url, "authtest")
    try:
        with pytest.raises(BrokerUnavailable) as caught:
            publisher.connect()  # type: ignore[attr-defined]
    finally:
        publisher.close()
    error = str(caught.value)
    assert error.split(": ", 1)[1][:60] in caplog.text  # the drain logged the same reason
    for secret in (PASSWORD, TOKEN):
        assert secret not in error
        assert secret not in caplog.text
    return error


def _tls(
    servers: Servers, host: str = "localhost", auth: str = f"relay:{PASSWORD}@", **opts: str
) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"ssl_ca_certs": servers.ca, **opts}.items() if v)
    return f"tls://{auth}{host}:{servers.tls.port}?{query}"


# -- TLS ---------------------------------------------------------------------------------------
def test_verified_tls_delivers(pg_url: str, pg_engine: sa.Engine, servers: Servers) -> None:
    _delivers(pg_url, pg_engine, _tls(servers))


def test_a_name_the_certificate_lacks_is_an_outage_that_says_why(
    pg_url: str, pg_engine: sa.Engine, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    """The certificate is for localhost; 127.0.0.1 is refused: nothing sent, no attempt."""
    error = _refused(pg_url, pg_engine, _tls(servers, "127.0.0.1"), caplog)
    assert "certificate verify failed" in error
    assert "mismatch" in error, error


def test_the_opt_outs_deliver_and_warn(
    pg_url: str, pg_engine: sa.Engine, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    url = _tls(servers, "127.0.0.1", ssl_check_hostname="false")
    with caplog.at_level(logging.WARNING, logger="relay.publishers.nats_connect"):
        _delivers(pg_url, pg_engine, url)
    assert "host name NOT checked" in caplog.text
    caplog.clear()
    url = _tls(servers, "127.0.0.1", ssl_ca_certs="", ssl_cert_reqs="none")
    with caplog.at_level(logging.WARNING, logger="relay.publishers.nats_connect"):
        _connect(url)  # no CA at all: encrypted, nothing verified, loudly logged
    assert "NOT verified" in caplog.text
    assert PASSWORD not in caplog.text


def test_ssl_cert_file_is_trusted_as_for_amqps(
    pg_url: str, pg_engine: sa.Engine, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ssl_ca_certs: the system store, which SSL_CERT_FILE replaces; without it the
    test CA is unknown and the connection refused."""
    url = _tls(servers, ssl_ca_certs="")
    with pytest.raises(BrokerUnavailable, match="unable to get local issuer"):
        _connect(url)
    monkeypatch.setenv("SSL_CERT_FILE", servers.ca)
    _delivers(pg_url, pg_engine, url)


def _connect(url: str) -> None:
    publisher = publishers.for_url(url, "authtest")
    try:
        publisher.connect()  # type: ignore[attr-defined]
    finally:
        publisher.close()


def test_a_tls_url_to_a_server_without_tls_is_refused_before_the_credentials_are_sent(
    servers: Servers,
) -> None:
    """nats-py upgrades only when the server asks; tls:// to a plain server would otherwise
    send the token in clear. The server's protocol trace shows no CONNECT from the relay."""
    before = servers.token.log.count("<<- [CONNECT")
    with pytest.raises(BrokerUnavailable, match="does not offer TLS") as caught:
        _connect(f"tls://{TOKEN}@localhost:{servers.token.port}?ssl_ca_certs={servers.ca}")
    assert TOKEN not in str(caught.value)
    assert servers.token.log.count("<<- [CONNECT") == before
    _connect(f"nats://{TOKEN}@127.0.0.1:{servers.token.port}")  # the trace does log one
    assert servers.token.log.count("<<- [CONNECT") == before + 1


# -- credentials -------------------------------------------------------------------------------
def test_a_wrong_password_is_an_outage_naming_the_authorization(
    pg_url: str, pg_engine: sa.Engine, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    error = _refused(pg_url, pg_engine, _tls(servers, auth=f"relay:not-{PASSWORD}@"), caplog)
    assert "authorization refused (Authorization Violation)" in error, error


def test_a_token_delivers_and_a_wrong_one_is_an_outage(
    pg_url: str, pg_engine: sa.Engine, servers: Servers, caplog: pytest.LogCaptureFixture
) -> None:
    _delivers(pg_url, pg_engine, f"nats://{TOKEN}@127.0.0.1:{servers.token.port}")
    with Session(pg_engine) as session, session.begin():
        session.execute(sa.delete(outbox))
    wrong = f"nats://x{TOKEN}@127.0.0.1:{servers.token.port}"
    assert "Authorization Violation" in _refused(pg_url, pg_engine, wrong, caplog)


def test_an_nkey_seed_delivers_and_an_unknown_one_is_refused(
    pg_url: str, pg_engine: sa.Engine, servers: Servers, tmp_path: Path
) -> None:
    _delivers(pg_url, pg_engine, _tls(servers, auth="", nkey=servers.seed))
    other = tmp_path / "other.nk"
    other.write_text(new_key("user").seed)
    with pytest.raises(BrokerUnavailable, match="Authorization Violation"):
        _connect(_tls(servers, auth="", nkey=str(other)))


def test_a_credentials_file_delivers_on_an_operator_mode_server(
    pg_url: str, pg_engine: sa.Engine, servers: Servers
) -> None:
    """The user JWT signed by the account, the account's by the operator the server trusts;
    nats-py sends the JWT and signs the server's nonce with the seed of the file."""
    _delivers(pg_url, pg_engine, f"nats://127.0.0.1:{servers.operator.port}?creds={servers.creds}")
    with pytest.raises(BrokerUnavailable, match="Authorization Violation"):
        _connect(f"nats://127.0.0.1:{servers.operator.port}")  # no credentials


# -- several servers ---------------------------------------------------------------------------
def test_servers_are_tried_in_order_each_verified_against_its_own_name(
    pg_url: str, pg_engine: sa.Engine, servers: Servers
) -> None:
    """A closed port, then 127.0.0.1 (not in the certificate), then localhost: delivered,
    every time (nats-py alone shuffles them and stops at the first refusal)."""
    dead = f"tls://relay:{PASSWORD}@localhost:1?ssl_ca_certs={servers.ca}"
    url = ",".join((dead, _tls(servers, "127.0.0.1"), _tls(servers)))
    for _ in range(3):
        _connect(url)
    _delivers(pg_url, pg_engine, url)
    with pytest.raises(BrokerUnavailable) as caught:
        _connect(",".join((dead, _tls(servers, "127.0.0.1"))))
    error = str(caught.value)
    assert "localhost:1: " in error
    assert "127.0.0.1" in error
    assert "mismatch" in error
    assert PASSWORD not in error


# -- relay doctor --------------------------------------------------------------------------------
def _doctor(pg_url: str, url: str) -> dict[str, dict[str, str]]:
    stream = _stream(url)
    env = relay_env(
        database_url=pg_url, events_url=url, exchange=stream.exchange, nats_stream=stream.name
    )
    done = subprocess.run(
        [RELAY_BIN, "doctor", "--json"], env=env, capture_output=True, text=True, timeout=90
    )
    assert PASSWORD not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return {c["name"]: c for c in json.loads(done.stdout)}


def test_the_doctor_reports_the_tls_verdict_as_for_amqps(pg_url: str, servers: Servers) -> None:
    checks = _doctor(pg_url, _tls(servers))
    assert checks["events broker TLS"]["status"] == "pass", checks["events broker TLS"]
    assert (
        "encrypted and verified (chain and host name 'localhost')"
        in (checks["events broker TLS"]["detail"])
    )
    assert checks["broker"]["status"] == "pass", checks["broker"]

    checks = _doctor(pg_url, _tls(servers, "127.0.0.1", ssl_check_hostname="false"))
    assert checks["events broker TLS"]["status"] == "warn"
    assert "host name NOT checked" in checks["events broker TLS"]["detail"]
    assert "tls://" in checks["events broker TLS"]["fix"]

    checks = _doctor(pg_url, _tls(servers, "127.0.0.1"))
    assert checks["broker"]["status"] == "fail"
    assert "mismatch" in checks["broker"]["detail"], checks["broker"]


def test_without_nkeys_the_cli_says_which_extra_to_install(tmp_path: Path) -> None:
    """`relay dispatch --once` with nkey= and no nkeys package (hidden from the process):
    exit 2, one line naming the extra, no traceback, nothing published."""
    import sys

    seed = tmp_path / "seed.nk"
    seed.write_text(new_key("user").seed)
    env = relay_env(
        database_url=f"sqlite:///{tmp_path / 'o.db'}", events_url=f"nats://127.0.0.1:1?nkey={seed}"
    )
    hide = (
        "import sys; sys.modules['nkeys'] = None; from relay.commands import main; sys.exit(main())"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide, "dispatch", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "nkey= needs the nkeys package" in done.stderr
    assert "celery-outbox-relay[nats]" in done.stderr
    assert "Traceback" not in done.stderr
