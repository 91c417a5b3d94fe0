"""Retention: the purge of sent rows past ``RELAY_RETENTION_SECONDS``, paced so that it yields
to delivery, one purger at a time per database."""
