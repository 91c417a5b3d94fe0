"""The retention section's table says where each database's rows came from."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from bench.report_retention import retention

RUN = {
    "produced_rate": 3000.0,
    "rate": 2990.0,
    "p99_ms": 150.0,
    "rows_steady": [180_000, 200_000],
    "bytes_steady": [400 * 2**20, 420 * 2**20],
    "rows_max": 210_000,
    "bytes_max": 430 * 2**20,
}


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    return "\n".join(" | ".join(map(str, r)) for r in [header, *rows]) + "\n"


def test_rows_from_another_run_name_that_run() -> None:
    data = {
        "postgresql": {"with_purges": RUN},
        "mariadb": {"with_purges": RUN},
        "runs": {
            "mariadb": {
                "finished_at": "2026-12-04T06:45:16+00:00",
                "commit": "a1e1d13",
                "command": "python -m bench --only retention",
            }
        },
    }
    text = retention(data, _table)
    assert "mariadb | sustained, purger on | 3,000 | 2,990 | 150 ms" in text
    assert (
        "\n\nmariadb's rows: run 2026-12-04T06:45:16+00:00 at commit `a1e1d13`, "
        "with `python -m bench --only retention`." in text
    )
    assert "postgresql's rows" not in text


def test_one_run_adds_no_provenance_line() -> None:
    text = retention({"postgresql": {"with_purges": RUN}}, _table)
    assert "'s rows: run" not in text
    assert text.count("\n") == 2


def test_one_row_from_another_run_names_that_row() -> None:
    data = {
        "mariadb": {"with_purges": RUN, "catchup": RUN},
        "runs": {
            "mariadb/catchup": {
                "finished_at": "2026-12-04T06:45:16+00:00",
                "commit": "a1e1d13",
                "command": "python -m bench --only retention",
            }
        },
    }
    text = retention(data, _table)
    row = 'mariadb\'s row "catch-up from the backlog, purger on"'
    assert f"\n\n{row}: run 2026-12-04T06:45:16" in text
    assert "mariadb's rows" not in text


def test_a_kind_with_one_row_from_elsewhere_names_its_other_rows() -> None:
    older = {"finished_at": "2026-12-04T06:45:16+00:00", "commit": "a1e1d13", "command": "a"}
    newer = {"finished_at": "2026-12-05T17:34:26+00:00", "commit": "4d53268", "command": "b"}
    data = {
        "mariadb": {"with_purges": RUN, "catchup": RUN},
        "runs": {"mariadb": newer, "mariadb/catchup": older},
    }
    text = retention(data, _table)
    assert "\n\nmariadb's other rows: run 2026-12-05T17:34:26+00:00 at commit `4d53268`" in text
    assert 'mariadb\'s row "catch-up from the backlog, purger on": run 2026-12-04' in text
    assert "mariadb's rows:" not in text
