"""ProvisioningRequests: how a gate gang that waits on capacity asks Cluster Autoscaler for all of its
room at once (`--autoscaler cluster-autoscaler`, where autoscaling.x-k8s.io/v1 provisioningrequests is
served). Instead of placeholder pods (act/placeholders.py), one ProvisioningRequest of the class
best-effort-atomic-scale-up.autoscaling.x-k8s.io per waiting gang, with one PodTemplate per shape of
its pods that the free room does not hold (PodSets: count and podTemplateRef, at most 32 of them:
cluster-autoscaler apis provisioningrequest/autoscaling.x-k8s.io/v1/types.go). Cluster Autoscaler
adds the nodes for all of them or none, and keeps them for the request while it is Provisioned; the
gang is then placed on them as on any room, and the request and its templates are deleted in the turn
that releases it (its capacity is then the gang's pods', not a booking).

Known by identity, never by name alone: the request and its templates are owned by the gang's Gang
object (uid checked) and named after its uid; one of that name owned by anything else is never counted,
written or deleted (the Gang says so). A template is used only as this controller made it (the uid its
create answered with): one of that name owned by the Gang but not made by this controller (a forged
owner reference) is deleted and made again. Deleted by uid. The Gang says how far Cluster Autoscaler got (its
Accepted, Provisioned, Failed, BookingExpired and CapacityRevoked conditions); a Failed or expired request
is deleted and asked again RETRY_SECONDS later.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from webhook.controller import metrics
from webhook.controller.act.placeholder_pods import FreeRoom, on_free, placeholder_for, shape_tag
from webhook.controller.decide.devices import CLASS_RESOURCE_PREFIX, BoundedMap
from webhook.controller.decide.pods import PodView, parse_time
from webhook.controller.observe.autoscaler import PAUSE_IMAGE
from webhook.controller.observe.books import API_VERSION as GANG_API_VERSION
from webhook.controller.observe.books import KIND as GANG_KIND
from webhook.controller.observe.gangview import GangView
from webhook.gangs.model import Obj
from webhook.informer import Informer
from webhook.kube import Api, ApiError, Resource

PROVISIONING_REQUESTS = Resource("autoscaling.x-k8s.io/v1", "provisioningrequests")
POD_TEMPLATES = Resource("v1", "podtemplates")
# all of the request's pods or none (the class Kueue's provisioning check uses for the same end)
ATOMIC_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
MAX_POD_SETS = 32  # spec.podSets maxItems (the CRD)
RETRY_SECONDS = 60.0  # a Failed or expired request is asked again this long after it became so
DEADLINE_SECONDS = 5.0  # each write, retries included: well inside a pass
MAX_TEMPLATES_REMEMBERED = 4096  # PodTemplates made, by name: least recently used out
# the conditions Cluster Autoscaler sets, read in this order: the first true one says where the request is
CONDITIONS = ("Failed", "BookingExpired", "CapacityRevoked", "Provisioned", "Accepted")
SPENT = ("Failed", "BookingExpired", "CapacityRevoked")  # asked again once RETRY_SECONDS old


def request_name(gang_uid: str) -> str:
    return f"gangkeeper-{gang_uid}"


def template_name(gang_uid: str, tag: str) -> str:
    return f"gangkeeper-{gang_uid}-{tag}"


def owned_by(obj: Mapping[str, Any] | None, gang_uid: str) -> bool:
    """Whether `obj` is owned by the Gang of this uid (what only gangkeeper's writes make it)."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return bool(gang_uid) and any(
        isinstance(ref, dict)
        and ref.get("apiVersion") == GANG_API_VERSION
        and ref.get("kind") == GANG_KIND
        and ref.get("uid") == gang_uid
        for ref in refs
    )


