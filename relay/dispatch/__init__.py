"""One database's cycle: claim -> publish -> record (:mod:`relay.dispatch.cycle`), the drain
around it (:mod:`relay.dispatch.dispatcher`), the lease keeper (:mod:`relay.dispatch.lease`),
their pure decisions (:mod:`relay.dispatch.decisions`, :mod:`relay.dispatch.batching`) and the
bounded stop (:mod:`relay.dispatch.stopping`). Built by the one per-database runtime
(:mod:`relay.dispatch.runtime`) that every runner (:mod:`relay.runners`, :mod:`relay.celery`)
uses; what runs when, and how many at once, is theirs.
"""
