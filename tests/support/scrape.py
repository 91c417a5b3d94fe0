"""Reading a relay's Prometheus endpoint in tests: a free port and one scrape as a dict."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

#: (sample name, sorted label pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(port: int) -> Samples | None:
    """Every sample the endpoint serves; None while nothing answers on ``port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def exported(port: int) -> set[str]:
    """The series names the endpoint exports, a metric without samples yet included (a
    labelled counter before its first increment shows only its HELP and TYPE): a counter as
    ``name_total``, a histogram as ``name_bucket``, ``name_count`` and ``name_sum``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
        names |= {family.name + s for s in suffixes.get(family.type, ("",))}
        names |= {s.name for s in family.samples}
    return names


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        value
        for (sample, pairs), value in samples.items()
        if sample == name and set(labels.items()) <= set(pairs)
    )
