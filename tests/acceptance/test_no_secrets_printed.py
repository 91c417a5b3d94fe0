"""No command prints a secret or a payload: every `relay` command runs at ``-v`` (DEBUG logs)
with marker secrets in every URL-borne place (the database password and ``sslpassword``, the
brokers' passwords) and in the console tokens and signing keys, and marker payloads and headers
in the outbox, once against servers that accept the connection and once against a broker that
refuses it (the error paths print the URL too); no marker appears in any output. The same for
a NATS events URL's password and token against a throw-away nats-server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import kombu
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
from relay.records import Buried
from relay.store.dispatch_path.store import DispatchStore
from relay.store.engine import create_engine

#: Every secret and payload below carries this; the test looks for it in every output.
MARKER = "Mk7xSECRETq"
PASSWORD = f"pw{MARKER}1"
SSL_PASSWORD = f"ssl{MARKER}2"
#: The queue `relay replay` publishes the sent row to (it must exist).
REPLAY_QUEUE = f"secrets-replay-{os.getpid()}"

COMMANDS: list[list[str]] = [
    ["migrate"],
    ["status"],
    ["status", "--json"],
    ["doctor"],
    ["doctor", "--json"],
    ["probe", "ready"],
    ["dispatch", "--once"],
    ["failed", "list"],
    ["failed", "retry", "--all", "--dry-run"],
    ["failed", "purge", "--all", "--dry-run"],
    ["pending", "list"],
    ["replay", "--to-queue", "REPLAY_QUEUE", "--all"],
    ["purge-sent", "--older-than", "7d"],
    ["inbox", "purge", "--older-than", "7d"],
    ["inbox", "dead", "orders"],
    ["demo", "--events", "50", "--timeout", "60"],
]


def _marked_url(pg_url: str) -> str:
    """``pg_url`` with a marker password and ``sslpassword`` (the shared server trusts
    loopback, so neither is checked, but both travel in the URL)."""
    url = sa.make_url(pg_url).set(password=PASSWORD)
    url = url.update_query_dict({"sslpassword": SSL_PASSWORD})
    return url.render_as_string(hide_password=False)


@pytest.fixture
def marked_outbox(pg_url: str, amqp_url: str) -> Iterator[str]:
    """A migrated outbox holding marker payloads and headers: pending, failed and sent rows;
    and a queue for `relay replay` to publish the sent one to."""
    engine = create_engine(pg_url)
    try:
        with Session(engine) as session, session.begin():
            for i in range(4):
                relay.enqueue(
                    session,
                    "order.created",
                    {"card": f"{MARKER}-{i}", "nested": {"k": MARKER}},
                    headers={"authorization": f"Bearer {MARKER}"},
                    ordering_key=None,
                )
        store = DispatchStore(engine)
        claimed = store.claim("w", 3, lease_seconds=60)
        store.complete("w", buried=[Buried(e, "poison") for e in claimed[:2]], sent=claimed[2:])
    finally:
        engine.dispose()
    with kombu.Connection(amqp_url) as conn:
        queue = kombu.Queue(REPLAY_QUEUE, durable=False, auto_delete=False)(conn.channel())
        queue.declare()
        try:
            yield _marked_url(pg_url)
        finally:
            queue.delete()


def _depth(amqp_url: str) -> int:
    with kombu.Connection(amqp_url) as conn:
        declared = conn.channel().queue_declare(REPLAY_QUEUE, passive=True)
        return int(declared.message_count)


def _env(db_url: str, amqp_url: str, events_password: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    good = sa.make_url(amqp_url)
    events = good.set(password=events_password).render_as_string(hide_password=False)
    broker = good.set(password=f"broker{MARKER}").render_as_string(hide_password=False)
    return clean | {
        "RELAY_DATABASE_URL": db_url,
        "RELAY_EVENTS_URL": events,
        "RELAY_BROKER_URL": broker,
        "RELAY_EXCHANGE": f"secrets-{os.getpid()}",
        "RELAY_CONSOLE_TOKEN": f"console-{MARKER}-operator",
        "RELAY_CONSOLE_READONLY_TOKEN": f"console-{MARKER}-viewer",
        "RELAY_SIGNING_KEYS": f"k1=signing-{MARKER}-" + "s" * 32,
        "RELAY_CONFIRM_TIMEOUT_SECONDS": "3",
    }


def _run(env: dict[str, str], args: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "relay", "-v", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout + done.stderr


def _console_output(env: dict[str, str]) -> str:
    """`relay -v console` for a few seconds (it serves until stopped), one request made."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "relay", "-v", "console", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"GET /api/status HTTP/1.0\r\nHost: x\r\n\r\n")
                    conn.recv(65536)
                break
            except OSError:
                time.sleep(0.1)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("broker", ["accepted", "refused"])
