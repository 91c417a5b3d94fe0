"""Certificates made in the test (``trustme``) and a TLS terminating front for a plain server.

:class:`TlsFront` listens on 127.0.0.1 (a free port) with a server certificate, optionally
requires a client certificate, and forwards the decrypted bytes to a plain server (the shared
RabbitMQ on 5672, Redis on 6379): a TLS broker without reconfiguring the shared one. It runs an
asyncio loop in a thread (asyncio's streams do TLS on one thread, so no SSL object is used by
two at once); failed handshakes are counted, not logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import trustme


class Pki:
    """A CA, and certificates it issued, written as PEM files under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = trustme.CA()
        self.ca_file = folder / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def leaf(
        self, name: str, *identities: str, expired: bool = False, common_name: str | None = None
    ) -> trustme.LeafCert:
        """A certificate for ``identities`` (valid now, or expired a day ago), its chain and
        key written to ``<name>.pem`` and ``<name>.key`` (the key 0600, as libpq requires)."""
        now = datetime.now(UTC)
        dates: dict[str, Any] = (
            {"not_before": now - timedelta(days=30), "not_after": now - timedelta(days=1)}
            if expired
            else {}
        )
        cert = self.ca.issue_cert(*identities, common_name=common_name, **dates)
        with (self.folder / f"{name}.pem").open("wb") as f:
            for blob in cert.cert_chain_pems:
                f.write(blob.bytes())
        cert.private_key_pem.write_to_path(str(self.folder / f"{name}.key"))
        (self.folder / f"{name}.key").chmod(0o600)
        return cert

    def files(self, name: str) -> tuple[str, str]:
        """The certificate and key files of :meth:`leaf` ``name``."""
        return str(self.folder / f"{name}.pem"), str(self.folder / f"{name}.key")


def server_context(cert: trustme.LeafCert, client_ca: trustme.CA | None = None) -> ssl.SSLContext:
    """A server-side context presenting ``cert``; requiring a client certificate issued by
    ``client_ca`` when given."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        client_ca.configure_trust(ctx)
    return ctx


class TlsFront:
    """TLS on 127.0.0.1:``port`` in front of the plain server at ``target``."""

    def __init__(self, target: tuple[str, int], context: ssl.SSLContext) -> None:
        self.target = target
        self.handshakes_failed = 0
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._on_error)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=context), self._loop
        ).result(10)
        self.port: int = self._server.sockets[0].getsockname()[1]

    def _on_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), (ssl.SSLError, OSError)):
            self.handshakes_failed += 1

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        finally:
            with contextlib.suppress(Exception):
                dst.close()

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


@contextlib.contextmanager
def tls_front(target: tuple[str, int], context: ssl.SSLContext) -> Iterator[TlsFront]:
    front = TlsFront(target, context)
    try:
        yield front
    finally:
        front.close()
