"""The uid a gang's workload has now, read at admission to tell a pod made for that very workload from
one made for an earlier workload of its name (deleted and made again).

Mutating admission never sees the uid of the workload it stamps (the API server fills it in after
mutation), so the pod's claim is checked when the pod comes: one GET per workload, cached. A read that
fails or hangs answers None and the pod is admitted: the controller's count
(`observe/cluster.py GangView.made_for`) holds the same rule, so failing open never releases a pod in
another workload's gang.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
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
MAX_CACHED = 4096  # workload names are tenant input: the cache is bounded, least recently used out
# fresh reads one namespace's pods may cause (a token bucket): a tenant naming a new absent workload in
# each pod costs the API server at most this many GETs a second, not one per pod; past it the answer is
# None (the pod is admitted, and the controller leaves it out of any gang whose workload it is not)
READS_PER_SECOND_PER_NAMESPACE = 10.0
# the answer for a workload read and found not to exist: a pod claiming it is refused as one claiming
# another object's uid is, so a forged review learns nothing of whether another namespace has it
ABSENT = ""
READ_BURST_PER_NAMESPACE = 20.0


class WorkloadUids:
    """`(kind, namespace, name, claimed) -> uid now`, None when unknown. A claim that matches a recent
    read costs nothing. One that does not is checked by a fresh read (the workload may just have been
    made again), and a pod is refused only on a fresh read, never on a cached one. Such reads are at
    most one a second per workload: past that the answer is None (the pod is admitted, the controller
    leaves it out), so a tenant's forged pods cost the API server little."""

    def __init__(self, api: Api, clock: Callable[[], float] = time.monotonic) -> None:
        self._api, self._clock = api, clock
        # (kind, namespace, name) -> (uid, when read, when last read for a claim it contradicted)
        self._read: OrderedDict[tuple[str, str, str], tuple[str | None, float, float]] = OrderedDict()
        # namespace -> (tokens left, when counted): its fresh reads' budget
        self._budget: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __call__(self, kind: str, namespace: str, name: str, claimed: str) -> str | None:
        key, now = (kind, namespace, name), self._clock()
        uid, read_at, checked_at = self._read.get(key, (None, float("-inf"), float("-inf")))
        if uid == claimed and now - read_at < KEEP_SECONDS:
            return uid
        if now - checked_at < REREAD_SECONDS or not self._may_read(namespace, now):
            return None
        uid = self._fresh(kind, namespace, name)
        self._read[key] = (uid, now, now if uid != claimed else float("-inf"))
        self._read.move_to_end(key)
        while len(self._read) > MAX_CACHED:
            self._read.popitem(last=False)
        return uid

    def _may_read(self, namespace: str, now: float) -> bool:
        """Whether the namespace's budget of fresh reads has one left (and it is taken)."""
        tokens, since = self._budget.pop(namespace, (READ_BURST_PER_NAMESPACE, now))
        tokens = min(READ_BURST_PER_NAMESPACE, tokens + (now - since) * READS_PER_SECOND_PER_NAMESPACE)
        allowed = tokens >= 1.0
        self._budget[namespace] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._budget) > MAX_CACHED:
            self._budget.popitem(last=False)
        return allowed

    def _fresh(self, kind: str, namespace: str, name: str) -> str | None:
        """The uid read now; ABSENT when a served version says no object has the name; None when not known."""
        until, absent = time.monotonic() + READ_SECONDS, False
        for resource in RESOURCES.get(kind, ()):
            try:
                left = until - time.monotonic()
                workload = self._api.request("GET", resource.path(namespace, name), deadline=left)
            except ApiError as error:
                if error.status == 404:  # no such workload, or this version is not served here
                    absent = absent or _names_the_object(error.body, name)
                    continue
                log.warning("cannot read %s %s/%s to check its pods' uid: %s", kind, namespace, name, error)
                return None
            return uid_of(workload)
        return ABSENT if absent else None


def _names_the_object(body: str, name: str) -> bool:
    """Whether a 404 says the object is not there (a Status whose details name it: apimachinery
    errors.go NewNotFound), not that the resource is not served (no details, or no Status at all)."""
    try:
        status = json.loads(body)
    except ValueError:
        return False
    details = status.get("details") if isinstance(status, dict) else None
    return isinstance(details, dict) and details.get("name") == name


def uid_of(workload: object) -> str | None:
    """The uid in an answer, None when it holds none (a faulty server or proxy answers anything: not
    knowing admits the pod, as a failed read does)."""
    meta = workload.get("metadata") if isinstance(workload, dict) else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) and uid else None
