"""One row's JSON columns (payload, headers) as an operator's view shows them, read without
raising.

The dispatch path dead-letters a row whose JSON the relay cannot decode
(``relay.records.decode_each``); the views of one row (the console's event page,
``GET /api/events/{id}``) decode it the same way. A text that does not decode, or decodes to
what a JSON view cannot render (a number JSON text has no spelling for, nesting deeper than a
page renders), is shown as the stored text, cut to :data:`SHOWN_CHARS`, with why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from relay.records import decode_each

#: The JSON columns of a row.
JSON_FIELDS = ("payload", "headers")
#: Characters of a text that cannot be shown as JSON that a view shows (the rest is counted).
SHOWN_CHARS = 4000
#: Nesting a view shows as JSON: rendering and masking walk a value by recursion, in a stack
#: deeper than a claim's, so a value the decoder reads may still be too deep to render.
SHOWN_DEPTH = 100


def readable(
    row: Mapping[str, Any], loads_many: Callable[[list[Any]], list[Any]]
) -> dict[str, Any]:
    """``row`` with its ``payload`` and ``headers`` (JSON text as stored) decoded, and
    ``unreadable``: for each that cannot be shown as JSON (then None), ``reason``, ``text``
    (its first :data:`SHOWN_CHARS` characters) and ``chars`` (its length)."""
    out = dict(row)
    texts: Sequence[Any] = [row[name] for name in JSON_FIELDS]
    unreadable: dict[str, dict[str, Any]] = {}
    for name, text, (value, why) in zip(
        JSON_FIELDS, texts, decode_each(texts, loads_many), strict=True
    ):
        why = why or _unshowable(value)
        if why is None:
            out[name] = value
            continue
        stored = text if isinstance(text, str) else repr(text)
        out[name] = None
        unreadable[name] = {
            "reason": why,
            "text": stored[:SHOWN_CHARS],
            "chars": len(stored),
        }
    out["unreadable"] = unreadable
    return out


def _unshowable(value: Any) -> str | None:
    """Why a decoded value cannot be rendered as JSON (None: it can); walks it without
    recursion, so no value can exhaust the stack here."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > SHOWN_DEPTH:
                return f"JSON nested over {SHOWN_DEPTH} deep, deeper than a view renders"
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            return f"a number JSON text cannot hold ({item})"
    return None
