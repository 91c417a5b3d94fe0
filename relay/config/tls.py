"""TLS to the broker, verified by default: the options an ``amqps://`` or ``rediss://`` URL
carries, and what they become for Kombu (py-amqp's ``ssl`` dict, redis-py's ``ssl_*`` keys).

A TLS URL verifies the server's certificate chain (against the system's CA store, which
``SSL_CERT_FILE`` replaces, or ``ssl_ca_certs``) and that the certificate carries the host
name of the URL. Options, in the URL's query (each node of a failover list has its own)::

    ssl_ca_certs=PATH          CA bundle the server's chain must end in
    ssl_certfile=PATH          client certificate (PEM), for brokers that require one
    ssl_keyfile=PATH           its private key (PEM, unencrypted)
    ssl_check_hostname=false   opt-out: the chain is checked, the name is not
    ssl_cert_reqs=none         opt-out: nothing is checked (encrypted, not authenticated)

The options are taken off the URL before Kombu sees it: Kombu would hand py-amqp keys it
does not accept, and turns ``rediss://`` without options into an unverified connection.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

#: TLS schemes and the client library their options are shaped for.
SCHEMES = {"amqps": "amqp", "rediss": "redis", "tls": "nats"}
#: The query options this module reads (and removes before the URL reaches Kombu).
OPTIONS = frozenset(
    {"ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname", "ssl_cert_reqs"}
)
_CERT_REQS = {"required": True, "cert_required": True, "none": False, "cert_none": False}
_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
#: Host names that never leave the machine: no TLS needed to keep a secret from the network.
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


class TlsOptionError(ValueError):
    """A TLS option the relay does not know, or a value it cannot read."""


@dataclass(frozen=True, slots=True)
class BrokerTls:
    """What one broker URL (one node) asks of TLS."""

    #: "amqp", "redis" or "nats" for a TLS URL; None when the connection is not encrypted.
    kind: str | None
    host: str | None
    ca_certs: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    verify_chain: bool = True
    verify_name: bool = True

    @property
    def encrypted(self) -> bool:
        return self.kind is not None

    @property
    def verified(self) -> bool:
        """Encrypted, and both the chain and the host name are checked."""
        return self.encrypted and self.verify_chain and self.verify_name

    @property
    def local(self) -> bool:
        """The URL names this machine (or a Unix socket, or Kombu's embedded transport)."""
        return not self.host or self.host in LOOPBACK

    def describe(self) -> str:
        """A short verdict for logs and ``relay doctor``."""
        if not self.encrypted:
            return "not encrypted"
        if not self.verify_chain:
            return "encrypted but NOT verified (ssl_cert_reqs=none)"
        if not self.verify_name:
            return "encrypted, chain verified, host name NOT checked (ssl_check_hostname=false)"
        client = ", client certificate" if self.certfile else ""
        return f"encrypted and verified (chain and host name {self.host!r}{client})"

    def kombu_ssl(self) -> dict[str, Any] | bool:
        """The ``ssl`` argument of ``kombu.Connection`` (Celery's ``broker_use_ssl``)."""
        if self.kind == "amqp":
            return self._amqp()
        if self.kind == "redis":
            return self._redis()
        return False

    def ssl_context(self) -> ssl.SSLContext | None:
        """An SSL context for a client that takes one (nats-py, ``tls://``); None unencrypted."""
        if not self.encrypted:
            return None
        context = ssl.create_default_context(cafile=self.ca_certs)
        if self.certfile:
            context.load_cert_chain(self.certfile, self.keyfile)
        context.check_hostname = self.verify_chain and self.verify_name
        if not self.verify_chain:
            context.verify_mode = ssl.CERT_NONE
        return context

    def _amqp(self) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "cert_reqs": ssl.CERT_REQUIRED if self.verify_chain else ssl.CERT_NONE
        }
        # py-amqp checks the name exactly when it is given one (and sends it as SNI). The key
        # is left out, not None, for the opt-outs: Kombu fills a None with the URL's host.
        if self.verify_chain and self.verify_name:
            opts["server_hostname"] = self.host
        return opts | self._files("")

    def _redis(self) -> dict[str, Any]:
        return {
            "ssl_cert_reqs": "required" if self.verify_chain else "none",
            "ssl_check_hostname": self.verify_chain and self.verify_name,
        } | self._files("ssl_")

    def _files(self, prefix: str) -> dict[str, str]:
        """The CA bundle, certificate and key that were given, named as the client names them
        (py-amqp's ``ssl`` keys, redis-py's with ``ssl_`` before them)."""
        files = {"ca_certs": self.ca_certs, "certfile": self.certfile, "keyfile": self.keyfile}
        return {prefix + key: path for key, path in files.items() if path is not None}


