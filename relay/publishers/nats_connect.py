"""Connecting to NATS (``RELAY_EVENTS_URL=nats://...`` or ``tls://...``): the URL's servers,
their TLS, the credentials, and a connection that tries the servers in the order given.

- **Servers**: comma-separated (``tls://a:4222,tls://b:4222``); each is tried in turn, the
  first that accepts the connection is used (nats-py alone would shuffle them and, with
  reconnecting off, give up at the first one that refuses TLS or the credentials).
- **TLS** (:mod:`relay.config.tls`): a ``tls://`` server is verified, chain and host name, with
  its own ``ssl_*`` options and against its own name. A ``tls://`` server whose INFO does not
  require TLS is refused before the credentials are sent: nats-py would otherwise carry on in
  clear, as it upgrades only when the server asks for it. ``tls://`` and ``nats://`` servers
  are not mixed in one URL.
- **Credentials**: user and password (``nats://user:password@host``) or a token
  (``nats://token@host``) ride in each server's URL, as nats-py reads them; ``creds=PATH`` (a
  user JWT and seed, ``nsc generate creds``) or ``nkey=PATH`` (an NKEY seed file) in the query
  are one identity for every server (given once, on any of them). Both need the ``nkeys``
  package (in the ``[nats]`` extra); a missing package or an unreadable file is a
  configuration error at start-up, not a traceback at the first connect.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import nats.errors
from nats.aio.client import Client

from relay.config import tls
from relay.config.urls import redact
from relay.exceptions import BrokerUnavailable
from relay.publishers.kombu_connection import describe

log = logging.getLogger(__name__)

#: What to install when ``creds=`` or ``nkey=`` is given without the ``nkeys`` package.
NKEYS_INSTALL = "pip install 'celery-outbox-relay[nats]' (or nkeys)"
#: The query options that name a credential file, and nats-py's keyword for each.
CREDENTIALS = {"creds": "user_credentials", "nkey": "nkeys_seed"}
_CREDS_MARKERS = ("BEGIN NATS USER JWT", "BEGIN USER NKEY SEED")
#: Servers (and verdicts) whose unverified TLS was already logged by this process.
_WARNED: set[str] = set()


@dataclass(frozen=True)
class Server:
    """One server of the URL: its address (user info kept, query taken off) and its TLS."""

    url: str
    tls: tls.BrokerTls


@dataclass(frozen=True)
class Target:
    """What a NATS URL asks for: its servers, in order, and the credential files' keywords."""

    servers: list[Server]
    credentials: dict[str, str] = field(default_factory=dict)


def parse(url: str) -> Target:
    """The servers and credentials of a NATS URL; ValueError for an unknown option, an
    unreadable TLS one or credential file, ``tls://`` mixed with ``nats://``, or a credential
    file without the ``nkeys`` package."""
    servers: list[Server] = []
    credentials: dict[str, str] = {}
    for node in tls.nodes(url):
        bare, node_tls = tls.parse(node)
        parts = urlsplit(bare)
        for key, value in parse_qsl(parts.query):
            if key not in CREDENTIALS:
                raise ValueError(
                    f"{redact(node)}: unknown NATS URL option {key!r} (known: creds, nkey, "
                    "and the TLS options of docs/security.md)"
                )
            keyword = CREDENTIALS[key]
            if credentials.get(keyword, value) != value:
                raise ValueError(f"{key}= is given twice with different files: give it once")
            credentials[keyword] = value
        servers.append(Server(urlunsplit(parts._replace(query="")), node_tls))
    if len({s.tls.encrypted for s in servers}) > 1:
        raise ValueError(
            "tls:// and nats:// servers in one URL: a connection to a nats:// one would not be "
            "encrypted; use tls:// for every server"
        )
    for keyword, path in credentials.items():
        _check_file(keyword, path)
    return Target(servers, credentials)


def _check_file(keyword: str, path: str) -> None:
    option = next(k for k, v in CREDENTIALS.items() if v == keyword)
    if importlib.util.find_spec("nkeys") is None:
        raise ValueError(f"{option}= needs the nkeys package: {NKEYS_INSTALL}")
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise ValueError(f"{option}={path}: cannot read it ({exc.strerror or exc})") from exc
    # nats-py reads a credentials file lacking its JWT block in an endless loop, and an
    # unreadable seed fails inside its connect with an error of the nkeys package.
    if option == "creds":
        seed = text.partition(_CREDS_MARKERS[1])[2].partition("\n")[2].partition("\n")[0]
        if _CREDS_MARKERS[0] not in text or not _is_seed(seed):
            raise ValueError(
                f"creds={path}: not a NATS credentials file (a user JWT and an NKEY seed, "
                "as `nsc generate creds` writes)"
            )
    elif not _is_seed(text):
        raise ValueError(f"nkey={path}: not an NKEY seed (a line starting with S)")


