"""The web console in a real browser and as a real `relay console` process (PostgreSQL).

Headless Chromium from Debian's packages (`chromium`, `chromium-driver`), driven by Selenium;
never a browser download. Missing, it skips the test on a laptop and fails it in CI.
``RELAY_CONSOLE_SCREENSHOTS=docs/img`` also writes the README's screenshots there.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import sqlalchemy as sa

from tests.support import console as web
from tests.support.console import OPERATOR_TOKEN
from tests.support.services import IN_CI

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1000",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def relay_console(db_url: str, **env: str) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """`relay console` on a free port; yields its base URL, the first lines it printed and the
    process."""
    port = _free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay", "console", "--port", str(port)],
        env=clean | {"RELAY_DATABASE_URL": db_url, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        printed = proc.stdout.readline() + proc.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, printed + proc.stdout.read()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, printed
                time.sleep(0.05)
        yield base, printed, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium from Debian with a fresh profile."""
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        message = (
            "chromium and chromium-driver are not installed (Debian: apt-get install chromium "
        )
        message += "chromium-driver)"
        if IN_CI:
            pytest.fail(f"{message}; CI requires them", pytrace=False)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="relay-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in [*FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        driver.set_page_load_timeout(30)
        try:
            yield driver
        finally:
            driver.quit()


def _seed(engine: sa.Engine) -> None:
    """A last hour of sent events (for the charts), a backlog, a lease, and dead letters."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO outbox (event_type, payload, status, attempt, created_at, sent_at, "
                "updated_at) SELECT 'order.created', jsonb_build_object('n', g), 'sent', 1, "
                "now() - make_interval(secs => ago + 0.04 + (g % 13) * 0.01"
                " + CASE WHEN ago BETWEEN 1200 AND 1500 THEN 1.5 + (g % 5) * 0.3 ELSE 0 END), "
                "now() - make_interval(secs => ago), now() FROM (SELECT g, "
                "(g * 7919 % 3600) * (0.3 + (g % 10) / 14.0) AS ago "
                "FROM generate_series(1, 30000) g) s"
            )
        )
    web.add(engine, 40, "pending", event_type="invoice.issued")
    web.add(engine, 3, "processing", event_type="invoice.issued")
    for n in range(12):
        web.add(engine, 1, "failed", event_type="order.shipped", ordering_key=f"order-{n % 5}")
    web.add(
        engine,
        4,
        "failed",
        event_type="payment.captured",
        last_error="PreconditionFailed: exchange 'payments' not found",
    )


def _screenshot(driver: Any, name: str) -> None:
    folder = os.environ.get("RELAY_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(folder) / name))


def _follow(driver: Any, by: str, value: str) -> None:
    """Click an element and wait until the next page has loaded (no sleep: a mark left on the
    old page's ``window`` being gone is the signal; asking whether the old page's root went
    stale races with the navigation in chromedriver: "Node with given id does not belong to
    the document")."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    driver.execute_script("window.relayOldPage = true")
    driver.find_element(by, value).click()
    # A script run while the page is being replaced may fail: ask again.
    WebDriverWait(driver, 20, ignored_exceptions=(WebDriverException,)).until(
        lambda d: d.execute_script(
            "return window.relayOldPage === undefined && document.readyState === 'complete'"
        )
    )


def _text(driver: Any, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.ID, element_id).text)


