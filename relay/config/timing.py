"""The timing fractions and bounds the relay runs by, named in one place: constants, and the
database call deadlines derived from the lease (:func:`database_deadlines`). The adaptive poll
that uses some of them is :class:`relay.wakeup.polling.IdlePoll`.

Most are shares of the lease (``RELAY_LEASE_SECONDS``): whatever a worker does with a batch
must end well inside the lease it holds on it, so these scale with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: One drain (``claim_and_dispatch``, a ``dispatch`` cycle) claims again only within this share.
DRAIN_SHARE_OF_LEASE = 0.5
#: A batch that waited this share before publishing (its worker was paused) is re-checked first.
RECHECK_SHARE_OF_LEASE = 0.5
#: Recording a published batch's outcomes is retried for this share (the broker has them).
RECORD_RETRY_SHARE_OF_LEASE = 0.5
#: The lease keeper renews this often.
RENEW_SHARE_OF_LEASE = 1 / 3
#: The lease keeper renews a batch for at most this many leases. Every database and broker
#: call has a deadline under a lease, so a live worker records a batch well within it; one
#: still holding a batch then is stuck where no deadline reaches (a bug, a frozen thread), and
#: its rows go back to the fleet one lease later instead of being renewed for ever. Above
#: liveness's 2 leases (:data:`LIVENESS_LEASES`), so a probe restarts such a process first.
HOLD_MAX_LEASES = 3.0
#: A claim reads the lane of expired leases at most once per this share of the lease, and at
#: least once a second (``relay.store.dispatch_path.lease_sweep.LeaseSweep``): once a second
#: at the default 30 s lease.
SWEEP_SHARE_OF_LEASE = 1 / 30
SWEEP_MAX_SECONDS = 1.0
#: A relay Celery task's soft time limit: past this a drain hangs (its budget is half a lease).
SOFT_LIMIT_SHARE_OF_LEASE = 0.9

#: The circuit breaker never waits longer than this between probes of a broker that is down.
BREAKER_MAX_SECONDS = 60.0
#: The shortest rest of ``dispatch --loop`` after a broker failure.
BROKER_REST_MIN_SECONDS = 0.05
#: A socket write to the broker that makes no progress this long is abandoned (the connection
#: is dropped): at most this, or the confirm timeout if shorter (relay.publishers.liveness).
BROKER_WRITE_STALL_MAX_SECONDS = 5.0
#: While the broker blocks publishing, a publish waits this long for it to unblock, then gives
#: its batch back, claimable again after ``BROKER_BLOCKED_RETRY_SECONDS``: no breaker opens, so
#: delivery resumes within about the sum of the two after the alarm clears, and SIGTERM is
#: obeyed within the first.
BROKER_BLOCKED_WAIT_SECONDS = 1.0
BROKER_BLOCKED_RETRY_SECONDS = 1.0
#: The idle AMQP connection is read and sent heartbeats this many times per heartbeat.
HEARTBEATS_PER_INTERVAL = 3
#: First and longest wait between retries of recording outcomes (doubling in between).
RECORD_RETRY_FIRST_SECONDS, RECORD_RETRY_MAX_SECONDS = 0.05, 2.0
#: First and longest wait of ``dispatch --loop`` while the database is unreachable.
DATABASE_RETRY_FIRST_SECONDS, DATABASE_RETRY_MAX_SECONDS = 0.1, 5.0
#: The wake-up's watcher keeps looking every poll floor for this long after it last saw the
#: outbox id sequence move, then backs off to ``RELAY_WATCH_IDLE_SECONDS``: a load that
#: resumes after a short pause meets a quick look, and an idle relay still looks rarely.
WATCH_HOLD_SECONDS = 1.0
#: First and longest wait of the wake-up's watcher while the database is unreachable.
WATCH_RETRY_FIRST_SECONDS, WATCH_RETRY_MAX_SECONDS = 0.1, 5.0

#: The lease ``RELAY_LEASE_SECONDS`` defaults to: the deadlines of an engine built without one.
DEFAULT_LEASE_SECONDS = 30.0
#: A dispatch-path database call (a claim, an outcome, a renewal, a wake-up's look) still running
#: after this share of the lease is abandoned: its socket is shut from outside
#: (:mod:`relay.store.watchdog`). A third: a renewal that hangs this long still leaves the next
#: one time to land before the lease it renewed runs out.
CALL_SHARE_OF_LEASE = 1 / 3
#: ... but never sooner than this: a loaded machine may take a second over a claim.
CALL_MIN_SECONDS = 1.0
#: Connecting (TCP, TLS, start-up) may take this share of the lease, at least the floor (libpq
#: counts whole seconds, and refuses less than 2).
CONNECT_SHARE_OF_LEASE = 1 / 6
CONNECT_MIN_SECONDS = 2
#: TCP keepalives: first probe after this share of the lease of silence, then one a second; a
#: peer that answers none of KEEPALIVE_COUNT probes is dead.
KEEPALIVE_IDLE_SHARE_OF_LEASE = 1 / 10
KEEPALIVE_INTERVAL_SECONDS = 1
KEEPALIVE_COUNT = 3


@dataclass(frozen=True, slots=True)
class DatabaseDeadlines:
    """How long a database connection may take to connect, to stay silent, and to answer one
    call; all derived from the lease, so that a dead server is noticed before a lease runs out."""

    #: Establishing a connection (whole seconds: what libpq and PyMySQL take).
    connect_seconds: int
    #: Idle seconds before the first keepalive probe, seconds between probes, probes unanswered.
    keepalive_idle_seconds: int
    keepalive_interval_seconds: int
    keepalive_count: int
    #: One call on the dispatch path: past it the watchdog abandons the call; also TCP's user
    #: timeout (unacknowledged data) and PyMySQL's read and write timeouts.
    call_seconds: float


def database_deadlines(lease_seconds: float = DEFAULT_LEASE_SECONDS) -> DatabaseDeadlines:
    """The deadlines of database calls for a lease of ``lease_seconds``: 5 s to connect, 10 s a
    call and keepalives from 3 s of silence at the default 30 s lease."""
    return DatabaseDeadlines(
        connect_seconds=max(CONNECT_MIN_SECONDS, math.ceil(lease_seconds * CONNECT_SHARE_OF_LEASE)),
        keepalive_idle_seconds=max(1, math.ceil(lease_seconds * KEEPALIVE_IDLE_SHARE_OF_LEASE)),
        keepalive_interval_seconds=KEEPALIVE_INTERVAL_SECONDS,
        keepalive_count=KEEPALIVE_COUNT,
        call_seconds=max(CALL_MIN_SECONDS, lease_seconds * CALL_SHARE_OF_LEASE),
    )


#: SIGTERM: a ``relay dispatch --loop`` process (and a supervisor under ``RELAY_DATABASES``)
#: exits within this many seconds, whatever it waits on (``relay.dispatch.stopping``).
STOP_SECONDS = 10.0
#: Past this share of :data:`STOP_SECONDS` after SIGTERM a relay still stopping warmly prints
#: its stacks and exits at once; the rest is the margin for that and for the supervisor.
STOP_FORCE_SHARE = 0.8
#: A Celery worker process records the tick's heartbeat (``relay_heartbeats``, read by ``relay
#: doctor``, which warns after 60 s) at most this often: one transaction per tick was a fifth
#: of an idle fleet's database transactions.
TICK_RECORD_SECONDS = 10.0
#: A loop resting (idle, or waiting out an outage) still beats its heartbeat this often.
HEARTBEAT_REST_SECONDS = 1.0
#: Liveness: a healthy loop beats at least once per this many leases plus one confirm wait
#: (one drain: half a lease of claims, the last batch's confirms, half a lease recording it;
#: and a lease of slack for database calls running to their deadlines).
LIVENESS_LEASES = 2.0


def liveness_seconds(lease_seconds: float, confirm_timeout_seconds: float) -> float:
    """The longest a healthy ``relay dispatch --loop`` goes between two heartbeats, the bound
    its heartbeat file carries for ``relay probe live``: one drain and its slack, derived from
    the lease and the confirm timeout (a rest, however long, beats every second)."""
    return lease_seconds * LIVENESS_LEASES + confirm_timeout_seconds


#: NATS JetStream: the duplicate window the relay gives a stream it creates, in needed windows
#: (:func:`duplicate_window_needed`): room for a slow recording or a lease renewed late.
DUPLICATE_WINDOW_MARGIN = 2.0


def duplicate_window_needed(lease_seconds: float, backoff_max_seconds: float) -> float:
    """The shortest JetStream duplicate window that still drops every republish of a message
    the relay published: a row whose relay died after the publish is claimed again once its
    lease ran out, and a row given back (an outage, a key held behind a refused row) is
    claimed again after the breaker's or the retry's wait, at most the longer cap of the two."""
    return lease_seconds + max(backoff_max_seconds, BREAKER_MAX_SECONDS)
