"""``docs/benchmarks.md`` from ``bench/results/*.json``: headline ratios, tables, plots, notes.

``python -m bench --report-only`` rebuilds it from saved results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import console, consumer, markdown, metrics_cost, ordering, plots, tasks, wakeup


def load(results: Path) -> dict[str, dict[str, Any]]:
    """Every section's saved record, by section name (other JSON there, such as
    ``claim_rates.json`` from ``bench/claim_rates.py``, is not a section and is skipped)."""
    records = {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}
    return {name: rec for name, rec in records.items() if "section" in rec and "data" in rec}


def write(results: Path, docs: Path) -> Path:
    """Draw the plots next to ``docs`` (in ``img/``) and write the Markdown report."""
    recs = load(results)
    res = {k: v["data"] for k, v in recs.items()}
    img = docs.parent / "img"
    img.mkdir(parents=True, exist_ok=True)
    plots.throughput(res, img / "bench-throughput.png")
    plots.latency(res.get("latency_polling", {}), img / "bench-latency-polling.png")
    plots.history(res.get("history", {}), img / "bench-history.png")
    text = markdown.render(recs, res)
    if "ordering" in res:  # self-contained section: bench/ordering.py renders its own
        text += "\n" + ordering.render(res["ordering"])
    if "wakeup" in res:  # self-contained section: bench/wakeup.py renders its own
        text += "\n" + wakeup.render(res["wakeup"])
    if "metrics_cost" in res:  # self-contained section: bench/metrics_cost.py renders its own
        text += "\n" + metrics_cost.render(res["metrics_cost"])
    if "console" in res:  # self-contained section: bench/console.py renders its own
        text += "\n" + console.render(res["console"])
    for name, module in (("consumer", consumer), ("tasks", tasks)):
        if name in res:  # self-contained sections: each module renders its own
            text += "\n" + module.render(res[name])
    docs.write_text(text)
    return docs
