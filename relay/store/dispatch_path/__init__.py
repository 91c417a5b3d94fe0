"""The dispatch path's store: what the relay asks of the outbox while it relays (claim, record
outcomes, renew and check leases, the wake-up's readings), as one protocol and its SQL store."""