def trim_request(request: dict[str, Any]) -> dict[str, Any]:
    """What the controller reads of a ProvisioningRequest: who owns it, its class and PodSets' templates,
    and its conditions (type, status, reason, a bounded message)."""
    meta, spec, status = request.get("metadata") or {}, request.get("spec") or {}, request.get("status") or {}
    return {
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "uid", "ownerReferences", "creationTimestamp") if k in meta
        },
        "spec": {
            "provisioningClassName": spec.get("provisioningClassName"),
            "podSets": [
                {"podTemplateRef": s.get("podTemplateRef"), "count": s.get("count")}
                for s in spec.get("podSets") or []
                if isinstance(s, dict)
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": c.get("type"),
                    "status": c.get("status"),
                    "reason": c.get("reason"),
                    "message": str(c.get("message") or "")[:200],
                    "lastTransitionTime": c.get("lastTransitionTime"),
                }
                for c in status.get("conditions") or []
                if isinstance(c, dict)
            ]
        },
    }


def condition(request: Mapping[str, Any]) -> tuple[str, str, dt.datetime | None] | None:
    """The first of CONDITIONS that is True: its type, what it says (reason, message) and since when;
    None when none is yet."""
    found = {
        c.get("type"): c for c in (request.get("status") or {}).get("conditions") or [] if c.get("status") == "True"
    }
    for kind in CONDITIONS:
        if kind in found:
            said = " ".join(str(found[kind].get(k) or "") for k in ("reason", "message")).strip()
            return kind, said, parse_time(found[kind].get("lastTransitionTime"))
    return None


def pod_template(member: PodView, raw: Mapping[str, Any], gang_object: Mapping[str, Any], name: str) -> Obj:
    """One pod of the member's shape, as Cluster Autoscaler simulates it: its requests, node selector,
    node affinity and tolerations (the parts of a pod that decide which nodes it needs), and its device
    claims as the member makes them (Cluster Autoscaler simulates DRA claims itself, from its node
    groups' templates: cluster-autoscaler simulator/dynamicresources), never the device counts
    placement keeps as resources of its own (`devices.class_resource`), which no node has."""
    pod = placeholder_for(member, raw, gang_object, PAUSE_IMAGE, name)
    spec = {k: v for k, v in pod["spec"].items() if k not in ("priorityClassName", "terminationGracePeriodSeconds")}
    claims = [
        {k: entry[k] for k in ("name", "resourceClaimName", "resourceClaimTemplateName") if entry.get(k)}
        for entry in (raw.get("spec") or {}).get("resourceClaims") or []
        if isinstance(entry, Mapping) and entry.get("name")
    ]
    (container,) = spec["containers"]
    for amounts in container["resources"].values():
        for resource in [r for r in amounts if r.startswith(CLASS_RESOURCE_PREFIX)]:
            del amounts[resource]
    if claims:
        spec["resourceClaims"] = claims
        container["resources"]["claims"] = [{"name": entry["name"]} for entry in claims]
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {
            "name": name,
            "namespace": member.namespace,
            "ownerReferences": pod["metadata"]["ownerReferences"],
        },
        "template": {"spec": spec},
    }


def provisioning_request(name: str, namespace: str, owner_refs: list[Obj], pod_sets: Sequence[tuple[str, int]]) -> Obj:
    return {
        "apiVersion": PROVISIONING_REQUESTS.group_version,
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": owner_refs},
        "spec": {
            "provisioningClassName": ATOMIC_CLASS,
            "podSets": [{"podTemplateRef": {"name": template}, "count": count} for template, count in pod_sets],
        },
    }


