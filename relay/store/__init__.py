"""The outbox database: engines, schema, migrations and the stores that speak in domain verbs.

Every SQL statement the package runs is built in :mod:`relay.store.dialects`, one module per
database; the stores own the transactions around them and translate database errors into the
relay's own (:mod:`relay.exceptions`). Nothing here imports kombu or celery.
"""