def _is_seed(text: str) -> bool:
    import nkeys

    try:
        nkeys.from_seed(bytearray(text.strip().encode())).wipe()
    except Exception:
        return False
    return True


def options(server: Server, credentials: dict[str, str]) -> dict[str, Any]:
    """nats-py's ``connect`` keywords for ``server``."""
    context: ssl.SSLContext | None = server.tls.ssl_context()
    if context is None:
        return dict(credentials)
    # No tls_hostname: nats-py checks the name of the server it connects to.
    return {**credentials, "tls": context}


def warn_unverified(target: Target) -> None:
    """Log a WARNING, once per server, verdict and process, for TLS an option leaves
    unverified."""
    for server in target.servers:
        verdict = f"{server.url} {server.tls.describe()}"
        if server.tls.encrypted and not server.tls.verified and verdict not in _WARNED:
            _WARNED.add(verdict)
            log.warning(
                "TLS to %s is %s: a machine on the path can impersonate the broker and read "
                "or alter every message",
                redact(server.url),
                server.tls.describe(),
            )


class _TlsRequired(Client):
    """A nats-py client that refuses a server whose INFO does not ask for TLS, before it
    sends the credentials (``tls://``)."""

    async def _process_info(self, info: dict[str, Any], initial_connection: bool = False) -> None:
        if initial_connection and not info.get("tls_required"):
            raise NoTls("the server does not offer TLS, and the URL says tls://")
        await super()._process_info(info, initial_connection)


class NoTls(nats.errors.Error):
    """A ``tls://`` server answered without TLS."""


async def connect(url: str, *, timeout: float, **kwargs: Any) -> Client:
    """A connection to the first server of ``url`` that accepts one, with reconnecting off
    (the relay reconnects on its next call); BrokerUnavailable, saying why each server
    refused, when none does."""
    target = parse(url)
    warn_unverified(target)
    failures: list[str] = []
    # The caller's callbacks are for the connection it gets, not for those that failed (a
    # failed one closes, which would read as the chosen one lost).
    callbacks = {k: kwargs.pop(k) for k in ("closed_cb", "disconnected_cb") if k in kwargs}
    chosen: list[Client] = []
    for server in target.servers:
        errors: list[BaseException] = []

        async def error(exc: Exception, errors: list[BaseException] = errors) -> None:
            errors.append(exc)
            log.debug("NATS connection: %s", describe(exc))

        nc = _TlsRequired() if server.tls.encrypted else Client()
        relayed: dict[str, Any] = {k: _only_if_chosen(f, nc, chosen) for k, f in callbacks.items()}
        try:
            await nc.connect(
                [server.url],
                allow_reconnect=False,
                # One try at the address: nats-py's own retries would wait 2 s each.
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                connect_timeout=max(1, round(timeout)),
                error_cb=error,
                **kwargs,
                **relayed,
                **options(server, target.credentials),
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            cause = errors[-1] if isinstance(exc, nats.errors.NoServersError) and errors else exc
            failures.append(f"{redact(server.url)}: {why(cause)}")
            await _discard(nc)
            continue
        chosen.append(nc)
        return nc
    raise BrokerUnavailable("NATS refused or unreachable: " + "; ".join(failures))


def _only_if_chosen(
    callback: Callable[[], Awaitable[None]], nc: Client, chosen: list[Client]
) -> Callable[[], Awaitable[None]]:
    async def relayed() -> None:
        if nc in chosen:
            await callback()

    return relayed


async def _discard(nc: Client) -> None:
    """Close what a failed connect left open (nats-py leaves the socket to the collector)."""
    try:
        await asyncio.wait_for(nc.close(), 1)
    except Exception as exc:
        log.debug("closing NATS connection: %s", describe(exc))


def why(exc: BaseException) -> str:
    """What a failed connection says, in words an operator can act on (no password)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: certificate verify failed: {exc.verify_message}"
    if isinstance(exc, NoTls):
        return f"TLS: {exc}"
    text = str(exc)
    if "Authorization Violation" in text or isinstance(exc, nats.errors.AuthorizationError):
        return (
            "authorization refused (Authorization Violation): check the user and password, "
            "token, nkey= or creds= of the URL"
        )
    return describe(exc)
