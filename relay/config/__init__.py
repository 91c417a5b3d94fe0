"""Settings from the environment, validated once, passed in explicitly.

No I/O beyond reading the mapping it is given; no third-party imports. :class:`Settings` lives
in :mod:`relay.config.settings`, the parsing of each ``RELAY_*`` value in :mod:`relay.config.env`.
"""

from __future__ import annotations

from relay.config.checks import MIN_TOKEN_LENGTH
from relay.config.env import DEFAULT_MAX_PAYLOAD_BYTES, max_payload_bytes_from_env
from relay.config.settings import (
    CONFIRM_SHARE_OF_LEASE,
    CONSOLE_ONLY,
    DATABASE_ONLY,
    DEFAULT_BROKER_URL,
    DEFAULT_DATABASE_URL,
    POLLED_IDLE_SECONDS,
    POLLED_TICK_SECONDS,
    REPLAY_ONLY,
    Settings,
    env_fields,
    env_name,
)

__all__ = [
    "CONFIRM_SHARE_OF_LEASE",
    "CONSOLE_ONLY",
    "DATABASE_ONLY",
    "DEFAULT_BROKER_URL",
    "DEFAULT_DATABASE_URL",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MIN_TOKEN_LENGTH",
    "POLLED_IDLE_SECONDS",
    "POLLED_TICK_SECONDS",
    "REPLAY_ONLY",
    "Settings",
    "env_fields",
    "env_name",
    "max_payload_bytes_from_env",
]
