"""``RELAY_SIGNING_KEYS``: the keys that sign events and verify them, read from their text.

``kid=secret[,kid=secret...]``: the first key signs what the relay publishes, every key listed
verifies what a consumer receives, so a key is rotated by putting the new one first and dropping
the old one once no message signed with it can still arrive. A key id is 1-64 characters of
letters, digits, ``.``, ``_`` and ``-``; a secret at least :data:`MIN_SECRET_LENGTH` characters.
"""

from __future__ import annotations

import re

MIN_SECRET_LENGTH = 32
_KID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def parse_keys(text: str) -> tuple[tuple[str, bytes], ...]:
    """The (key id, secret) pairs of ``text``, the signing key first; ValueError naming what is
    wrong (never the secret)."""
    keys: list[tuple[str, bytes]] = []
    for n, entry in enumerate(text.split(","), start=1):
        kid, eq, secret = entry.strip().partition("=")
        if not eq:
            raise ValueError(f"entry {n} is not kid=secret")
        if not _KID.fullmatch(kid):
            raise ValueError(f"entry {n}: key id {kid[:20]!r} is not 1-64 of A-Z a-z 0-9 . _ -")
        if len(secret) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"entry {n} ({kid}): the secret is shorter than {MIN_SECRET_LENGTH} characters"
            )
        if any(kid == seen for seen, _ in keys):
            raise ValueError(f"key id {kid!r} is listed twice")
        keys.append((kid, secret.encode()))
    return tuple(keys)