class ProvisioningRequests:
    def __init__(
        self,
        api: Api,
        informer: Callable[[], Informer | None],
        gang_object: Callable[[str, str], Obj | None],
        may_write: Callable[[], bool],
        clock: Callable[[], dt.datetime],
    ) -> None:
        self.api, self.informer, self.gang_object, self.may_write, self.clock = (
            api,
            informer,
            gang_object,
            may_write,
            clock,
        )
        # (namespace, name) -> uid of each PodTemplate this controller made: a template is used only as it
        # was made (one made before a restart is made again: its content is not known to be the gang's)
        self._made: BoundedMap[tuple[str, str], str] = BoundedMap(MAX_TEMPLATES_REMEMBERED)

    def served(self) -> bool:
        """Whether the API is served and watched (the controller watches it once discovery finds it)."""
        return self.informer() is not None

    def sync(self, gang: GangView, waiting: Sequence[tuple[PodView, Obj]], free_room: FreeRoom) -> str | None:
        """Make the gang's request what its `waiting` pods call for (none once it no longer waits on
        capacity); what the Gang says of it."""
        owner = self.gang_object(gang.namespace, gang.name)
        uid = str(((owner or {}).get("metadata") or {}).get("uid") or "")
        informer = self.informer()
        if informer is None or not uid or owner is None:
            return None
        name = request_name(uid)
        found = informer.get(gang.namespace, name)
        if found is not None and not owned_by(found, uid):
            return f"no ProvisioningRequest: {name} exists and is not this gang's Gang's; delete it"
        free = on_free(waiting, free_room)
        needing = [(view, raw) for view, raw in waiting if view.name not in free]
        if not needing:
            if found is not None:
                self._delete(found)
            return None
        if found is not None and not self._as_made(found, uid, needing):
            self._delete(found)  # owned by the Gang, not what gangkeeper asks: made again in a later pass
            return f"no ProvisioningRequest yet: {name} was not one gangkeeper made for this gang; deleted"
        if found is not None:
            said = condition(found)
            since = said[2] if said is not None else None
            if said is not None and said[0] in SPENT and (since is None or self._age(since) >= RETRY_SECONDS):
                self._delete(found)  # asked again in a later pass
                return f"waiting for the autoscaler: ProvisioningRequest {name} {said[0]} ({said[1]}); asking again"
            state = f"{said[0]}" + (f" ({said[1]})" if said[1] else "") if said is not None else "not yet Accepted"
            return f"waiting for the autoscaler: ProvisioningRequest {name} for {self._count(found)} pods: {state}"
        alike: dict[str, list[tuple[PodView, Obj]]] = {}
        for member in needing:
            alike.setdefault(shape_tag(member[0].shape), []).append(member)
        if len(alike) > MAX_POD_SETS:
            return (
                f"no ProvisioningRequest: its pods without room come in {len(alike)} shapes, more than {MAX_POD_SETS}"
            )
        if not self.may_write():
            return None
        for tag, members in sorted(alike.items()):
            view, raw = members[0]
            if not self._create_template(pod_template(view, raw, owner, template_name(uid, tag)), uid):
                return (
                    f"no ProvisioningRequest yet: PodTemplate {template_name(uid, tag)} is not one gangkeeper made "
                    "for this gang (replaced when it may be, else delete it)"
                )
        refs = [
            {
                "apiVersion": GANG_API_VERSION,
                "kind": GANG_KIND,
                "name": gang.name,
                "uid": uid,
                "blockOwnerDeletion": False,
            }
        ]
        pod_sets = [(template_name(uid, tag), len(members)) for tag, members in sorted(alike.items())]
        try:
            self.api.request(
                "POST",
                PROVISIONING_REQUESTS.path(gang.namespace),
                body=provisioning_request(name, gang.namespace, refs, pod_sets),
                deadline=DEADLINE_SECONDS,
            )
            metrics.PROVISIONING_REQUESTS.labels("created").inc()
        except ApiError as error:
            if error.status != 409:
                metrics.API_ERRORS.labels("create", str(error.status)).inc()
        return f"waiting for the autoscaler: ProvisioningRequest {name} made for {len(needing)} pods"

    def sweep(self, live: Mapping[str, GangView]) -> None:
        """Requests of gangs gone (their pods all deleted, the namespace opted out) while their Gang stays."""
        informer = self.informer()
        if informer is None or not self.may_write():
            return
        for request in informer.items():
            meta = request.get("metadata") or {}
            for ref in meta.get("ownerReferences") or []:
                if ref.get("kind") != GANG_KIND or ref.get("apiVersion") != GANG_API_VERSION:
                    continue
                key = f"{meta.get('namespace', '')}/{ref.get('name', '')}"
                gang = self.gang_object(str(meta.get("namespace", "")), str(ref.get("name", "")))
                uid = str(((gang or {}).get("metadata") or {}).get("uid") or "")
                if key not in live and uid and uid == ref.get("uid") and meta.get("name") == request_name(uid):
                    self._delete(request)

    @staticmethod
    def _as_made(request: Mapping[str, Any], uid: str, needing: Sequence[tuple[PodView, Obj]]) -> bool:
        """Whether the request asks what gangkeeper would: its class, and pod sets of this Gang's templates,
        each for no more pods than wait in that shape (a copy with a forged owner reference may ask any)."""
        spec = request.get("spec") or {}
        waiting: dict[str, int] = {}
        for view, _ in needing:
            name = template_name(uid, shape_tag(view.shape))
            waiting[name] = waiting.get(name, 0) + 1
        sets = spec.get("podSets") or []
        return spec.get("provisioningClassName") == ATOMIC_CLASS and all(
            isinstance(s, dict)
            and (name := str((s.get("podTemplateRef") or {}).get("name") or "")) in waiting
            and int(s.get("count") or 0) <= waiting[name]
            for s in sets
        )

    def _age(self, since: dt.datetime) -> float:
        return (self.clock() - since).total_seconds()

    @staticmethod
    def _count(request: Mapping[str, Any]) -> int:
        return sum(int(s.get("count") or 0) for s in (request.get("spec") or {}).get("podSets") or [])

    def _create_template(self, template: Obj, uid: str) -> bool:
        """Made, or there already as this controller made it (the uid it answered with); one of its name
        this controller did not make (another's, or a copy with a forged owner reference: a tenant who
        may write PodTemplates could put any pod there, 96 CPUs of an expensive instance type, into the
        request) is deleted, by its uid, and made again in a later pass. False while it is not ours."""
        meta = template["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        try:
            made = self.api.request("POST", POD_TEMPLATES.path(key[0]), body=template, deadline=DEADLINE_SECONDS)
            self._made[key] = str(((made or {}).get("metadata") or {}).get("uid") or "")
            return True
        except ApiError as error:
            if error.status != 409:
                metrics.API_ERRORS.labels("create", str(error.status)).inc()
                return False  # asked again in a later pass: never a request naming a template not made
        try:
            existing = self.api.request("GET", POD_TEMPLATES.path(*key), deadline=DEADLINE_SECONDS)
        except ApiError:
            return False
        found = str((existing.get("metadata") or {}).get("uid") or "")
        if found and self._made.get(key) == found and owned_by(existing, uid):
            return True
        if owned_by(existing, uid):  # its name and owner, not its content: replaced by what the gang needs
            try:
                self.api.request(
                    "DELETE",
                    POD_TEMPLATES.path(*key),
                    body={"preconditions": {"uid": found}},
                    answer=False,
                    deadline=DEADLINE_SECONDS,
                )
            except ApiError as error:
                if error.status not in (404, 409):
                    metrics.API_ERRORS.labels("delete", str(error.status)).inc()
        return False

    def _delete(self, request: Mapping[str, Any]) -> None:
        """The request, by its uid, then its templates (each only if this Gang's)."""
        if not self.may_write():
            return
        meta = request.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        uid = str(meta.get("uid") or "")
        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            self.api.request(
                "DELETE",
                PROVISIONING_REQUESTS.path(namespace, name),
                body=body,
                answer=False,
                deadline=DEADLINE_SECONDS,
            )
            metrics.PROVISIONING_REQUESTS.labels("deleted").inc()
        except ApiError as error:
            if error.status not in (404, 409):
                metrics.API_ERRORS.labels("delete", str(error.status)).inc()
                return
        owners = [r for r in meta.get("ownerReferences") or [] if r.get("kind") == GANG_KIND]
        gang_uid = str(owners[0].get("uid") or "") if owners else ""
        for pod_set in (request.get("spec") or {}).get("podSets") or []:
            template = str((pod_set.get("podTemplateRef") or {}).get("name") or "")
            if template.startswith(template_name(gang_uid, "")):
                self._delete_template(namespace, template, gang_uid)

    def _delete_template(self, namespace: str, name: str, gang_uid: str) -> None:
        """A template of this Gang's, by its uid: one of that name someone else made stays."""
        path = POD_TEMPLATES.path(namespace, name)
        try:
            existing = self.api.request("GET", path, deadline=DEADLINE_SECONDS)
            if owned_by(existing, gang_uid):
                uid = str((existing.get("metadata") or {}).get("uid") or "")
                body = {"preconditions": {"uid": uid}}
                self.api.request("DELETE", path, body=body, answer=False, deadline=DEADLINE_SECONDS)
        except ApiError as error:
            if error.status not in (404, 409):
                metrics.API_ERRORS.labels("delete", str(error.status)).inc()
