"""A workload's Volcano PodGroups, made while the API server validates the workload's creation.

Volcano's pod admission refuses a pod whose PodGroup does not exist yet (volcano pkg/webhooks/admission/
pods/validate/admit_pod.go), and the Job controller then retries after 1 s, doubling (kubernetes
pkg/controller/job/job_controller.go, DefaultJobApiBackOff). The controller makes the PodGroups from
the workload's watch event, but the Job controller reacts to the same event: on the Philly replay 888 of
923 Jobs had a pod refused first, each Job's pods 2.3 s late at the median. Validating admission is the
last moment before any controller sees the workload, so the PodGroup is made there, without an owner:
the workload is not stored yet, and kube-controller-manager's garbage collector deletes a dependent
whose owner it looks up and does not find.

The review is not trusted (the webhook cannot tell the API server's reviews from a forged one posted to
its port), so what it makes is a held PodGroup whose size no review decides: the gang's name, queue and
minResources (what Volcano's enqueue weighs), `contract.HELD_MIN_MEMBER`, the awaiting-owner mark,
nothing else. Volcano admits its pods and starts none. The controller adopts it only for a workload
stored within the grace after it, and writes the spec the stored workload's gang wants
(controller/act/groups.py); anything else it deletes. So a
forged review can make, in a namespace, a held group that goes away after the grace: bounded here per
namespace and in all, past which the controller makes the groups as before. A ValidatingAdmissionPolicy
(charts/gangkeeper/templates/selfprotection.yaml) refuses any other PodGroup from the webhook's account.

Only at CREATE, never for a dry run (the webhook declares `sideEffects: NoneOnDryRun`), only the groups
the mutating webhook stamped on the workload's own templates, in its own namespace. An API error is
logged and never refuses the workload.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable

from webhook import contract, gangs
from webhook.admission import metrics
from webhook.backends import NamespaceInfo
from webhook.backends.volcano import Volcano, volcano_groups_in
from webhook.gangs.model import Obj
from webhook.kube import CONFLICT, Api, ApiError, Resource

log = logging.getLogger("gangkeeper.admission")
# one deadline per create, retries included: a slow API server delays the workload's admission by at most
# this, per gang, inside the webhook's own 5 s
DEADLINE_SECONDS = 1.5
# held groups this process may have made within the grace (each an orphan at worst): per namespace, in all
MAX_OUTSTANDING_PER_NAMESPACE = 64
MAX_OUTSTANDING = 512


def held_pod_group(desired: Obj) -> Obj:
    """What the webhook makes for a gang whose PodGroup would be `desired`: its name, labels, queue and
    minResources, unowned, marked, and held (no review decides its priority or size)."""
    meta = desired["metadata"]
    spec: Obj = {"minMember": contract.HELD_MIN_MEMBER}
    # the queue, and the resources Volcano's enqueue weighs against it (a PodGroup without them would be
    # enqueued at once, past the capacity check the gang's own would meet): what the adoption rewrites
    for key in ("queue", "minResources"):
        if key in desired["spec"]:
            spec[key] = desired["spec"][key]
    held_meta: Obj = {
        "name": meta["name"],
        "labels": {contract.GROUP_LABEL: meta["labels"][contract.GROUP_LABEL]},
        "annotations": {contract.AWAITING_OWNER_ANNOTATION: "true"},
    }
    if meta.get("namespace"):
        held_meta["namespace"] = meta["namespace"]
    return {"apiVersion": desired["apiVersion"], "kind": desired["kind"], "metadata": held_meta, "spec": spec}


class Outstanding:
    """The held groups made in the last `contract.AWAITING_OWNER_GRACE_SECONDS`, by namespace: an upper
    bound on those not yet adopted (older ones are adopted or deleted as orphans by then)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._made: deque[tuple[float, str]] = deque()
        self._by_namespace: Counter[str] = Counter()

    def room(self, namespace: str) -> bool:
        self._forget_old()
        return len(self._made) < MAX_OUTSTANDING and self._by_namespace[namespace] < MAX_OUTSTANDING_PER_NAMESPACE

    def made(self, namespace: str) -> None:
        self._made.append((self._clock(), namespace))
        self._by_namespace[namespace] += 1
        metrics.GROUPS_AHEAD_OUTSTANDING.set(len(self._made))

    def _forget_old(self) -> None:
        horizon = self._clock() - contract.AWAITING_OWNER_GRACE_SECONDS
        while self._made and self._made[0][0] <= horizon:
            _, namespace = self._made.popleft()
            self._by_namespace[namespace] -= 1
            if not self._by_namespace[namespace]:
                del self._by_namespace[namespace]
        metrics.GROUPS_AHEAD_OUTSTANDING.set(len(self._made))


class VolcanoGroupsAhead:
    def __init__(self, api: Api, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.outstanding = Outstanding(clock)

    def __call__(self, workload: Obj, volcano: Volcano) -> int:
        """Creates the workload's missing PodGroups, held; returns how many it made."""
        wanted = volcano_groups_in(workload)
        if not wanted:
            return 0
        made = 0
        for gang in gangs.analyze(workload).gangs:
            if gang.name not in wanted:
                continue
            if not self.outstanding.room(gang.namespace):
                metrics.GROUPS_AHEAD.labels("bounded").inc()
                continue
            held = held_pod_group(volcano.group_objects([gang], NamespaceInfo())[0])
            path = Resource(str(held["apiVersion"]), "podgroups").path(gang.namespace)
            try:
                self.api.request("POST", path, body=held, deadline=DEADLINE_SECONDS, answer=False)
                made += 1
                self.outstanding.made(gang.namespace)
                metrics.GROUPS_AHEAD.labels("created").inc()
            except ApiError as error:
                outcome = "exists" if error.status == CONFLICT else "failed"
                metrics.GROUPS_AHEAD.labels(outcome).inc()
                if outcome == "failed":
                    log.warning(
                        "PodGroup ahead of the pods not made; the controller will",
                        extra={"gang": f"{gang.namespace}/{gang.name}", "status": error.status},
                    )
        return made
