"""Prometheus metrics of the admission webhook, shared across worker processes (multiprocess mode).

Every label value comes from a fixed set, never from the request as sent: a client inventing kinds
must not grow the metric files (they live in a small /tmp) or slow down /metrics.
"""

from __future__ import annotations

import functools
import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

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
REFUSED = Counter(
    "gangkeeper_http_refused_requests",
    "Requests refused before the app saw them: 400 malformed, 408 too slow, 413 too large, 429 overloaded, "
    "503 too many connections",
    ["code"],
)
GROUPS_AHEAD = Counter(
    "gangkeeper_admission_podgroups_ahead",
    "Volcano PodGroups made at a workload's validating admission, before its pods: created, exists, failed, "
    "bounded (not made: too many outstanding in its namespace or in all)",
    ["outcome"],
)
GROUPS_AHEAD_OUTSTANDING = Gauge(
    "gangkeeper_admission_podgroups_ahead_outstanding",
    "PodGroups this serving process made ahead of their workload within the adoption grace (an upper bound "
    "on the unadopted ones it left); at its bound it makes no more and the controller makes them",
    multiprocess_mode="livesum",
)
CONNECTIONS = Gauge(
    "gangkeeper_webhook_connections",
    "Client connections of every serving process, by state: open (TLS established), handshaking, waiting "
    "(accepted, no ClientHello yet or waiting for a handshake's turn); sampled once a second",
    ["state"],
    multiprocess_mode="livesum",
)

ENDPOINTS = frozenset({"mutate", "validate"})
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
OUTCOMES = frozenset({"allowed", "mutated", "denied", "error", "bad-request"})
REFUSAL_CODES = frozenset({400, 408, 413, 429, 503})
CONNECTION_STATES = ("open", "handshaking", "waiting")
OTHER = "other"


@functools.cache
def _known_kinds() -> frozenset[str]:
    from webhook.gangs import kinds

    return frozenset({"Pod"} | {entry.kind for entry in kinds.REGISTRY.values()})


def kind_label(kind: object) -> str:
    """The kind as a label: a kind gangkeeper knows, or `other`."""
    return kind if isinstance(kind, str) and kind in _known_kinds() else OTHER


def label(value: object, allowed: frozenset[str]) -> str:
    return value if isinstance(value, str) and value in allowed else OTHER


def prime() -> None:
    """Every series this process can ever write, made now. In multiprocess mode each lives in a memory-
    mapped file under /tmp: a series made later on a full /tmp would get SIGBUS on its first write and
    kill the worker. Made at start, the pages exist before the first request (the label sets are fixed)."""
    endpoints, operations = (*ENDPOINTS, OTHER), (*OPERATIONS, OTHER)
    for endpoint in endpoints:
        LATENCY.labels(endpoint)
        for operation in operations:
            for kind in (*_known_kinds(), OTHER):
                for outcome in (*OUTCOMES, OTHER):
                    REQUESTS.labels(endpoint, operation, kind, outcome)
    for code in (*REFUSAL_CODES, OTHER):
        REFUSED.labels(str(code))
    for state in CONNECTION_STATES:
        CONNECTIONS.labels(state)


def count_connections(open_: int, handshaking: int, waiting: int) -> None:
    for state, count in zip(CONNECTION_STATES, (open_, handshaking, waiting), strict=True):
        CONNECTIONS.labels(state).set(count)


def count_refusal(code: int) -> None:
    REFUSED.labels(str(code) if code in REFUSAL_CODES else OTHER).inc()


def render() -> bytes:
    """The exposition of every worker's metrics when several processes serve, else this one's."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest()
