"""``python -m bench [--quick] [--only SECTION ...]``: run, save JSON, write the report."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import report, services
from bench.plan import FULL, QUICK
from bench.sections import SECTIONS

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUICK_RESULTS = RESULTS / "tmp-quick"  # ignored by git (bench/results/tmp*)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes, one run: a smoke test")
    p.add_argument("--only", nargs="+", choices=list(SECTIONS), help="run only these sections")
    p.add_argument("--results", type=Path, help="where the JSON goes (default by mode)")
    p.add_argument("--docs", type=Path, help="where the report goes (default by mode)")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from JSON")
    p.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="REV",
        help="versus: also run the relay of this git revision (repeatable)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    plan = replace(QUICK if args.quick else FULL, baselines=args.baseline)
    results = args.results or (QUICK_RESULTS if args.quick else RESULTS)
    docs = args.docs or (results / "benchmarks.md" if args.quick else ROOT / "docs/benchmarks.md")
    results.mkdir(parents=True, exist_ok=True)
    command = "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv)
    if not args.report_only:
        for name in args.only or list(SECTIONS):
            run_section(name, plan, results, command.strip())
    out = report.write(results, docs)
    print(f"bench: report written to {out}")
    return 0


def run_section(name: str, plan: Any, results: Path, command: str) -> None:
    load_before = services.loadavg()
    started = time.perf_counter()
    print(f"bench: {name} (load {load_before[0]:.2f}) ...", flush=True)
    data = SECTIONS[name](plan)
    record = {
        "section": name,
        "plan": plan.name,
        "command": command,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 1),
        "loadavg_before": load_before,
        "loadavg_after": services.loadavg(),
        "data": data,
    }
    (results / f"{name}.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"bench: {name} done in {record['seconds']}s", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
