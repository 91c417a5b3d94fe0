"""What `relay doctor` and `relay status` say about a stalled ordering key: why, and a fix an
operator can paste (the key quoted for a shell or for SQL, whatever it holds)."""

from __future__ import annotations

import shlex

import pytest

from relay.ordering import stalled_key
from relay.records import Stall, StalledKey


@pytest.mark.parametrize(
    ("stalled", "why", "fix"),
    [
        (
            stalled_key("order-7", Stall.FAILED, 4, 12, "Unroutable: no queue\nbound"),
            "row 12 (number 4) failed (Unroutable: no queue); the key's later rows wait",
            "relay failed retry --key order-7 (once the cause is fixed), or "
            "relay failed purge --key order-7",
        ),
        (
            stalled_key("order-7", Stall.MISSING, 2, resumes_at=5),
            "no row has number 2; the key's rows wait from number 5 on",
            "UPDATE outbox_progress SET sent_seq = 4 WHERE ordering_key = 'order-7' "
            "AND sent_seq = 1",
        ),
        (
            stalled_key("order-7", Stall.SENT, 3, 40),
            "row 40 (number 3) is sent but the key's progress is still 2",
            "UPDATE outbox_progress SET sent_seq = 3 WHERE ordering_key = 'order-7' "
            "AND sent_seq = 2",
        ),
    ],
)
def test_why_and_fix(stalled: StalledKey, why: str, fix: str) -> None:
    """Each kind of stall says what holds the key and the command or statement that frees it."""
    assert why in stalled.why
    assert fix in stalled.fix
    assert stalled.as_dict()["why"] == stalled.why


def test_a_key_with_quotes_and_spaces_is_quoted_for_the_shell_and_for_sql() -> None:
    """A key is the producer's text: the fix quotes it so that pasting it does what it says."""
    key = "it's a key; rm -rf /"
    failed = stalled_key(key, Stall.FAILED, 1, 1, None)
    assert f"--key {shlex.quote(key)} " in failed.fix
    assert shlex.split(failed.fix.split(" (", 1)[0])[-1] == key
    assert "no error recorded" in failed.why
    missing = stalled_key(key, Stall.MISSING, 1, resumes_at=3)
    assert "ordering_key = 'it''s a key; rm -rf /'" in missing.fix
