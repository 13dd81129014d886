"""Prometheus metrics of the admission webhook, shared across gunicorn workers (multiprocess mode)."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess

REQUESTS = Counter(
    "gangkeeper_admission_requests",
    "Admission reviews answered, by endpoint, operation, kind and outcome",
    ["endpoint", "operation", "kind", "outcome"],
)
LATENCY = Histogram(
    "gangkeeper_admission_duration_seconds",
    "Time to answer one admission review",
    ["endpoint"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)


def render() -> bytes:
    """The exposition of every worker's metrics when several processes serve, else this one's."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest()
