"""docs/configuration.md is generated from ``relay.config.Settings`` and cannot drift from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from relay.config import Settings
from relay.config.settings import POLLED_TICK_SECONDS, env_fields, env_name
from tools import settings_page

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"


def test_the_committed_configuration_page_is_what_the_code_generates() -> None:
    """The committed page equals a fresh render: `make docs-config` after changing Settings."""
    assert PAGE.read_text() == settings_page.render(), "stale: run `make docs-config`"


def test_every_relay_variable_the_code_reads_is_documented() -> None:
    """Each RELAY_* name in relay/ (outside the tests' own) appears on the page."""
    page = PAGE.read_text()
    named = {
        var
        for path in (ROOT / "relay").rglob("*.py")
        for var in re.findall(r"RELAY_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text())
    }
    assert named, "found no RELAY_* variable in relay/"
    missing = sorted(v for v in named if f"`{v}`" not in page)
    assert not missing, f"undocumented in docs/configuration.md: {missing}"


def test_every_setting_has_a_row_with_its_default() -> None:
    """One row per Settings field, carrying the default the code gives it."""
    page = PAGE.read_text()
    for f in env_fields():
        row = next((ln for ln in page.splitlines() if ln.startswith(f"| `{env_name(f)}` |")), None)
        assert row is not None, env_name(f)
        default = getattr(Settings(), f.name)
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            assert settings_page._n(default) in row.split("|")[3], row


def test_the_polled_tick_default_follows_the_constant() -> None:
    """The tick default where nothing notifies is read from POLLED_TICK_SECONDS, not typed in."""
    row = next(ln for ln in PAGE.read_text().splitlines() if "`RELAY_TICK_SECONDS` |" in ln)
    assert f"{POLLED_TICK_SECONDS:g} (elsewhere)" in row


def test_a_setting_without_a_meaning_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field with neither a MEANING entry nor a `#:` comment cannot land undocumented."""
    monkeypatch.delitem(settings_page.MEANING, "exchange")
    monkeypatch.setattr(settings_page, "_field_comments", dict)
    with pytest.raises(SystemExit, match="RELAY_EXCHANGE"):
        settings_page.render()


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    """`--check` exits 1 on a page that differs and 0 on a fresh one, never writing."""
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n")
    assert settings_page.main([str(stale), "--check"]) == 1
    assert stale.read_text() == "old\n"
    settings_page.main([str(stale)])
    assert settings_page.main([str(stale), "--check"]) == 0
