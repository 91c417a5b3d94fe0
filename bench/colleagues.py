"""HOOK: the Celery-fleet benchmarks written alongside this package (``bench/fleet.py``,
``bench/latency.py``), called when present, reported as missing otherwise.

Each module exposes one function returning a dict; it is looked up by name (``run``,
``measure``, ``benchmark``, ``main``) and given ``quick=`` when its signature accepts it.
"""

from __future__ import annotations

import importlib
import inspect
import traceback
from typing import Any

_ENTRY_POINTS = ("run", "measure", "benchmark", "main")


def call(module_name: str, *, quick: bool) -> dict[str, Any]:
    """Run ``bench.<module_name>`` if it exists; a dict either way, saying what happened."""
    try:
        module = importlib.import_module(f"bench.{module_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"bench.{module_name}":
            raise
        return {"status": "missing", "module": f"bench/{module_name}.py"}
    for name in _ENTRY_POINTS:
        func = getattr(module, name, None)
        if callable(func):
            break
    else:
        return {"status": "no entry point", "looked_for": list(_ENTRY_POINTS)}
    kwargs = {"quick": quick} if "quick" in inspect.signature(func).parameters else {}
    try:
        result = func(**kwargs)
    except Exception as exc:
        return {"status": "error", "error": repr(exc), "traceback": traceback.format_exc()}
    return {"status": "ok", "entry_point": name, "result": result}
