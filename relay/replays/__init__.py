"""Replay: sent events published again to one queue (``relay replay``, the console, scripts)."""
