"""Who is asking: bearer tokens for scripts, a signed session cookie for people, CSRF tokens.

Two roles: ``operator`` (view and act) and ``viewer`` (view only), each granted by its own token
(``RELAY_CONSOLE_TOKEN``, ``RELAY_CONSOLE_READONLY_TOKEN``). Every comparison of a secret is
constant-time and on bytes (a value that is not ASCII is simply wrong, never an error). A token
is given in a header or a POSTed form, never in a URL (proxies and browsers keep URLs); the
link ``relay console`` prints carries a one-time sign-in code instead, void once used.

A session is stateless: its cookie holds the role, the name given at sign-in, an
expiry and a nonce, signed with a key derived from the role's token, so several server
processes agree and rotating a token ends its sessions. The CSRF token of a session is derived
from the same key and the session's nonce.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

OPERATOR = "operator"
VIEWER = "viewer"
COOKIE = "relay_console_session"
#: How long a browser session lasts.
SESSION_SECONDS = 12 * 3600


@dataclass(frozen=True, slots=True)
class Credential:
    """A request's valid credential."""

    role: str
    #: The name given at sign-in, or a script's ``X-Relay-Actor`` (``api`` when absent).
    name: str
    #: ``console`` (session cookie) or ``api`` (bearer token).
    via: str
    #: The session's CSRF token; None for a bearer token (a script sends no cookie).
    csrf: str | None = None

    @property
    def may_act(self) -> bool:
        return self.role == OPERATOR


class Guard:
    """Checks tokens, issues and reads session cookies, derives CSRF tokens."""

    def __init__(
        self, operator_token: str | None, viewer_token: str | None, signin_code: str | None = None
    ) -> None:
        self._tokens = {OPERATOR: operator_token, VIEWER: viewer_token}
        #: A one-time operator sign-in code (the printed link's), None once used.
        self._code = signin_code
        self._keys = {
            role: hmac.new(token.encode(), b"relay-console-session", hashlib.sha256).digest()
            for role, token in self._tokens.items()
            if token
        }

    def role_of(self, token: str) -> str | None:
        """The role ``token`` grants, compared in constant time against every token."""
        given = _bytes(token)
        found = None
        for role, expected in self._tokens.items():
            # Compare against each configured token whatever the outcome so far.
            if expected is not None and hmac.compare_digest(given, _bytes(expected)):
                found = role
        return found

    def redeem(self, code: str) -> str | None:
        """The operator role for the one-time sign-in code, which is void from then on."""
        expected = self._code
        if expected is None or not hmac.compare_digest(_bytes(code), _bytes(expected)):
            return None
        self._code = None
        return OPERATOR

    def bearer(self, header: str | None, actor: str | None) -> Credential | None:
        """The credential of an ``Authorization: Bearer …`` header, if valid."""
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        role = self.role_of(token.strip())
        if role is None:
            return None
        return Credential(role, clean_name(actor or "", "api"), "api")

    def issue(self, role: str, name: str, now: float | None = None) -> str:
        """A session cookie value for ``role``, signed."""
        body = {
            "r": role,
            "n": clean_name(name, role),
            "e": int((time.time() if now is None else now) + SESSION_SECONDS),
            "k": secrets.token_urlsafe(16),
        }
        payload = base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")
        return f"{payload}.{self._sign(role, payload.encode())}"

    def session(self, cookie: str | None, now: float | None = None) -> Credential | None:
        """The credential of a session cookie, if it is signed, known and not expired."""
        if not cookie or "." not in cookie:
            return None
        payload, _, sig = cookie.rpartition(".")
        try:
            body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            role, name, expiry, nonce = body["r"], str(body["n"]), int(body["e"]), str(body["k"])
        except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
            return None
        if not isinstance(role, str) or role not in self._keys:
            return None
        if not hmac.compare_digest(_bytes(sig), _bytes(self._sign(role, payload.encode()))):
            return None
        if expiry < (time.time() if now is None else now):
            return None
        return Credential(role, name, "console", self._sign(role, b"csrf:" + nonce.encode()))

    def _sign(self, role: str, data: bytes) -> str:
        return hmac.new(self._keys[role], data, hashlib.sha256).hexdigest()


def csrf_ok(cred: Credential, token: str | None) -> bool:
    """Whether a form's (or header's) CSRF token is this session's."""
    if cred.csrf is None or token is None:
        return False
    return hmac.compare_digest(_bytes(cred.csrf), _bytes(token))


def clean_name(text: str, default: str) -> str:
    """A name given at sign-in or in ``X-Relay-Actor``, as the audit records it: printable
    characters only (no lone surrogate), at most 255, ``default`` when nothing is left."""
    kept = "".join(c for c in text if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF)
    return kept.strip()[:255] or default


def _bytes(text: str) -> bytes:
    """``text`` as bytes for a constant-time comparison; any string encodes (lone surrogates
    from a form included), so a strange value is a mismatch, never an error."""
    return text.encode("utf-8", "surrogatepass")


def new_token() -> str:
    """A fresh operator token for a console started without one."""
    return secrets.token_urlsafe(32)


__all__ = [
    "COOKIE",
    "OPERATOR",
    "VIEWER",
    "Credential",
    "Guard",
    "clean_name",
    "csrf_ok",
    "new_token",
]
