"""What a relay process tells the world: the observer seam the dispatcher calls, Prometheus
metrics and OpenTelemetry tracing, each loaded only when configured.
"""

from relay.observe.observers import Observer, Observers, Recorded

__all__ = ["Observer", "Observers", "Recorded"]
