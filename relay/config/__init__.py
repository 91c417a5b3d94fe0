"""Settings from the environment, validated once, passed in explicitly.

No I/O beyond reading the mapping it is given; no third-party imports. :class:`Settings` lives
in :mod:`relay.config.settings`, the parsing of each ``RELAY_*`` value in :mod:`relay.config.env`.
"""

from __future__ import annotations

from relay.config.settings import DEFAULT_BROKER_URL, DEFAULT_DATABASE_URL, Settings

__all__ = ["DEFAULT_BROKER_URL", "DEFAULT_DATABASE_URL", "Settings"]
