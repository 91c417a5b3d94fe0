"""Redaction of credentials in connection URLs, so that no log line or error carries a secret."""

from __future__ import annotations

import re

# The scheme is optional: a value missing it ("user:pw@host", a mistake the config refuses)
# still carries a password the refusal must not echo.
_USERINFO = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)?(?P<user>[^:@/\s]*):(?P<pw>[^@/\s]*)@"
)
_QUERY_SECRET = re.compile(r"(?i)(?P<key>[?&](?:password|passwd|pwd|secret|token)=)[^&\s]*")


def redact(text: str) -> str:
    """Replace every password in URLs found in ``text`` by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['scheme'] or ''}{m['user']}:***@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['key']}***", text)
