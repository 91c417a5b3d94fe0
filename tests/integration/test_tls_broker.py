"""amqps:// and rediss:// against a real TLS listener (a front in the test, certificates made in
the test by ``trustme``): the chain and the host name are verified by default; a wrong name, an
unknown CA and an expired certificate are each refused with the reason; a client certificate
is presented when the URL names one; the opt-outs work and are logged."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import kombu.exceptions
import pytest

from relay.exceptions import BrokerUnavailable
from relay.publishers import for_url
from relay.records import ClaimedEvent
from tests.support import services
from tests.support.broker import Collector
from tests.support.tlsfront import Pki, TlsFront, server_context, tls_front


def _event(i: int) -> ClaimedEvent:
    return ClaimedEvent(
        id=i,
        event_type="order.created",
        payload={"n": i},
        headers=None,
        ordering_key=None,
        attempt=1,
        created_at=datetime(2026, 12, 6, tzinfo=UTC),
    )


def _target(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.port is not None
    return parts.hostname or "127.0.0.1", parts.port


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def rabbit(amqp_url: str, pki: Pki) -> Iterator[TlsFront]:
    """TLS with a certificate for ``localhost`` in front of the shared RabbitMQ."""
    with tls_front(_target(amqp_url), server_context(pki.leaf("broker", "localhost"))) as front:
        yield front


def _amqps(port: int, host: str = "localhost", **options: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"amqps://guest:guest@{host}:{port}//" + (f"?{query}" if query else "")


def _delivers(url: str, exchange: str, collector: Collector) -> None:
    publisher = for_url(url, exchange)
    try:
        result = publisher.publish([_event(1)])
    finally:
        publisher.close()
    assert [e.id for e in result.confirmed] == [1], result.error
    assert [m.outbox_id for m in collector.drain(1, timeout=10)] == [1]


def _refused(url: str, exchange: str) -> str:
    publisher = for_url(url, exchange)
    try:
        with pytest.raises(BrokerUnavailable) as caught:
            publisher.connect()
    finally:
        publisher.close()
    return str(caught.value)


def test_verified_amqps_delivers(
    rabbit: TlsFront, pki: Pki, exchange_name: str, collector: Collector
) -> None:
    """The right name and the CA given by ``ssl_ca_certs``: the event is delivered and confirmed."""
    _delivers(_amqps(rabbit.port, ssl_ca_certs=str(pki.ca_file)), exchange_name, collector)


def test_ca_from_ssl_cert_file(
    rabbit: TlsFront,
    pki: Pki,
    exchange_name: str,
    collector: Collector,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No option in the URL: the system store is used, which ``SSL_CERT_FILE`` replaces."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_file))
    _delivers(_amqps(rabbit.port), exchange_name, collector)


def test_name_the_certificate_does_not_carry_is_refused(
    rabbit: TlsFront, pki: Pki, exchange_name: str
) -> None:
    """The certificate is for localhost; 127.0.0.1 is not a name it carries: refused, and the
    error says why."""
    error = _refused(_amqps(rabbit.port, "127.0.0.1", ssl_ca_certs=str(pki.ca_file)), exchange_name)
    assert "certificate verify failed" in error
    assert "mismatch" in error
    assert "guest:guest" not in error


def test_unknown_ca_is_refused(rabbit: TlsFront, tmp_path: Path, exchange_name: str) -> None:
    """A CA bundle that did not issue the broker's certificate: refused."""
    (tmp_path / "other").mkdir()
    other = Pki(tmp_path / "other")
    error = _refused(_amqps(rabbit.port, ssl_ca_certs=str(other.ca_file)), exchange_name)
    assert "certificate verify failed" in error
    assert "unable to get local issuer certificate" in error


def test_expired_certificate_is_refused(amqp_url: str, pki: Pki, exchange_name: str) -> None:
    """A certificate past its end date, from the trusted CA, for the right name: refused."""
    cert = pki.leaf("expired", "localhost", expired=True)
    with tls_front(_target(amqp_url), server_context(cert)) as front:
        error = _refused(_amqps(front.port, ssl_ca_certs=str(pki.ca_file)), exchange_name)
    assert "certificate has expired" in error


