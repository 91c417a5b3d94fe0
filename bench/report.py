"""``docs/benchmarks.md`` from ``bench/results/*.json``: the template ``report_template.md``
(Jinja2: every sentence of the report) filled with the tables drawn here, plus the plots.

``python -m bench --report-only`` rebuilds it from saved results. A human reading of one run
goes in ``bench/results/<section>.notes.md`` and is printed under that section's table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from bench import plots, services
from bench.timing import ratio

TEMPLATE = "report_template.md"


@dataclass(frozen=True)
class Target:
    """A target, written once: its value, its direction and its unit."""

    value: float
    above: bool = True
    unit: str = "x"

    def met(self, measured: float) -> bool:
        return measured >= self.value if self.above else measured < self.value

    def verdict(self, measured: float) -> str:
        if measured != measured:  # NaN
            return "not measured"
        return "met" if self.met(measured) else "**missed**"

    def cells(self, measured: float) -> str:
        """The headline's ``target | verdict`` cells for ``measured``."""
        text = f">= {self.value:g}{self.unit}" if self.above else f"< {self.value:g} {self.unit}"
        return f"{text} | {self.verdict(measured)}"


TARGETS = {
    #: Issue 5: the relay's best against the best windowed-confirm ceiling, and the naive relay.
    "ceiling": Target(0.6),
    "naive": Target(5.0),
    #: Issue 5: the drain rate with the largest sent history against none.
    "history": Target(0.9),
    #: Issue 9: p99 with the after-commit wake-up at 1,000 events/s.
    "p99_ms": Target(250.0, above=False, unit="ms"),
    #: Issue 16: p99 at 200 events/s per database, and the relay processes' idle CPU.
    "wakeup_postgresql": Target(100.0, above=False, unit="ms"),
    "wakeup_mariadb": Target(300.0, above=False, unit="ms"),
    "idle_cpu": Target(5.0, above=False, unit="%"),
    #: Issue 10: drain rate with 10 keys against no keys; issue 51 (was 0.2x, issue 10): 1 key.
    "ordering_10": Target(0.5),
    "ordering_1": Target(0.5),
    #: Issue 51: 600 events of 900 KiB through one relay: seconds and peak RSS.
    "large_seconds": Target(15.0, above=False, unit="s"),
    "large_rss": Target(512.0, above=False, unit="MiB"),
    #: Issue 15: server time of every console page.
    "console": Target(200.0, above=False, unit="ms"),
}
#: The offered load (events/s) at which the issue 16 latency targets apply.
WAKEUP_RATE = 200


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def rate(r: dict[str, Any]) -> str:
    return f"{r['median']:,.0f} (±{r['spread'] * 50:.0f}%)" if r else "-"


