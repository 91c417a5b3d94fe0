"""The relay itself: claim -> publish -> record, the drain and loop around it, the lease keeper,
the commit-time wake-up (a watcher of the outbox id sequence), and the runner that assembles a
relay process from settings.
"""
