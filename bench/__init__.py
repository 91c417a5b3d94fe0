"""Benchmarks of the relay next to the broker's ceiling and the naive relay (issue 5).

``python -m bench`` runs every section in one go on this machine and writes
``bench/results/*.json`` and ``docs/benchmarks.md``; ``python -m bench --quick`` is the CI smoke
test (small sizes, one repetition, no timing asserted).
"""
