"""The timing fractions and bounds the relay runs by, named in one place; constants only (the
adaptive poll that uses some of them is :class:`relay.policy.IdlePoll`).

Most are shares of the lease (``RELAY_LEASE_SECONDS``): whatever a worker does with a batch
must end well inside the lease it holds on it, so these scale with it.
"""

from __future__ import annotations

#: One drain (``claim_and_dispatch``, a ``dispatch`` cycle) claims again only within this share.
DRAIN_SHARE_OF_LEASE = 0.5
#: A batch that waited this share before publishing (its worker was paused) is re-checked first.
RECHECK_SHARE_OF_LEASE = 0.5
#: Recording a published batch's outcomes is retried for this share (the broker has them).
RECORD_RETRY_SHARE_OF_LEASE = 0.5
#: The lease keeper renews this often.
RENEW_SHARE_OF_LEASE = 1 / 3
#: A claim reads the lane of expired leases at most once per this share of the lease, and at
#: least once a second (``relay.policy.LeaseSweep``): once a second at the default 30 s lease.
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
#: First and longest wait of the wake-up's watcher while the database is unreachable.
WATCH_RETRY_FIRST_SECONDS, WATCH_RETRY_MAX_SECONDS = 0.1, 5.0
