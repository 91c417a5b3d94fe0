"""The NATS side of a message, the events URL's scheme and the doctor's window verdict; pure."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from relay import publishers
from relay.commands.doctor import stream
from relay.config import Settings, timing
from relay.config.urls import redact
from relay.exceptions import ConfigError, EventUnsendable
from relay.publishers import message, nats_connect, nats_message
from relay.records import ClaimedEvent
from tests.support.natsserver import new_key

EVENT_ID = "0b7d1c2e-2f4e-4f0a-9a51-3a7c2b1d9e10"
CREATED = datetime(2026, 1, 1, tzinfo=UTC)


def _event(
    event_type: str = "order.paid", headers: dict[str, object] | None = None
) -> ClaimedEvent:
    return ClaimedEvent(7, event_type, {"n": 1}, headers, "k", 3, CREATED, 4, EVENT_ID)


def test_the_nats_message_carries_the_event_id_and_the_cloudevents_nats_binding() -> None:
    """Subject <exchange>.<type>; Nats-Msg-Id = event id; ce-* headers; text header values."""
    msg = nats_message.from_message(message.prepare(_event(headers={"tenant": 3})), "outbox")
    assert msg.subject == "outbox.order.paid"
    assert msg.headers["Nats-Msg-Id"] == EVENT_ID
    assert msg.headers["ce-id"] == EVENT_ID
    assert msg.headers["ce-type"] == "order.paid"
    assert msg.headers["ce-specversion"] == "1.0"
    assert msg.headers["Content-Type"] == "application/json"
    assert msg.headers["outbox_id"] == "7"
    assert msg.headers["tenant"] == "3"
    assert msg.headers["ordering_seq"] == "4"
    assert not any(k.startswith("cloudEvents:") for k in msg.headers)
    assert msg.body == b'{"n":1}'
    assert msg.size > len(msg.body) + sum(map(len, msg.headers))


@pytest.mark.parametrize(
    ("event_type", "headers"),
    [
        ("has space", None),
        ("a..b", None),
        ("wild.*", None),
        ("order.paid", {"bad name": 1}),
        ("order.paid", {"x": "two\nlines"}),
    ],
)
def test_what_nats_cannot_carry_is_the_rows_fault(
    event_type: str, headers: dict[str, object] | None
) -> None:
    with pytest.raises(EventUnsendable):
        nats_message.from_message(message.prepare(_event(event_type, headers)), "outbox")


def test_an_unknown_events_scheme_names_the_variable_and_the_known_schemes() -> None:
    with pytest.raises(ConfigError) as caught:
        publishers.for_url("bogus://user:secret@host:1", "outbox")
    text = str(caught.value)
    assert "RELAY_EVENTS_URL" in text
    assert "'bogus'" in text
    assert "nats" in text
    assert "amqp" in text
    assert "secret" not in text


CREDS = (
    "-----BEGIN NATS USER JWT-----\neyJ0\n------END NATS USER JWT------\n\n"
    f"-----BEGIN USER NKEY SEED-----\n{new_key('user').seed}\n------END USER NKEY SEED------\n"
)


def test_nats_url_options_become_nats_py_keywords_and_unknown_ones_are_refused(
    tmp_path: Path,
) -> None:
    """Servers in order, each with its own TLS (no shared tls_hostname: nats-py checks the
    name of the server it reaches); creds= one identity for all; bad options refused."""
    creds = tmp_path / "u.creds"
    creds.write_text(CREDS)
    target = nats_connect.parse(f"nats://u:p@a:4222?creds={creds},nats://b:4222")
    assert [s.url for s in target.servers] == ["nats://u:p@a:4222", "nats://b:4222"]
    assert target.credentials == {"user_credentials": str(creds)}
    both = nats_connect.parse("tls://a.example:4222,tls://b.example:4222?ssl_check_hostname=false")
    first, second = (nats_connect.options(s, {}) for s in both.servers)
    assert "tls_hostname" not in first
    assert first["tls"].check_hostname
    assert not second["tls"].check_hostname
    with pytest.raises(ConfigError):
        publishers.for_url("nats://a:4222?bogus=1", "outbox")


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("creds={missing}", "cannot read it"),
        ("creds={plain}", "not a NATS credentials file"),
        ("nkey={missing}", "cannot read it"),
        ("nkey={plain}", "not an NKEY seed"),
        ("creds={bad_seed}", "not a NATS credentials file"),
        ("creds={creds},nats://b:4222?creds={plain}", "given twice"),
    ],
)
def test_a_credential_file_that_cannot_serve_is_refused_at_start_up(
    tmp_path: Path, query: str, why: str
) -> None:
    files = {"missing": tmp_path / "nope", "plain": tmp_path / "p.txt", "creds": tmp_path / "c"}
    files["plain"].write_text("not a creds file\n")
    files["creds"].write_text(CREDS)
    files["bad_seed"] = tmp_path / "bad.creds"
    files["bad_seed"].write_text(CREDS.replace("\nSU", "\nXX"))
    with pytest.raises(ConfigError, match=why):
        publishers.for_url("nats://a:4222?" + query.format(**files), "outbox")


def test_tls_and_plain_servers_are_not_mixed() -> None:
    with pytest.raises(ConfigError, match="tls:// for every server"):
        publishers.for_url("tls://a:4222,nats://b:4222", "outbox")


def test_a_credential_file_without_the_nkeys_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-py imports nkeys only when it connects: without it the relay says, at start-up,
    what to install (not a ModuleNotFoundError traceback at the first connection)."""
    seed = tmp_path / "seed.nk"
    seed.write_text("SUAM\n")
    monkeypatch.setitem(sys.modules, "nkeys", None)  # as if not installed
    with pytest.raises(ConfigError) as caught:
        publishers.for_url(f"nats://a:4222?nkey={seed}", "outbox")
    assert "nkeys" in str(caught.value)
    assert "celery-outbox-relay[nats]" in str(caught.value)


def test_a_nats_token_is_redacted_like_a_password() -> None:
    text = redact("tls://s3cret@a:4222,nats://u:pw@b:4222,nats://c:4222")
    assert text == "tls://***@a:4222,nats://u:***@b:4222,nats://c:4222"
    assert redact("amqp://guest@h//") == "amqp://guest@h//"


@pytest.mark.parametrize(("window", "status"), [(None, "warn"), (5.0, "fail"), (400.0, "pass")])
def test_the_doctor_fails_a_window_shorter_than_lease_plus_longest_wait(
    window: float | None, status: str
) -> None:
    settings = Settings(lease_seconds=30, backoff_max_seconds=300, exchange="outbox")
    config = (
        None if window is None else SimpleNamespace(duplicate_window=window, subjects=["outbox.>"])
    )
    check = stream.verdict(settings, config)
    assert check.status == status, check
    if status == "fail":
        needed = timing.duplicate_window_needed(30, 300)
        assert needed == 330
        assert f"--dupe-window {2 * needed:g}s" in check.fix
