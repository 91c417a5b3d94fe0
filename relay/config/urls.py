"""Database and broker URLs as text: credentials redacted so that no log line or error carries a
secret, and the drivers this package installs given to driverless URLs."""

from __future__ import annotations

import re

# The scheme is optional: a value missing it ("user:pw@host", a mistake the config refuses)
# still carries a password the refusal must not echo.
_USERINFO = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)?(?P<user>[^:@/\s]*):(?P<pw>[^@/\s]*)@"
)
#: A secret named in a URL's query (``?password=``, ``&sslpassword=``, ``ssl_password``,
#: ``access_token``, ``api_key``) or in a libpq keyword string (``password=... sslpassword=...``):
#: any key that contains one of these words.
_SECRET_WORDS = r"(?:password|passwd|pwd|passphrase|secret|token|api_?key|credential)"  # noqa: S105 (names of secrets, not one)
_QUERY_SECRET = re.compile(
    rf"(?i)(?P<key>(?:^|(?<=[?&;\s,(]))[a-z0-9_.\-]*{_SECRET_WORDS}[a-z0-9_.\-]*\s*=\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'|[^&\s'\",;)]*)"
)


#: A NATS URL's user info without a password is a token (``nats://token@host``): secret too.
_NATS_TOKEN = re.compile(r"(?i)(?P<scheme>\b(?:nats|tls)://)[^:@/\s,;]+@")


def redact(text: str) -> str:
    """Replace every password in URLs found in ``text`` (user info, a NATS URL's token, and any
    query or libpq keyword naming a password, passphrase, secret, token or key) by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['scheme'] or ''}{m['user']}:***@", text)
    text = _NATS_TOKEN.sub(lambda m: f"{m['scheme']}***@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}***", text)


_DEFAULT_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mariadb+pymysql",
}


def normalize_url(url: str) -> str:
    """Give driverless URLs the drivers this package installs (psycopg 3, PyMySQL)."""
    scheme, sep, rest = url.partition("://")
    return f"{_DEFAULT_DRIVERS.get(scheme, scheme)}{sep}{rest}"


def first_line_redacted(exc: BaseException) -> str:
    """``Class: first line`` of what ``exc`` says, or of the driver's error it wraps (an
    SQLAlchemy error's ``orig``), with its passwords redacted: a driver's message can run to
    many lines (a statement, a hint) and name the URL it failed on."""
    orig = getattr(exc, "orig", None)
    cause = orig if orig is not None else exc
    lines = str(cause).strip().splitlines()
    return redact(f"{type(cause).__name__}: {lines[0] if lines else ''}")