def test_no_command_prints_a_secret_or_a_payload(
    marked_outbox: str, amqp_url: str, broker: str
) -> None:
    """Given marker secrets in every setting and marker payloads in the outbox, when each
    command runs at -v (the events broker accepting the connection, or refusing the marker
    password), then no output holds a marker."""
    password = sa.make_url(amqp_url).password or "" if broker == "accepted" else PASSWORD
    env = _env(marked_outbox, amqp_url, str(password))
    leaks = {}
    ran = 0
    for args in COMMANDS:
        out = _run(env, [REPLAY_QUEUE if a == "REPLAY_QUEUE" else a for a in args])
        ran += bool(out.strip())
        if MARKER in out:
            line = next(li for li in out.splitlines() if MARKER in li)
            leaks[" ".join(args)] = line[:300]
    out = _console_output(env)
    if MARKER in out:
        leaks["console"] = next(li for li in out.splitlines() if MARKER in li)[:300]
    assert leaks == {}
    # Every command said something, so there was output to check.
    assert ran == len(COMMANDS)
    if broker == "accepted":
        # The replay published the sent row's marker payload, and printed none of it.
        assert _depth(amqp_url) >= 1


NATS_COMMANDS: list[list[str]] = [
    ["status"],
    ["doctor"],
    ["doctor", "--json"],
    ["probe", "ready"],
    ["dispatch", "--once"],
    ["pending", "list"],
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("credential", ["password", "token"])
def test_no_command_prints_a_nats_password_or_token(pg_url: str, credential: str) -> None:
    """A NATS events URL carrying a marker password (``nats://user:password@``) or a marker
    token (``nats://token@``), accepted and then refused by a throw-away nats-server: no
    output of the commands that reach NATS holds the marker."""
    pytest.importorskip("nats", reason="nats-py is not installed (the [nats] extra)")
    from tests.support.natsserver import throwaway_server

    secret = f"nats{MARKER}3"
    auth = (
        f'{{ user: relay, password: "{secret}" }}'
        if credential == "password"
        else f'{{ token: "{secret}" }}'
    )
    engine = create_engine(pg_url)
    try:
        with Session(engine) as session, session.begin():
            relay.enqueue(session, "order.created", {"card": MARKER})
    finally:
        engine.dispose()
    with throwaway_server(f"authorization {auth}\n") as server:
        user = "relay:" if credential == "password" else ""
        leaks = {}
        for given in (secret, secret + "x"):  # accepted, then refused
            url = f"nats://{user}{given}@127.0.0.1:{server.port}"
            env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")} | {
                "RELAY_DATABASE_URL": pg_url,
                "RELAY_EVENTS_URL": url,
                "RELAY_EXCHANGE": f"secrets{os.getpid()}",
                "RELAY_NATS_STREAM": f"SECRETS{os.getpid()}",
                "RELAY_CONFIRM_TIMEOUT_SECONDS": "3",
            }
            for args in NATS_COMMANDS:
                out = _run(env, args)
                assert out.strip(), args
                if MARKER in out:
                    line = next(li for li in out.splitlines() if MARKER in li)
                    leaks[f"{' '.join(args)} ({'refused' if given != secret else 'accepted'})"] = (
                        line[:300]
                    )
    assert leaks == {}
