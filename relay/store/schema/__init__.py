"""The schema: the relay's tables (:mod:`relay.store.schema.tables`, the target of the Alembic
chain), the chain's application (:mod:`relay.store.schema.upgrade`) and the event id the
database writes (:mod:`relay.store.schema.eventids`)."""
