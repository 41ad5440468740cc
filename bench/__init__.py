"""Benchmarks. ``python -m bench.ring``: the shared-memory ring against its peers (``make bench-ring``)."""
