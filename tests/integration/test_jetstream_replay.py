"""On NATS JetStream (issue 50): ``relay replay --to-subject`` publishes sent events again to a
subject a stream captures, stored as copies the stream does not drop; and a durable pull
consumer with the inbox (docs/brokers.md's pattern) applies each event once through a
redelivery. Against the real server and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import relay
import relay.inbox
from relay.config import Settings
from relay.exceptions import ReplayRefused
from relay.store.schema.tables import outbox
from tests.support.env import relay_env
from tests.support.fleet import RELAY_BIN
from tests.support.jetstream import Stream, drain

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def other_stream(jetstream: Stream) -> Iterator[Stream]:
    """A second stream of the test's own (capturing ``<its exchange>.>``), created empty."""
    tag = uuid.uuid4().hex[:10]
    stream = Stream(jetstream.url, f"RELAYREPLAY_{tag}", f"relayreplay{tag}")
    stream.create(duplicate_window=600.0)
    yield stream
    stream.delete()


def _settings(pg_url: str, stream: Stream) -> Settings:
    return stream.settings(
        pg_url,
        confirm_timeout_seconds=5,
    )


def _sent(pg_url: str, pg_engine: sa.Engine, stream: Stream, n: int) -> dict[str, int]:
    """``n`` events committed and relayed to ``stream``: event id → outbox id."""
    with Session(pg_engine) as session, session.begin():
        for i in range(n):
            relay.enqueue(session, "order.paid", {"n": i}, ordering_key=f"k{i % 3}")
    drain(_settings(pg_url, stream))
    with pg_engine.connect() as conn:
        rows = conn.execute(sa.select(outbox.c.event_id, outbox.c.id, outbox.c.status)).all()
    assert {s for _, _, s in rows} == {"sent"}
    return {str(e): int(i) for e, i, _ in rows}


def test_a_replay_to_a_subject_stores_copies_the_stream_does_not_drop(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream, other_stream: Stream
) -> None:
    """Given 30 events relayed to the relay's stream, when they are replayed to a subject of
    another stream, and then to a subject of the relay's own stream (where their event ids
    are still inside the duplicate window), then each replay stores all 30, in id order, each
    under ``<event_id>:<replay_id>`` with the replay header, the event's ``ce-id`` and body;
    the report names the stream and the stream sequences."""
    events = _sent(pg_url, pg_engine, jetstream, 30)
    originals = {m.headers["Nats-Msg-Id"]: m for m in jetstream.messages()}
    settings = _settings(pg_url, jetstream)

    subject = f"{other_stream.exchange}.billing"
    report = relay.replay(to_subject=subject, all_sent=True, settings=settings)
    assert report.complete, report.error
    assert (report.sent, report.stream) == (30, other_stream.name)
    assert (report.first_sequence, report.last_sequence) == (1, 30)
    assert subject in report.describe()
    copies = other_stream.messages()
    assert [m.subject for m in copies] == [subject] * 30
    ids = [int(m.headers["outbox_id"]) for m in copies]
    assert ids == sorted(events.values())
    for copy in copies:
        event_id = copy.headers["ce-id"]
        assert copy.headers["Nats-Msg-Id"] == f"{event_id}:{report.replay_id}"
        assert copy.headers["x-relay-replay"] == report.replay_id
        assert copy.body == originals[event_id].body

    again = relay.replay(
        to_subject=f"{jetstream.exchange}.replayed", all_sent=True, settings=settings
    )
    assert again.complete, again.error
    assert (again.sent, again.stream) == (30, jetstream.name)
    stored = jetstream.messages()
    assert len(stored) == 60, "the relay's own stream dropped replayed copies as duplicates"
    with pg_engine.connect() as conn:
        statuses = set(conn.execute(sa.select(outbox.c.status)).scalars())
    assert statuses == {"sent"}


