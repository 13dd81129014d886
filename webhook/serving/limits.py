"""The deadlines and ceilings one worker process enforces; every number is a flag of `gangkeeper serve`."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from webhook.admission.review import MAX_BODY_BYTES


@dataclass(frozen=True)
class Limits:
    handshake_seconds: float = 5.0  # TCP accept to TLS established
    header_seconds: float = 5.0  # first byte of a request to the end of its headers
    body_seconds: float = 10.0  # end of headers to the end of the body
    # Longer than the API server keeps idle connections (client-go's transport: 90 s), so the server
    # never closes one the client is about to reuse: a POST on a closed connection is not retried.
    idle_seconds: float = 120.0
    # Headers are held as Python objects (a tuple and two bytes objects, HEADER_OBJECT_BYTES each beside
    # their text): 60,000 one-byte headers under the byte bound held 4.5 MiB in one connection. So a
    # header is counted at its object cost, and at most `max_headers` are read, as gunicorn's
    # limit_request_fields and Python's http.client (_MAXHEADERS) bound them, with 431.
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_body_bytes: int = MAX_BODY_BYTES
    # Per process, handshakes under way included; beyond it the idlest is closed (or, none idle, the new
    # one). Each costs about 60-80 KiB: with the chart's 4 workers, 4,096 such connections and oversized
    # chunked bodies at once peak near 610 MiB of the 768Mi limit (bench/webhook_memory.py).
    max_connections: int = 1024
    # Per process, accepted connections that hold no TLS state yet (no ClientHello, or waiting for their
    # handshake's turn): a socket each, a few KiB of kernel buffers. A cold API server dials a new
    # connection per call until it has enough; they wait here rather than be refused, and beyond the
    # bound the one waiting longest makes room (Worker._drop_oldest_waiting).
    max_waiting: int = 2048
    max_in_flight: int = 512  # requests read and not yet answered, per process
    # Bodies of requests in flight, per process: bounds what large reviews can hold at once.
    max_in_flight_bytes: int = 24 * 1024 * 1024
    # Reviews at least this large run on the side thread, so they never stall the loop's other clients.
    large_body_bytes: int = 128 * 1024


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may use: its cgroup's CPU quota (a pod's CPU limit) when one is set, else its
    affinity mask. os.cpu_count() is the node's count, 64 on a large node for a pod limited to 2."""
    try:  # cgroup v2: "QUOTA PERIOD", QUOTA "max" when unlimited
        quota, period = (cgroup / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:  # cgroup v1: a quota of -1 when unlimited
            quota = (cgroup / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (cgroup / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            quota = period = "max"
    if quota.lstrip("-").isdigit() and int(quota) > 0 and period.isdigit() and int(period) > 0:
        return max(1, math.ceil(int(quota) / int(period)))
    return max(1, len(os.sched_getaffinity(0)))
