"""The public API: ``relay.__all__`` is sorted, resolvable and lists every public name."""

from __future__ import annotations

import relay


def test_all_is_sorted_and_complete() -> None:
    """Every exported name resolves; everything public in the namespace is exported."""
    assert relay.__all__ == sorted(relay.__all__)
    for name in relay.__all__:
        assert getattr(relay, name).__module__.startswith("relay")
    public = {
        name
        for name, value in vars(relay).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("relay")
    }
    assert public <= set(relay.__all__)
