"""The uid a gang's workload has now, read at admission to tell a pod made for that very workload from
one made for an earlier workload of its name (deleted and made again).

Mutating admission never sees the uid of the workload it stamps (the API server fills it in after
mutation), so the pod's claim is checked when the pod comes: one GET per workload, cached. A read that
fails, hangs or finds nothing answers None and the pod is admitted: the controller's count
(`observe/cluster.py GangView.made_for`) holds the same rule, so failing open never releases a pod in
another workload's gang.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from webhook.gangs import kinds
from webhook.kube import Api, ApiError, Resource

log = logging.getLogger(__name__)

# Where each workload kind is read: the version the kind's record names, then the other versions its
# operators serve (webhook/gangs/kinds.py), tried in turn while the answer is 404.
RESOURCES = {
    k.kind: tuple(Resource(f"{k.group}/{v}" if k.group else v, k.plural) for v in (k.version, *k.other_versions))
    for k in kinds.REGISTRY.values()
    if k.version
}

# one deadline for the read, every version tried and every retry included, well inside the webhook's own
# timeout (the chart's 5 s, failurePolicy Fail): a read given up admits the pod, a review timed out
# refuses it
READ_SECONDS = 2.0
KEEP_SECONDS = 30.0  # a uid read is trusted this long for the pods that claim it
REREAD_SECONDS = 1.0  # a claim the last read contradicts re-reads at most this often per workload
MAX_CACHED = 4096  # workload names are tenant input: the cache is bounded


class WorkloadUids:
    """`(kind, namespace, name, claimed) -> uid now`, None when unknown. A claim that matches a recent
    read costs nothing. One that does not is checked by a fresh read (the workload may just have been
    made again), and a pod is refused only on a fresh read, never on a cached one. Such reads are at
    most one a second per workload: past that the answer is None (the pod is admitted, the controller
    leaves it out), so a tenant's forged pods cost the API server little."""

    def __init__(self, api: Api, clock: Callable[[], float] = time.monotonic) -> None:
        self._api, self._clock = api, clock
        # (kind, namespace, name) -> (uid, when read, when last read for a claim it contradicted)
        self._read: dict[tuple[str, str, str], tuple[str | None, float, float]] = {}

    def __call__(self, kind: str, namespace: str, name: str, claimed: str) -> str | None:
        key, now = (kind, namespace, name), self._clock()
        uid, read_at, checked_at = self._read.get(key, (None, float("-inf"), float("-inf")))
        if uid == claimed and now - read_at < KEEP_SECONDS:
            return uid
        if now - checked_at < REREAD_SECONDS:
            return None
        uid = self._fresh(kind, namespace, name)
        if len(self._read) >= MAX_CACHED:
            self._read.clear()
        self._read[key] = (uid, now, now if uid != claimed else float("-inf"))
        return uid

    def _fresh(self, kind: str, namespace: str, name: str) -> str | None:
        until = time.monotonic() + READ_SECONDS
        for resource in RESOURCES.get(kind, ()):
            try:
                left = until - time.monotonic()
                workload = self._api.request("GET", resource.path(namespace, name), deadline=left)
            except ApiError as error:
                if error.status == 404:  # no such workload, or this version is not served here
                    continue
                log.warning("cannot read %s %s/%s to check its pods' uid: %s", kind, namespace, name, error)
                return None
            return uid_of(workload)
        return None


def uid_of(workload: object) -> str | None:
    """The uid in an answer, None when it holds none (a faulty server or proxy answers anything: not
    knowing admits the pod, as a failed read does)."""
    meta = workload.get("metadata") if isinstance(workload, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) and uid else None
