"""``relay dispatch --loop`` settles its heap once built (``relay.runners.process.settle_heap``)."""

from __future__ import annotations

import subprocess
import sys


def test_settling_freezes_start_up_and_widens_only_the_youngest_generation() -> None:
    """In a fresh interpreter (the collector is process-wide): what exists is frozen, the young
    generation's threshold is the relay's, the older generations' stay CPython's."""
    code = (
        "import gc; before = gc.get_threshold();"
        "from relay.runners.process import YOUNG_COLLECTION_THRESHOLD, settle_heap;"
        "settle_heap(); after = gc.get_threshold();"
        "print(gc.get_freeze_count() > 0, after[0] == YOUNG_COLLECTION_THRESHOLD,"
        " after[1:] == before[1:], gc.isenabled())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["True", "True", "True", "True"]
