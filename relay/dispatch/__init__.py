"""The relay itself: claim -> publish -> record, the drain and loop around it, the lease keeper,
the commit-time wake-up (a watcher of the outbox id sequence), the runner that assembles a
relay process from settings, and the replay of sent events to one queue
(:func:`relay.replays.replayer.replay`, public as ``relay.replay``).
"""