def test_a_replay_to_a_subject_no_stream_captures_is_refused_and_sends_nothing(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream
) -> None:
    """No stream captures the subject, or it is a wildcard, or the events go through Kombu:
    ReplayRefused before anything is sent, naming what is wrong."""
    _sent(pg_url, pg_engine, jetstream, 3)
    settings = _settings(pg_url, jetstream)
    with pytest.raises(ReplayRefused, match="no JetStream stream captures"):
        relay.replay(
            to_subject=f"nostream{uuid.uuid4().hex[:8]}.x", all_sent=True, settings=settings
        )
    with pytest.raises(ReplayRefused, match="no subject a message can be published to"):
        relay.replay(to_subject=f"{jetstream.exchange}.>", all_sent=True, settings=settings)
    with pytest.raises(ReplayRefused, match=r"one queue .* or one subject"):
        relay.replay("billing", to_subject="a.b", all_sent=True, settings=settings)
    amqp = Settings(database_url=pg_url, events_url="memory://", exchange="x")
    with pytest.raises(ReplayRefused, match="needs RELAY_EVENTS_URL on NATS JetStream"):
        relay.replay(to_subject="a.b", all_sent=True, settings=amqp)
    assert len(jetstream.messages()) == 3


def test_the_cli_replays_to_a_subject_and_prints_the_stream_and_sequences(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream, other_stream: Stream
) -> None:
    """`relay replay --to-subject S --all --json`: exit 0, the stream and the sequences."""
    _sent(pg_url, pg_engine, jetstream, 5)
    env = relay_env(
        database_url=pg_url,
        events_url=jetstream.url,
        exchange=jetstream.exchange,
        nats_stream=jetstream.name,
    )
    subject = f"{other_stream.exchange}.cli"
    argv = [RELAY_BIN, "replay", "--to-subject", subject, "--all", "--json"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    out = json.loads(done.stdout)
    assert (out["sent"], out["subject"], out["stream"]) == (5, subject, other_stream.name)
    assert (out["first_sequence"], out["last_sequence"]) == (1, 5)
    assert len(other_stream.messages()) == 5


def test_a_pull_consumer_with_the_inbox_applies_each_event_once_through_a_redelivery(
    pg_url: str, pg_engine: sa.Engine, jetstream: Stream
) -> None:
    """docs/brokers.md's consumer: a durable pull consumer, explicit acks, the inbox claimed in
    the handler's transaction. The first consumer commits every effect and dies before acking
    (its acks lost); the stream redelivers all 20 after ack_wait; the inbox skips them: each
    event's effect is in the table once, and the consumer ends with nothing pending."""
    events = _sent(pg_url, pg_engine, jetstream, 20)
    effects = sa.Table("effects", sa.MetaData(), sa.Column("event_id", sa.Text, nullable=False))
    effects.create(pg_engine)

    def handle(message_id: str) -> bool:
        with Session(pg_engine) as session, session.begin():
            if not relay.inbox.claim(session, "billing", message_id):
                return False
            session.execute(effects.insert().values(event_id=message_id))
            return True

    async def consume(ack: bool) -> list[bool]:
        import nats
        import nats.errors
        from nats.js.api import AckPolicy, ConsumerConfig

        nc = await nats.connect(jetstream.url)
        try:
            js = nc.jetstream()
            config = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=1, max_deliver=5)
            sub = await js.pull_subscribe(
                f"{jetstream.exchange}.>", durable="billing", stream=jetstream.name, config=config
            )
            applied: list[bool] = []
            while len(applied) < len(events):
                try:
                    batch = await sub.fetch(20, timeout=5)
                except nats.errors.TimeoutError:
                    break
                for msg in batch:
                    applied.append(handle((msg.headers or {})["Nats-Msg-Id"]))
                    if ack:
                        await msg.ack()
            return applied
        finally:
            await nc.close()  # without acks: a consumer that died after its commits

    first = asyncio.run(consume(ack=False))
    assert first == [True] * 20
    second = asyncio.run(consume(ack=True))  # after ack_wait: every message again
    assert second == [False] * 20
    with pg_engine.connect() as conn:
        applied = list(conn.execute(sa.select(effects.c.event_id)).scalars())
    assert sorted(applied) == sorted(events)
    info = asyncio.run(_consumer_info(jetstream))
    assert (info.num_ack_pending, info.num_pending) == (0, 0)


async def _consumer_info(stream: Stream) -> Any:
    import nats

    nc = await nats.connect(stream.url)
    try:
        return await nc.jetstream().consumer_info(stream.name, "billing")
    finally:
        await nc.close()
