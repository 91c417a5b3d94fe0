"""The operations store: what the ``relay`` commands, the console, the metrics and retention ask
of the outbox (status, gauges, filtered lists, retry and purge, audit, heartbeats, retention)."""