@pytest.mark.timeout(180)
def test_operator_signs_in_filters_and_redrives_dead_letters(
    engine: sa.Engine, pg_url: str, browser: Any
) -> None:
    """Sign in, open the dead letters, filter them by type, re-drive after the dry run's
    confirmation, and see the counts change."""
    from selenium.webdriver.common.by import By

    _seed(engine)
    with relay_console(pg_url, RELAY_CONSOLE_TOKEN=OPERATOR_TOKEN) as (base, _, _proc):
        browser.get(f"{base}/events?status=failed")
        assert "/signin" in browser.current_url
        browser.find_element(By.ID, "token").send_keys(OPERATOR_TOKEN)
        browser.find_element(By.ID, "name").send_keys("grace")
        _follow(browser, By.ID, "signin")
        assert browser.current_url == f"{base}/events?status=failed"  # back where it started
        assert len(browser.find_elements(By.CSS_SELECTOR, "tr.status-failed")) == 16
        _screenshot(browser, "console-dead-letters.png")
        _follow(browser, By.LINK_TEXT, "Overview")
        assert _text(browser, "count-failed") == "16"
        _screenshot(browser, "console-overview.png")

        _follow(browser, By.ID, "nav-dead")
        field = browser.find_element(By.ID, "f-event-type")
        field.clear()
        field.send_keys("order.*")
        _follow(browser, By.ID, "apply")
        assert len(browser.find_elements(By.CSS_SELECTOR, "tr.status-failed")) == 12

        _follow(browser, By.ID, "bulk-retry")
        assert _text(browser, "matched") == "12"
        assert "Nothing has changed yet" in _text(browser, "dry-run")
        assert web_counts(engine)["failed"] == 16
        _follow(browser, By.ID, "confirm")
        assert _text(browser, "changed") == "12"
        assert _text(browser, "count-failed") == "4"
        assert _text(browser, "count-pending") == "52"

        _follow(browser, By.LINK_TEXT, "Audit")
        assert "grace" in _text(browser, "audit")
    assert web_counts(engine)["failed"] == 4


@pytest.mark.timeout(180)
def test_operator_pauses_an_event_type_sees_it_held_and_resumes_it(
    engine: sa.Engine, pg_url: str, browser: Any
) -> None:
    """On the Pauses page: pause ``invoice.*`` with a reason, see it listed with who paused it
    and the 40 pending invoices held back, resume it from its row, see none in force; both
    recorded in the audit."""
    from selenium.webdriver.common.by import By

    _seed(engine)
    with relay_console(pg_url, RELAY_CONSOLE_TOKEN=OPERATOR_TOKEN) as (base, _, _proc):
        browser.get(f"{base}/pauses")
        browser.find_element(By.ID, "token").send_keys(OPERATOR_TOKEN)
        browser.find_element(By.ID, "name").send_keys("ada")
        _follow(browser, By.ID, "signin")
        assert "No pause in force" in _text(browser, "pauses")
        browser.find_element(By.ID, "pause-value").send_keys("invoice.*")
        browser.find_element(By.ID, "pause-reason").send_keys("billing provider down")
        _follow(browser, By.ID, "pause-button")
        if "/pauses" not in browser.current_url:  # a confirmation page: back to the list
            browser.get(f"{base}/pauses")
        listed = _text(browser, "pauses")
        assert "invoice.*" in listed
        assert "ada" in listed
        assert "billing provider down" in listed
        assert "Rows held back now: 40" in browser.page_source  # the 3 leased are not pending
        _screenshot(browser, "console-pauses.png")
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM relay_pauses")).scalar_one() == 1

        _follow(browser, By.CSS_SELECTOR, "#pauses button.resume")
        if "/pauses" not in browser.current_url:
            browser.get(f"{base}/pauses")
        assert "No pause in force" in _text(browser, "pauses")
        _follow(browser, By.LINK_TEXT, "Audit")
        audit = _text(browser, "audit")
        assert "pause" in audit
        assert "resume" in audit
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM relay_pauses")).scalar_one() == 0


def web_counts(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT status, count(*) FROM outbox GROUP BY status"))
        return {s: int(n) for s, n in rows}


@pytest.mark.timeout(60)
def test_relay_console_without_a_token_prints_a_sign_in_link(pg_url: str) -> None:
    """With no token set, `relay console` makes one up and prints a one-time link that signs
    in once (the token itself is in no URL); the API still answers 401 without it: never an
    open console."""
    with relay_console(pg_url) as (base, printed, proc):
        match = re.search(r"(http://\S+/signin\?code=(\S+))", printed)
        assert match, printed
        with httpx2.Client(follow_redirects=False) as client:
            assert client.get(f"{base}/api/status").status_code == 401
            assert client.get(f"{base}/").status_code == 303
            r = client.get(match[1])
            assert r.status_code == 303
            assert client.get(f"{base}/").status_code == 200
            client.cookies.clear()
            assert client.get(match[1]).status_code == 401  # one time only
        proc.terminate()
        assert proc.stdout is not None
        logged = proc.stdout.read()
    assert "GET /signin?code=*** " in logged  # the access log hides the code
    assert match[2] not in logged
