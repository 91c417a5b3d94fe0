"""Reading ``RELAY_*`` values: one parser per field type, each error naming the variable with
its value redacted; and ``RELAY_MAX_PAYLOAD_BYTES`` alone, for the producer."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from relay.config.urls import redact
from relay.exceptions import ConfigError

DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576

T = TypeVar("T")


def check(ok: bool, var: str, value: object, problem: str) -> None:
    """Refuse ``var``'s ``value`` with ``problem`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{var}={value!r} {problem}")


def _parse_int(raw: str) -> int:
    return int(raw, 10)


def _parse_float(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True}
_BOOLEANS |= {"0": False, "false": False, "no": False, "off": False}


def _parse_bool(raw: str) -> bool:
    try:
        return _BOOLEANS[raw.lower()]
    except KeyError:
        raise ValueError("not a boolean") from None


def parse(var: str, raw: str, parser: Callable[[str], T]) -> T:
    """``raw`` through ``parser``; a value it refuses becomes a ConfigError naming ``var``."""
    try:
        return parser(raw)
    except ValueError:
        kinds: dict[object, str] = {
            _parse_int: "an integer",
            _parse_float: "a finite number",
            _parse_bool: "a boolean (1/0, true/false, yes/no, on/off)",
        }
        kind = kinds.get(parser, "valid")
        raise ConfigError(f"{var}={redact(raw)!r} is not {kind}") from None


PARSERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "str | None": str,
    "int": _parse_int,
    "int | None": _parse_int,
    "float": _parse_float,
    "bool": _parse_bool,
}


def max_payload_bytes_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``RELAY_MAX_PAYLOAD_BYTES`` alone, for the producer, which must not fail on a bad value
    of an unrelated relay setting inside the application's transaction."""
    env = os.environ if environ is None else environ
    raw = env.get("RELAY_MAX_PAYLOAD_BYTES", "").strip()
    if not raw:
        return DEFAULT_MAX_PAYLOAD_BYTES
    value = parse("RELAY_MAX_PAYLOAD_BYTES", raw, _parse_int)
    check(value >= 1, "RELAY_MAX_PAYLOAD_BYTES", value, "must be >= 1")
    return value
