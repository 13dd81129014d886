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

from webhook.controller import metrics
from webhook.controller.act.placeholder_pods import pause_pod
from webhook.controller.decide.pods import PodView, pin_terms, required_terms
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
    name = holder_name(str((gang_object.get("metadata") or {}).get("uid", "")))
    pod = pause_pod(name, member.namespace, gang_object, image, {"claims": [{"name": ENTRY}]}, HOLDER_MARK, "holder")
    pinned = {"nodeSelectorTerms": pin_terms(required_terms(spec), node)}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pinned}}
    pod["spec"]["resourceClaims"] = [{"name": ENTRY, "resourceClaimName": claim}]
    for key in ("schedulerName", "tolerations"):
        if spec.get(key):
            pod["spec"][key] = spec[key]
    return pod


class ClaimHolders:
    """Makes and deletes claim holders, each known by its uid and its owner, the gang's Gang (only the
    controller may make a Gang-owned pod: ValidatingAdmissionPolicy
    gangkeeper-placeholders-made-by-the-controller-only); the garbage collector removes one with its
    gang, whatever the controller misses."""

    def __init__(self, api: Api, gang_object: Callable[[str, str], Obj | None], image: str) -> None:
        self.api, self.gang_object, self.image = api, gang_object, image

    def hold(self, member: PodView, raw: Obj, gang: str, claim: str, node: str) -> tuple[str, str] | None:
        """The holder made, or found made by an earlier pass (owned by the same Gang): (its name, its uid);
        None when the gang has no Gang yet or the API refused it."""
        owner = self.gang_object(member.namespace, gang)
        owner_uid = str(((owner or {}).get("metadata") or {}).get("uid") or "")
        if owner is None or not owner_uid:
            return None
        pod = claim_holder(member, raw, owner, claim, node, self.image)
        path = PODS.path(member.namespace)
        try:
            made = self.api.create(path, pod)
            metrics.PLACEHOLDERS.labels("created").inc()
        except ApiError as error:
            name = str(pod["metadata"]["name"])
            made = self._made_before(member.namespace, name, owner_uid) if error.status == 409 else None
            if made is None:
                metrics.API_ERRORS.labels("create", str(error.status)).inc()
                log.warning("claim holder refused", extra={"gang": f"{member.namespace}/{gang}", "why": str(error)})
                return None
        return str(pod["metadata"]["name"]), str((made.get("metadata") or {}).get("uid") or "")

    def left_behind(self, namespace: str, gang: str, exists: Callable[[str], bool]) -> tuple[str, str] | None:
        """The holder made for an earlier start of the gang (requeued whole since: its record, and with it
        what was made, forgotten), found by its name and taken only when the gang's Gang owns it: (its
        name, its uid). `exists` (the index has a pod of that key) spares a read when there is none."""
        owner = self.gang_object(namespace, gang)
        owner_uid = str(((owner or {}).get("metadata") or {}).get("uid") or "")
        name = holder_name(owner_uid)
        if not owner_uid or not exists(f"{namespace}/{name}"):
            return None
        found = self._made_before(namespace, name, owner_uid)
        return (name, str((found.get("metadata") or {}).get("uid") or "")) if found is not None else None

    def _made_before(self, namespace: str, name: str, owner_uid: str) -> Obj | None:
        try:
            found = self.api.get(PODS.path(namespace, name))
        except ApiError:
            return None
        owners = (found.get("metadata") or {}).get("ownerReferences") or []
        return found if any(o.get("kind") == GANG_KIND and o.get("uid") == owner_uid for o in owners) else None

    def let_go(self, namespace: str, holder: tuple[str, str]) -> bool:
        """The holder deleted, that very pod (its uid), or already gone; False when the API failed (tried
        again later)."""
        name, uid = holder
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self.api.request("DELETE", PODS.path(namespace, name), body=body, answer=False)
            metrics.PLACEHOLDERS.labels("deleted").inc()
        except ApiError as error:
            if error.status not in (404, 409):  # 409: another pod of that name now, not the holder
                metrics.API_ERRORS.labels("delete", str(error.status)).inc()
                return False
        return True