#: Schemes whose URLs list their servers with commas (NATS: ``tls://a:4222,tls://b:4222``).
COMMA_LISTS = frozenset({"nats", "tls"})


def nodes(url: str) -> list[str]:
    """The nodes of a Kombu failover URL (``amqps://a;amqps://b``) or a NATS server list
    (``tls://a:4222,tls://b:4222``)."""
    if url.partition("://")[0].strip().lower() in COMMA_LISTS:
        url = url.replace(",", ";")
    return [u.strip() for u in url.split(";") if u.strip()] or [url]


def parse(url: str) -> tuple[str, BrokerTls]:
    """``url`` (one node) without the TLS options, and what they ask for. Raises
    :class:`TlsOptionError` for an unknown ``ssl_*`` option, a value it cannot read, or TLS
    options on a URL that is not ``amqps://`` or ``rediss://``."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    kept: list[str] = []
    found: dict[str, str] = {}
    for piece in parts.query.split("&") if parts.query else []:
        key, _, value = piece.partition("=")
        name = unquote(key).lower()
        if name in OPTIONS:
            found[name] = unquote(value)
        elif name.startswith("ssl_"):
            raise TlsOptionError(
                f"unknown TLS option {name!r} (known: {', '.join(sorted(OPTIONS))})"
            )
        else:
            kept.append(piece)
    host = parts.hostname
    kind = SCHEMES.get(scheme)
    if kind is None:
        if found:
            raise TlsOptionError(
                f"TLS options ({', '.join(sorted(found))}) on a {scheme}:// URL, which is not "
                "encrypted: use amqps://, rediss:// or tls://"
            )
        return url, BrokerTls(None, host)
    verify_chain = _read(found, "ssl_cert_reqs", _CERT_REQS, "required or none")
    verify_name = _read(found, "ssl_check_hostname", _BOOLEANS, "true or false")
    if found.get("ssl_keyfile") and not found.get("ssl_certfile"):
        raise TlsOptionError("ssl_keyfile needs ssl_certfile (the client certificate)")
    stripped = url
    if found:
        query = "&".join(kept)
        base = url.split("?", 1)[0]
        stripped = f"{base}?{query}" if query else base
    return stripped, BrokerTls(
        kind,
        host,
        ca_certs=found.get("ssl_ca_certs") or None,
        certfile=found.get("ssl_certfile") or None,
        keyfile=found.get("ssl_keyfile") or None,
        verify_chain=verify_chain,
        verify_name=verify_name,
    )


def _read(found: dict[str, str], name: str, table: dict[str, bool], expected: str) -> bool:
    if name not in found:
        return True
    value = found[name].strip().lower()
    if value not in table:
        raise TlsOptionError(f"{name}={found[name]!r} is not {expected}")
    return table[value]


def files(tls: BrokerTls) -> list[tuple[str, str]]:
    """The (option, path) pairs of the files ``tls`` names."""
    named = (
        ("ssl_ca_certs", tls.ca_certs),
        ("ssl_certfile", tls.certfile),
        ("ssl_keyfile", tls.keyfile),
    )
    return [(k, v) for k, v in named if v]
