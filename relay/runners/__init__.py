"""The runners: what decides *when* and *how many* databases are relayed, never *how* (that is
:mod:`relay.dispatch.runtime`, the one per-database runtime every runner builds through):
``relay dispatch --once|--loop`` over one database (:mod:`relay.runners.loop`), many databases
in one process within a connection budget (:mod:`relay.runners.many`), and a process per
database (:mod:`relay.runners.supervisor`). The Celery fleet is the fourth runner
(:mod:`relay.celery`)."""
