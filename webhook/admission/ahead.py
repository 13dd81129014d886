"""A workload's Volcano PodGroups, made while the API server validates the workload's creation.

Volcano's pod admission refuses a pod whose PodGroup does not exist yet (volcano pkg/webhooks/admission/
pods/validate/admit_pod.go), and the Job controller then retries after 1 s, doubling (kubernetes
pkg/controller/job/job_controller.go, DefaultJobApiBackOff). The controller makes the PodGroups from
the workload's watch event, but the Job controller reacts to the same event: on the Philly replay 888 of
923 Jobs had a pod refused first, each Job's pods 2.3 s late at the median. Validating admission is the
last moment before any controller sees the workload, so the PodGroup is made there, without an owner:
the workload is not stored yet, and kube-controller-manager's garbage collector deletes a dependent
whose owner it looks up and does not find. The controller then adopts it (the workload as its owner,
controller/act/groups.py), and deletes it as an orphan if the workload was never stored after all (a
later webhook refused it); it still makes any this missed (an API error here is logged and never
refuses the workload), and keeps them in step.

Only at CREATE, never for a dry run (the webhook declares `sideEffects: NoneOnDryRun`), only the groups
the mutating webhook stamped on the workload's own templates, in its own namespace: one create per gang,
bounded like the workload itself.
"""

from __future__ import annotations

import logging

from webhook import contract, gangs
from webhook.admission import metrics
from webhook.backends import NamespaceInfo
from webhook.backends.volcano import Volcano, volcano_groups_in
from webhook.gangs.model import Obj
from webhook.kube import CONFLICT, Api, ApiError, Resource

log = logging.getLogger("gangkeeper.admission")
TIMEOUT_SECONDS = 2.0  # a slow API server delays the workload's admission by at most this, per gang


class VolcanoGroupsAhead:
    def __init__(self, api: Api) -> None:
        self.api = api

    def __call__(self, workload: Obj, volcano: Volcano) -> int:
        """Creates the workload's missing PodGroups; returns how many it made."""
        wanted = volcano_groups_in(workload)
        if not wanted:
            return 0
        made = 0
        for gang in gangs.analyze(workload).gangs:
            if gang.name not in wanted:
                continue
            desired = volcano.group_objects([gang], NamespaceInfo())[0]
            # unowned until the controller adopts it: the workload is not stored yet, and the garbage
            # collector deletes a dependent whose owner it cannot find (seen on the real tier)
            desired["metadata"].pop("ownerReferences", None)
            desired["metadata"].setdefault("annotations", {})[contract.AWAITING_OWNER_ANNOTATION] = "true"
            path = Resource(str(desired["apiVersion"]), "podgroups").path(gang.namespace)
            try:
                self.api.request("POST", path, body=desired, timeout=TIMEOUT_SECONDS, answer=False)
                made += 1
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
