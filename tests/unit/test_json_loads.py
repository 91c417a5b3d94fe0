"""The JSON decoder the relay's engines give their drivers reads what ``json.loads`` reads."""

from __future__ import annotations

import json

import pytest

from relay.store.engine import json_loads, json_loads_many

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


def test_many_texts_decode_in_one_call_as_each_alone() -> None:
    """A claim's texts, decoded together, give each text's own value in order; NULL is None."""
    texts = [*SAMPLES, None, "0", '"x"', None]
    assert json_loads_many(texts) == [None if t is None else json.loads(t) for t in texts]
    assert json_loads_many([]) == []


@pytest.mark.parametrize("bad", ['{"a": ', "1, 2", "", "1] [2", " "])
def test_a_text_that_is_not_one_json_value_fails_alone(bad: str) -> None:
    """A text that is not one JSON value (plain SQL can store one in SQLite) never shifts the
    others' values: it is refused as json.loads refuses it."""
    with pytest.raises(json.JSONDecodeError):
        json_loads_many(['{"ok": 1}', bad, "[2]"])
