"""Which of `make test`'s pytest-xdist workers this process is (hack/test.sh runs the suite on two), so
that what two workers make on the one host never shares an address: each real-tier stack advertises its
own API server address (a stale EndpointSlice of one stack can then never reach the other's webhooks),
and each worker's pod sandboxes take a subnet of their own."""

from __future__ import annotations

import os


def worker_number() -> int | None:
    """0, 1, ... under pytest-xdist (its PYTEST_XDIST_WORKER: gw0, gw1, ...); None in a plain session."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def host_address(last: int) -> str:
    """10.253.<worker>.<last>: the API servers' addresses on the host (`.1` a stack's, `.2`/`.3` MultiKueue's
    workers'); a plain session (and `make cluster`) takes worker 0's."""
    return f"10.253.{worker_number() or 0}.{last}"