def test_client_certificate(
    amqp_url: str, pki: Pki, exchange_name: str, collector: Collector
) -> None:
    """A broker that requires a client certificate refuses a client without one and accepts
    the one named by ``ssl_certfile``/``ssl_keyfile``."""
    pki.leaf("relay-client", "relay-client.example")
    certfile, keyfile = pki.files("relay-client")
    context = server_context(pki.leaf("broker", "localhost"), client_ca=pki.ca)
    with tls_front(_target(amqp_url), context) as front:
        _refused(_amqps(front.port, ssl_ca_certs=str(pki.ca_file)), exchange_name)
        url = _amqps(
            front.port, ssl_ca_certs=str(pki.ca_file), ssl_certfile=certfile, ssl_keyfile=keyfile
        )
        _delivers(url, exchange_name, collector)


def test_name_opt_out_delivers_and_warns(
    rabbit: TlsFront,
    pki: Pki,
    exchange_name: str,
    collector: Collector,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``ssl_check_hostname=false``: a name the certificate lacks is accepted (the chain is
    still checked), and a WARNING says the connection is not verified."""
    url = _amqps(
        rabbit.port, "127.0.0.1", ssl_ca_certs=str(pki.ca_file), ssl_check_hostname="false"
    )
    with caplog.at_level(logging.WARNING, logger="relay.publishers.transports"):
        _delivers(url, exchange_name, collector)
    assert "host name NOT checked" in caplog.text
    assert "guest:guest" not in caplog.text


def test_verification_opt_out_delivers_and_warns(
    rabbit: TlsFront, exchange_name: str, collector: Collector, caplog: pytest.LogCaptureFixture
) -> None:
    """``ssl_cert_reqs=none``: no CA at all, still delivered (encrypted), loudly logged."""
    url = _amqps(rabbit.port, "127.0.0.1", ssl_cert_reqs="none")
    with caplog.at_level(logging.WARNING, logger="relay.publishers.transports"):
        _delivers(url, exchange_name, collector)
    assert "NOT verified" in caplog.text


@pytest.fixture
def redis_front(redis_url: str, pki: Pki) -> Iterator[TlsFront]:
    services.require("Redis", redis_url)
    with tls_front(_target(redis_url), server_context(pki.leaf("redis", "localhost"))) as front:
        yield front


def test_rediss_verified_delivers_and_wrong_name_is_refused(
    redis_front: TlsFront, redis_url: str, pki: Pki, exchange_name: str
) -> None:
    """rediss:// verifies too (Kombu alone would not): the right name delivers, another is
    refused with the reason."""
    collector = Collector(redis_url, exchange_name)
    try:
        good = f"rediss://localhost:{redis_front.port}/0?ssl_ca_certs={pki.ca_file}"
        _delivers(good, exchange_name, collector)
    finally:
        collector.close()
    bad = f"rediss://127.0.0.1:{redis_front.port}/0?ssl_ca_certs={pki.ca_file}"
    publisher = for_url(bad, exchange_name)
    try:
        result = publisher.publish([_event(2)])
    finally:
        publisher.close()
    assert result.confirmed == []
    assert "certificate verify failed" in str(result.error)


def test_each_failover_node_is_verified_against_its_own_name(
    rabbit: TlsFront, pki: Pki, exchange_name: str, collector: Collector
) -> None:
    """``amqps://127.0.0.1…;amqps://localhost…``: the first node's certificate lacks its name
    (refused), the second is verified against ``localhost`` (not the first node's name) and
    delivers."""
    ca = str(pki.ca_file)
    url = ";".join(
        (_amqps(rabbit.port, "127.0.0.1", ssl_ca_certs=ca), _amqps(rabbit.port, ssl_ca_certs=ca))
    )
    _delivers(url, exchange_name, collector)


def test_relay_celery_app_connects_over_verified_tls(rabbit: TlsFront, pki: Pki) -> None:
    """The relay's Celery app (``broker_use_ssl`` from the URL's options) connects to the right
    name and is refused at a name the certificate lacks."""
    from relay.celery import create_app
    from relay.config import Settings

    for host, accepted in (("localhost", True), ("127.0.0.1", False)):
        url = _amqps(rabbit.port, host, ssl_ca_certs=str(pki.ca_file))
        app = create_app(Settings(broker_url=url))
        conn = app.connection_for_write()
        try:
            if accepted:
                conn.ensure_connection(max_retries=0)
                assert conn.connected
            else:
                with pytest.raises(kombu.exceptions.OperationalError, match="mismatch"):
                    conn.ensure_connection(max_retries=0)
        finally:
            conn.release()
