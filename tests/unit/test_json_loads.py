"""The JSON decoder the relay's engines give their drivers reads what ``json.loads`` reads."""

from __future__ import annotations

import json

import pytest

from relay.engine import json_loads

SAMPLES = [
    '{"a": 1, "b": [1, 2.5, null, true], "c": {"d": "é ✓ \\u2028"}}',
    "[]",
    '"text"',
    "12345678901234567890123",
    '{"nested": {"deep": [[[{}]]]}, "emoji": "\\ud83d\\ude00"}',
]


@pytest.mark.parametrize("text", SAMPLES)
def test_decodes_str_and_utf8_bytes_as_json_loads_does(text: str) -> None:
    expected = json.loads(text)
    assert json_loads(text) == expected
    assert json_loads(text.encode()) == expected
    assert json_loads(memoryview(text.encode())) == expected  # type: ignore[arg-type]


def test_bad_json_is_refused_as_json_loads_refuses_it() -> None:
    with pytest.raises(json.JSONDecodeError):
        json_loads(b'{"a": ')
