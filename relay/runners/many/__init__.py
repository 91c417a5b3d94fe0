"""Many outbox databases relayed by one process within a connection budget
(``RELAY_DATABASES``, ``RELAY_MAX_CONNECTIONS``): the worker threads and their scheduler
(:mod:`relay.runners.many.workers`), the pure schedule (:mod:`relay.runners.many.schedule`) and
the reload of the list on SIGHUP (:mod:`relay.runners.many.reload`)."""
