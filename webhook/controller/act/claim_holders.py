"""Claim holders: a shared ResourceClaim allocated before a steered gang's pods go to a scheduler that
cannot allocate it for them (backends: `allocates_shared_claims_first`).

scheduler-plugins' Coscheduling runs kube-scheduler's framework, whose DynamicResources plugin refuses a
pod whose claim another pod holds in allocation ("resource claim ... is in the process of being
allocated", pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go PreFilter), and that
other pod waits at Coscheduling's Permit for the members it refuses: a gang whose pods share a claim not
yet allocated never starts. So, once steering has placed the gang, a holder pod (a placeholder in every
respect the controller's self-protection policy checks: its label, gangkeeper.io/skip, the placeholder
PriorityClass and image, owned by the gang's Gang) names the claim, pinned to one of the gang's nodes, and
the gang's own scheduler allocates the claim for it and binds it. The gang's pods then find the claim
allocated and are each added to its reservedFor as they bind; the holder is deleted once they all are,
and the claim stays allocated for them (pkg/controller/resourceclaim/controller.go deallocates a claim
only when nothing reserves it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from webhook import contract
from webhook.controller import metrics
from webhook.controller.act.placeholder_pods import PLACEHOLDER_GRACE_SECONDS
from webhook.controller.decide.pods import PodView, pin_terms, required_terms
from webhook.controller.observe.books import API_VERSION as GANG_API_VERSION
from webhook.controller.observe.books import KIND as GANG_KIND
from webhook.gangs.model import Obj
from webhook.kube import PODS, Api, ApiError

log = logging.getLogger("gangkeeper.controller")
# a placeholder label value no Gang can have (Gang names are lower-case DNS names): the index never
# counts a holder as a gang's placeholder room (observe/holds.py placeholder_owner)
HOLDER_MARK = "ClaimHolder"
ENTRY = "shared"  # the holder's one resourceClaims entry


def holder_name(gang_uid: str) -> str:
    return f"claimholder-{gang_uid}"


def claim_holder(
    member: PodView, raw: Mapping[str, Any], gang_object: Mapping[str, Any], claim: str, node: str, image: str
) -> Obj:
    """The pause pod that holds `claim` for the gang of `member` (raw: its pod): the member's scheduler,
    tolerations and node terms, pinned to `node`; it asks for no CPU or memory (it takes no room the
    placement counted on) and for the claim alone."""
    spec = raw.get("spec") or {}
    meta = gang_object.get("metadata") or {}
    pinned = {"nodeSelectorTerms": pin_terms(required_terms(spec), node)}
    pod_spec: Obj = {
        "priorityClassName": contract.PLACEHOLDER_PRIORITY_CLASS,
        "terminationGracePeriodSeconds": PLACEHOLDER_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pinned}},
        "resourceClaims": [{"name": ENTRY, "resourceClaimName": claim}],
        "containers": [
            {
                "name": "holder",
                "image": image,
                "resources": {"claims": [{"name": ENTRY}]},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    for key in ("schedulerName", "tolerations"):
        if spec.get(key):
            pod_spec[key] = spec[key]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": holder_name(str(meta.get("uid", ""))),
            "namespace": member.namespace,
            "labels": {contract.PLACEHOLDER_LABEL: HOLDER_MARK, contract.SKIP_LABEL: "true"},
            "ownerReferences": [
                {
                    "apiVersion": GANG_API_VERSION,
                    "kind": GANG_KIND,
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": pod_spec,
    }


class ClaimHolders:
    """Makes and deletes claim holders (the pod is owned by the gang's Gang: the garbage collector
    removes it with the gang, whatever the controller misses)."""

    def __init__(self, api: Api, gang_object: Callable[[str, str], Obj | None], image: str) -> None:
        self.api, self.gang_object, self.image = api, gang_object, image

    def hold(self, member: PodView, raw: Obj, gang: str, claim: str, node: str) -> str | None:
        """The holder made (or found made: 409); its name, None when the gang has no Gang yet or the API
        refused it."""
        owner = self.gang_object(member.namespace, gang)
        if owner is None or not (owner.get("metadata") or {}).get("uid"):
            return None
        pod = claim_holder(member, raw, owner, claim, node, self.image)
        try:
            self.api.create(PODS.path(member.namespace), pod)
            metrics.PLACEHOLDERS.labels("created").inc()
        except ApiError as error:
            if error.status != 409:
                metrics.API_ERRORS.labels("create", str(error.status)).inc()
                log.warning("claim holder refused", extra={"gang": f"{member.namespace}/{gang}", "why": str(error)})
                return None
        return str(pod["metadata"]["name"])

    def let_go(self, namespace: str, name: str) -> bool:
        """The holder deleted (or already gone); False when the API failed (tried again later)."""
        try:
            self.api.request("DELETE", PODS.path(namespace, name), answer=False)
            metrics.PLACEHOLDERS.labels("deleted").inc()
        except ApiError as error:
            if error.status != 404:
                metrics.API_ERRORS.labels("delete", str(error.status)).inc()
                return False
        return True
