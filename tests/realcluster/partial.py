"""A watch over the whole real tier: no gang may stay partly bound for longer than gangkeeper lets it. A
gate gang (some members bound, others still behind gangkeeper's gate) for longer than a lost member's
recovery takes; a gang of any mechanism (some members bound, others pending: Volcano, coscheduling,
native, or a gate gang released) for longer than its start timeout, past which gangkeeper requeues it
whole (act/supervise.py). Partly bound for ever is the failure gang scheduling exists to prevent;
tests/conftest.py asserts after every real-tier test that this watch saw none."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

GATE = "gangkeeper.io/gang-gate"
# the default recovery timeout (120 s, webhook/controller/decide/pods.py) plus a few passes: the longest a
# gang may legitimately run short while its replacement waits (a tighter bound holds for each release)
LIMIT_SECONDS = 150.0
# the default start timeout (gangkeeper.io/timeout-seconds, 300 s) plus a few passes: a gang another
# mechanism started partly is requeued whole by then
ANY_MECHANISM_LIMIT_SECONDS = 330.0
EVERY_SECONDS = 3.0


# a KubeRay multi-host replica's name on its pods (RayMultiHostIndexing): a whole group of the gang, which
# may wait gated while the gang's minimum runs, and must never be bound in part
REPLICA_LABEL = "ray.io/worker-group-replica-name"


def partly_bound(pods: list[dict[str, Any]]) -> dict[str, float]:
    """namespace/group of the gangs partly bound, each with how long it may stay so: live members both
    bound and gated (the gate's), or bound and pending with none gated (any mechanism's). A multi-host
    replica is a group of its own: it is partly bound when some of its pods are bound and others not, and
    a gang whose replicas wait whole beside its running minimum is not."""
    seen: dict[str, tuple[int, int, int]] = {}
    for pod in pods:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        labels = meta.get("labels") or {}
        group = labels.get("gangkeeper.io/group")
        if not group or meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        key = f"{meta['namespace']}/{group}"
        if labels.get(REPLICA_LABEL):
            key += f" replica {labels[REPLICA_LABEL]}"
        is_gated = any(g.get("name") == GATE for g in spec.get("schedulingGates") or [])
        bound_count, gated_count, pending_count = seen.get(key, (0, 0, 0))
        bound_now = bool(spec.get("nodeName"))
        seen[key] = (bound_count + bound_now, gated_count + is_gated, pending_count + (not bound_now))
    found = {}
    for key, (bound_count, gated_count, pending_count) in seen.items():
        if bound_count and gated_count:
            found[key] = LIMIT_SECONDS
        elif bound_count and pending_count:
            found[key] = ANY_MECHANISM_LIMIT_SECONDS
    return found


class PartialWatch:
    def __init__(self, list_pods: Callable[[], list[dict[str, Any]]]) -> None:
        self._list = list_pods
        self._since: dict[str, float] = {}
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="partial-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def take(self) -> list[str]:
        found, self.violations = self.violations, []
        return found

    def _run(self) -> None:
        while not self._stop.wait(EVERY_SECONDS):
            try:
                now_partial = partly_bound(self._list())
            except Exception:  # the API settling, a namespace going: the next look decides
                continue
            now = time.monotonic()
            for key in list(self._since):
                if key not in now_partial:
                    del self._since[key]
            for key, limit in now_partial.items():
                since = self._since.setdefault(key, now)
                if now - since > limit and not any(v.startswith(key + " ") for v in self.violations):
                    self.violations.append(f"{key} partly bound for {now - since:.0f}s")


def pods_lister(get: Callable[..., Any]) -> Callable[[], list[dict[str, Any]]]:
    def list_pods() -> list[dict[str, Any]]:
        return list(get("pods", selector="gangkeeper.io/group", all_namespaces=True))

    return list_pods
