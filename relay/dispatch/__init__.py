"""The relay itself: claim -> publish -> record, the drain and loop around it, the lease keeper,
the commit-time wake-up listener, and the runner that assembles a relay process from settings.
"""
