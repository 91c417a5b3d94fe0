"""Signed events: an HMAC-SHA256 over the body and the contract headers, so a consumer holding
the key can tell that an event came from the relay (and was not altered), whoever else may
publish to the exchange. Pure (hmac, hashlib).

The header ``relay_signature`` is ``v1 <key id> <hex digest>``; the digest covers, one per line,
``v1``, the message id, the routing key (= ``event_type``), the ``outbox_id``, ``created_at``
and ``cloudEvents:source`` headers, and the SHA-256 of the body. These are compared as text, so
the signature survives transports that retype headers (Redis carries them as JSON). The
keys come from ``RELAY_SIGNING_KEYS`` (:mod:`relay.config.signing`): the first signs, all
verify, which is how a key is rotated. Celery task messages are not signed (a Celery worker
would not read it).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relay.config.signing import parse_keys

HEADER = "relay_signature"
SCHEME = "v1"


def canonical(
    message_id: str, routing_key: str, headers: Mapping[str, Any], body: bytes | str
) -> bytes:
    """What a signature covers (see the module's doc). A body a client library decoded (py-amqp
    decodes by ``content_encoding``) is encoded back as UTF-8, the relay's encoding."""
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    fields = (
        SCHEME,
        message_id,
        routing_key,
        str(headers.get("outbox_id", "")),
        str(headers.get("created_at", "")),
        str(headers.get("cloudEvents:source", "")),
        hashlib.sha256(body).hexdigest(),
    )
    return "\n".join(fields).encode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class Keyring:
    """The keys of ``RELAY_SIGNING_KEYS``: the first signs, every one verifies."""

    keys: tuple[tuple[str, bytes], ...]

    @classmethod
    def from_text(cls, text: str | None) -> Keyring | None:
        """The keyring of ``text`` (``kid=secret,...``); None when ``text`` is empty."""
        return cls(parse_keys(text)) if text else None

    def __repr__(self) -> str:
        return f"Keyring(kids={[kid for kid, _ in self.keys]!r})"  # never the secrets

    def sign(
        self, message_id: str, routing_key: str, headers: Mapping[str, Any], body: bytes
    ) -> str:
        """The ``relay_signature`` header value, with the signing (first) key."""
        kid, secret = self.keys[0]
        digest = hmac.new(secret, canonical(message_id, routing_key, headers, body), "sha256")
        return f"{SCHEME} {kid} {digest.hexdigest()}"

    def verify(
        self, message_id: str, routing_key: str, headers: Mapping[str, Any], body: bytes | str
    ) -> str | None:
        """None when the message carries a valid signature by one of these keys; otherwise
        why not (unsigned, an unknown key id, a digest that does not match)."""
        value = headers.get(HEADER)
        if value is None:
            return f"unsigned (no {HEADER} header)"
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        scheme, _, rest = str(value).partition(" ")
        kid, _, given = rest.partition(" ")
        if scheme != SCHEME:
            return f"unknown signature scheme {scheme[:20]!r}"
        secret = dict(self.keys).get(kid)
        if secret is None:
            return f"signed with unknown key id {kid[:64]!r}"
        digest = hmac.new(secret, canonical(message_id, routing_key, headers, body), "sha256")
        if not hmac.compare_digest(digest.hexdigest().encode(), given.encode("utf-8", "replace")):
            return f"bad signature (key {kid!r}): altered, or not from the relay"
        return None
