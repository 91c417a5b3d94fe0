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


_OLD_PATHS = """
import importlib, sys, relay
for old, new in sorted(relay.MOVED.items()):
    module = importlib.import_module(old)
    assert module is importlib.import_module(new), old
    assert module.__name__ == new and module.__spec__.name == new, (old, module.__spec__)
from relay.inbox import claim
from relay.consume.inbox import claim as claimed
assert claim is claimed
import relay.engine
assert relay.engine.create_engine is sys.modules["relay.store.engine"].create_engine
print(len(relay.MOVED))
"""


def test_every_moved_module_still_imports_under_its_old_path() -> None:
    """``import relay.engine`` (and every other path from before the package had rooms) gives
    the module at its new home, with its own name and spec."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _OLD_PATHS], capture_output=True, text=True, check=True
    ).stdout
    assert int(out) == len(relay.MOVED) > 20


def test_names_of_the_former_flat_modules_still_import() -> None:
    """Names users imported from ``relay.store``, ``relay.observe`` and ``relay.dispatcher``
    before those became rooms resolve to the same objects as at their new homes."""
    from relay.dispatcher import BEHIND_A_FAILURE, hold_back_after_failures

    import relay.dispatch.dispatcher
    import relay.observe.observers
    import relay.ordering
    import relay.records
    import relay.store.dispatch
    import relay.store.operations
    from relay.observe import Observer, Observers, Recorded
    from relay.store import PURGE_LOCK_KEY, Actor, Changed, Completed, Store

    assert Store is relay.store.dispatch.DispatchStore
    assert Completed is relay.records.Completed
    assert (Actor, Changed, PURGE_LOCK_KEY) == (
        relay.store.operations.Actor,
        relay.store.operations.Changed,
        relay.store.operations.PURGE_LOCK_KEY,
    )
    assert (Observer, Observers, Recorded) == (
        relay.observe.observers.Observer,
        relay.observe.observers.Observers,
        relay.observe.observers.Recorded,
    )
    assert hold_back_after_failures is relay.ordering.hold_back_after_failures
    assert BEHIND_A_FAILURE == relay.ordering.BEHIND_A_FAILURE