def _best(grid: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    key = max(grid, key=lambda k: grid[k]["median"])
    return key, grid[key]


def headline(res: dict[str, Any]) -> str:
    ceil, naive = res.get("publish_ceiling", {}), res.get("naive", {})
    rabbit, hist = res.get("relay_rabbitmq", {}), res.get("history", {})
    rows: list[list[str]] = []
    windowed = {k: v for k, v in ceil.items() if "window" in k}
    if rabbit and windowed:
        (rk, rbest), (ck, cbest) = _best(rabbit), _best(windowed)
        r = ratio(rbest["median"], cbest["median"])
        value = f"{r:.2f}x ({rbest['median']:,.0f} / {cbest['median']:,.0f} msg/s)"
        label = f"relay best ({rk}) / best windowed-confirm ceiling ({ck})"
        rows.append([label, value, TARGETS["ceiling"].cells(r)])
        if "p1_b100" in rabbit and "kombu_confirm_window_100" in ceil:
            r = ratio(rabbit["p1_b100"]["median"], ceil["kombu_confirm_window_100"]["median"])
            label = "relay 1 process, batch 100 (the default) / confirm window 100"
            rows.append([label, f"{r:.2f}x", TARGETS["ceiling"].cells(r)])
    if rabbit and naive:
        (rk, rbest), (nk, nbest) = _best(rabbit), _best(naive)
        r = ratio(rbest["median"], nbest["median"])
        rows.append(
            [f"relay best ({rk}) / naive best ({nk})", f"{r:.1f}x", TARGETS["naive"].cells(r)]
        )
        if "p1_b100" in rabbit and "p1" in naive:
            r = ratio(rabbit["p1_b100"]["median"], naive["p1"]["median"])
            label = "relay 1 process, batch 100 / naive 1 process"
            rows.append([label, f"{r:.1f}x", TARGETS["naive"].cells(r)])
    sizes = hist.get("sizes", {})
    if len(sizes) >= 2:
        lo, hi = min(sizes, key=int), max(sizes, key=int)
        for name, label in (("relay", "relay"), ("sql_only", "claim + mark, no broker")):
            r = ratio(sizes[hi][name]["median"], sizes[lo][name]["median"])
            label = f"history: {label}, {int(hi):,} / {int(lo):,} sent rows"
            rows.append([label, f"{r:.2f}x", TARGETS["history"].cells(r)])
    loads = res.get("latency_wakeup", {}).get("under_load", [])
    at_1000 = [r["p99_ms"] for r in loads if r["rate"] == 1000 and r["wakeup"]]
    p99 = at_1000[0] if at_1000 else float("nan")
    value = f"{p99:,.0f} ms" if at_1000 else "-"
    rows.append(["p99 with wake-up at 1,000 ev/s", value, TARGETS["p99_ms"].cells(p99)])
    # The target cells hold their own " | ": the header has four columns.
    return table(["measure", "value", "target", "verdict"], rows)


def grid_table(grid: dict[str, Any], unit: str = "rows/s") -> str:
    procs = sorted({r["processes"] for r in grid.values()})
    batches = sorted({r["batch_size"] for r in grid.values()})
    rows = [[p] + [rate(grid.get(f"p{p}_b{b}", {})) for b in batches] for p in procs]
    out = table(["processes"] + [f"batch {b}" for b in batches], rows)
    warnings = [f"> warning: {k}: {r['warning']}" for k, r in grid.items() if "warning" in r]
    reps = len(next(iter(grid.values()))["runs"])
    note = f"{unit}: median of {reps} runs (± half the min..max spread)."
    return "\n".join([out, *(["", *warnings] if warnings else []), "", note])


def sql_ceiling(data: dict[str, Any]) -> str:
    """PostgreSQL's grid, then the other databases (a run before them saved PostgreSQL's grid
    alone, at the top level)."""
    by_db = data if "postgresql" in data else {"postgresql": data}
    out = grid_table(by_db["postgresql"])
    others = [
        [kind, r["processes"], r["batch_size"], rate(r)]
        for kind, cells in by_db.items()
        if kind != "postgresql"
        for r in cells.values()
    ]
    if others:
        out += "\n\n" + table(["database", "processes", "batch", "rows/s"], others)
    return out


def phases(data: dict[str, Any]) -> str:
    runs = sorted(data.values(), key=lambda r: r["batch_size"])
    header = ["phase"] + [f"batch {r['batch_size']}: ms per batch (share)" for r in runs]
    rows: list[list[str]] = []
    for phase in runs[0]["ms_per_batch"]:
        cells = []
        for r in runs:
            ms, total = r["ms_per_batch"][phase], r["ms_per_batch"]["cycle total"]
            cells.append(f"{ms:.1f} ({ms / total:.0%})")
        rows.append([phase, *cells])
    rows.append(["rows/s in-process"] + [f"{r['rate']:,.0f}" for r in runs])
    return table(header, rows)


def latency_polling(data: dict[str, Any]) -> str:
    header = ["poll interval", "offered ev/s", "achieved ev/s", "p50 ms", "p95 ms", "p99 ms"]
    rows = [
        [f"{r['tick_seconds']:g} s", f"{r['offered_rate']:,}", f"{r['achieved_rate']:,.0f}"]
        + [f"{r[k]:.0f}" for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")]
        + [f"{r['received']:,}/{r['events']:,}"]
        for r in sorted(data.values(), key=lambda r: (-r["tick_seconds"], r["offered_rate"]))
    ]
    return table([*header, "max ms", "events"], rows)


def latency_wakeup(data: dict[str, Any]) -> str:
    singles = [
        [key.replace("_", " "), r.get("style", "session"), r["events"]]
        + [f"{r[k]:g}" for k in ("p50_s", "p99_s", "max_s")]
        for key, r in data.items()
        if key.startswith(("with_", "without_"))
    ]
    loads = [
        [f"{r['rate']:,}", "yes" if r["wakeup"] else "no", r.get("style", "session")]
        + [f"{r['achieved_per_s']:,}", f"{r['events']:,}"]
        + [f"{r[k]:g}" for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")]
        for r in data.get("under_load", []) + data.get("under_load_core", [])
    ]
    header = ["offered ev/s", "wake-up", "session / core", "achieved ev/s", "events"]
    return "\n\n".join(
        [
            table(
                ["single commits", "session / core", "events", "p50 s", "p99 s", "max s"], singles
            ),
            table([*header, "p50 ms", "p95 ms", "p99 ms", "max ms"], loads),
        ]
    )


def wakeup(data: dict[str, Any]) -> str:
    idle_target = TARGETS["idle_cpu"]
    rows = []
    for run in data["runs"]:
        idle = run["idle_cpu_pct"]
        idle_cell = f"{idle:g}%" + ("" if idle_target.met(idle) else " **over**")
        postgres = not run["database"].startswith("mariadb")
        target = TARGETS["wakeup_postgresql" if postgres else "wakeup_mariadb"]
        for load in run["loads"]:
            # Only the default wake-up path at the rate has a target.
            judged = load["rate"] == WAKEUP_RATE and not run["database"].endswith("=0")
            verdict = f"< {target.value:g}: " + target.verdict(load["p99_ms"]) if judged else ""
            lost = f" ({load['lost']} lost)" if load["lost"] else ""
            rows.append(
                [
                    run["database"],
                    run["runner"],
                    idle_cell,
                    load["style"],
                    f"{load['rate']:,} ({load['achieved_per_s']:,}){lost}",
                ]
                + [f"{load[k]:g}" for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms")]
                + [f"{load['relay_cpu_pct']:g}%", verdict]
            )
    header = ["database", "relay runs as", "idle CPU", "producer", "ev/s", "p50", "p95", "p99"]
    return table([*header, "max", "relay CPU", "target"], rows)


#: The fixed modes of ``bench/versus.py``, as the table names them.
LABELS = {
    "raw_kombu": "raw Kombu, confirms per 1,000",
    "relay_publisher": "the relay's publisher alone, no database",
}


def versus(data: dict[str, Any], wal: bool = False) -> str:
    """The relay's modes against raw Kombu (``wal``: with the relay's WAL per event)."""
    rows = []
    for name, r in data.items():
        if not isinstance(r, dict) or "median" not in r:
            continue
        label = LABELS.get(name, f"`{name}`")
        vs = r.get("vs_raw")
        runs = ", ".join(f"{x:.2f}" for x in vs["runs"]) if vs else ""
        cpu = (
            ""
            if "cpu_total" not in r
            else " / ".join(
                f"{r[k]:.0f}"
                for k in ("cpu_publishers", _database_cpu(r), "cpu_rabbitmq", "cpu_total")
            )
        )
        row = [
            label,
            rate(r),
            rate(r["from_start"]),
            f"**{vs['median']:.2f}x** ({runs})" if vs else "1x",
            cpu,
            f"{r['cpu_vs_raw']:.2f}x" if "cpu_vs_raw" in r else ("1x" if cpu else ""),
        ]
        if wal:
            row.append(f"{r['wal_bytes_per_event']:,.0f}" if "wal_bytes_per_event" in r else "-")
        rows.append(row)
    header = ["publisher", "msg/s (queue growth)", "from the commit / go", "vs raw Kombu, per run"]
    db = "MariaDB" if data.get("database") == "mariadb" else "PostgreSQL"
    header += [f"CPU µs/msg: publishers / {db} / RabbitMQ / total", "CPU-bound ratio"]
    return table(header + (["WAL bytes/event"] if wal else []), rows)


def _database_cpu(r: dict[str, Any]) -> str:
    """The key of the database's CPU in a ``bench/versus.py`` mode (MariaDB's or PostgreSQL's)."""
    return "cpu_mariadb" if "cpu_mariadb" in r else "cpu_postgres"


def history(data: dict[str, Any]) -> str:
    sizes = data.get("sizes", {})
    rows = [
        [
            f"{int(size):,}",
            rate(sizes[size]["relay"]),
            rate(sizes[size]["sql_only"]),
            "yes" if sizes[size]["explain"]["uses_claimable_index"] else "**no**",
        ]
        for size in sorted(sizes, key=int)
    ]
    # Results saved before migration 0009 name no index: theirs was ix_outbox_claimable.
    index = next((s["explain"].get("index") for s in sizes.values()), None)
    header = ["sent rows in the table", "relay rows/s", "claim + mark (no broker) rows/s"]
    return table([*header, f"claim uses {index or 'ix_outbox_claimable'}"], rows)


#: The renderers the template calls, by name.
TABLES: dict[str, Callable[..., str]] = {
    f.__name__: f
    for f in (
        headline,
        grid_table,
        sql_ceiling,
        phases,
        latency_polling,
        latency_wakeup,
        wakeup,
        versus,
        history,
    )
}


def _retention(data: dict[str, Any]) -> str:
    from bench.report_retention import retention

    return retention(data, table)


TABLES["retention"] = _retention


def _drains() -> None:
    from bench import report_drains

    for name in ("ordering_drain", "ordering_producers", "large"):
        drawn = getattr(report_drains, name)
        TABLES[name] = lambda data, drawn=drawn: drawn(data, table, TARGETS)


_drains()


def load(results: Path) -> dict[str, dict[str, Any]]:
    """Every section's saved record, by section name (other JSON there, such as
    ``claim_rates.json`` from a former script, is not a section and is skipped)."""
    records = {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}
    return {name: rec for name, rec in records.items() if "section" in rec and "data" in rec}


def render(recs: dict[str, dict[str, Any]], results: Path) -> str:
    def meta(name: str) -> str:
        rec = recs.get(name)
        if rec is None:
            return ""
        # Records saved before the commit was kept name the commit that recorded their file.
        commit = rec.get("commit")
        if commit:
            where = f"at commit `{commit}`"
        else:
            recorded = services.git_revision(str(results / f"{name}.json"))
            where = f"recorded in commit `{recorded}`" if recorded else "commit not recorded"
        return (
            f"\n_Run {rec['finished_at']} ({rec['plan']} plan) {where}, with "
            f"`{rec['command']}`: load average "
            f"{rec['loadavg_before'][0]:.2f} before, {rec['loadavg_after'][0]:.2f} after; "
            f"{rec['seconds']:.0f} s._"
        )

    def notes(name: str) -> str:
        path = results / f"{name}.notes.md"
        return path.read_text().strip() if path.exists() else ""

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 (Markdown for a file, never HTML for a browser)
    )
    env.filters.update(
        n=lambda x: f"{x:,.0f}",
        g=lambda x: f"{x:g}",
        x2=lambda x: f"{x:.2f}x",
        rate=rate,
    )
    plans = {rec["plan"] for rec in recs.values()}
    return env.get_template(TEMPLATE).render(
        d={name: rec["data"] for name, rec in recs.items()},
        quick="quick" in plans,
        finished=max((r["finished_at"] for r in recs.values()), default="-"),
        meta=meta,
        notes=notes,
        not_run=lambda name: f"Not run yet: `python -m bench --only {name}`.",
        T=TARGETS,
        wakeup_rate=WAKEUP_RATE,
        **TABLES,
    )


def write(results: Path, docs: Path) -> Path:
    """Draw the plots next to ``docs`` (in ``img/``) and write the Markdown report."""
    recs = load(results)
    res = {k: v["data"] for k, v in recs.items()}
    img = docs.parent / "img"
    img.mkdir(parents=True, exist_ok=True)
    plots.throughput(res, img / "bench-throughput.png")
    plots.latency(res.get("latency_polling", {}), img / "bench-latency-polling.png")
    plots.history(res.get("history", {}), img / "bench-history.png")
    docs.write_text(render(recs, results))
    return docs
