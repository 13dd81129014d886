"""The group objects of the other backends (Volcano and coscheduling PodGroups, native Workloads and
PodGroups): created and kept in step with the gang's workload, never taken from someone else, and
deleted when the bare pod group they stood for is gone."""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from webhook import contract, gangs
from webhook.backends import Backend, Mechanisms, NamespaceInfo
from webhook.backends.volcano import volcano_groups_in
from webhook.controller import metrics
from webhook.controller.act.report import Reporter
from webhook.controller.act.wakeup import WAKE_ANNOTATION
from webhook.controller.decide.group_specs import awaiting_owner, made_ahead_for, spec_patch
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved, Workloads
from webhook.controller.observe.workloads import group_resource
from webhook.gangs import kinds, lws
from webhook.gangs.model import Gang, Obj
from webhook.informer import Informer
from webhook.kube import CONFLICT, Api, ApiError, Resource

log = logging.getLogger("gangkeeper.controller")
# a PodGroup the webhook made at its workload's admission (unowned, AWAITING_OWNER_ANNOTATION) is no
# orphan while this young: the controller adopts it for the workload a pass later
ORPHAN_GRACE_SECONDS = contract.AWAITING_OWNER_GRACE_SECONDS

# native generations whose group specs cannot be updated (k8s.io/api scheduling v1alpha1 Workload.spec,
# v1alpha2 `+k8s:immutable`; a PodGroup cannot be replaced either while pods name it: its
# podgroup-protection finalizer holds the deletion); v1beta1 lets minCount change; a CompositePodGroup's
# spec is immutable field by field (k8s.io/api scheduling/v1alpha3 CompositePodGroupSpec)
IMMUTABLE_GROUP_SPECS = frozenset(
    {"scheduling.k8s.io/v1alpha1", "scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1alpha3"}
)


class GroupObjects:
    def __init__(
        self,
        api: Api,
        workloads: Workloads,
        reporter: Reporter,
        mechanisms: Mechanisms,
    ) -> None:
        self.api, self.workloads, self.reporter, self.mechanisms = api, workloads, reporter, mechanisms
        # the name the webhook was configured to give Volcano's pods (schedulerNames.volcano): what marks
        # a LeaderWorkerSet as gangkeeper's Volcano gangs, its templates carrying no group name
        self.volcano_scheduler = str(mechanisms.volcano.scheduler_name)
        # why the API refused each gang's group object (its record's `group_refused`), and the version of
        # each workload create_ahead last looked at
        self.store = reporter.store

    def resources(self) -> list[Resource]:
        return [group_resource(api_version, kind) for api_version, kind in self.mechanisms.group_kinds()]

    def sync(self, gang: GangView, resolved: Resolved, mechanism: Backend) -> None:
        """The gang's group objects as `mechanism` (the configured one its pods were stamped for) needs them."""
        if resolved.gang is None:
            return
        # a group object several gangs share (a native Workload, its CompositePodGroup) is made from all
        # of its workload's gangs, so the first gang's sync writes it whole: a later gang's template
        # cannot be added to a v1beta1 Workload (`+k8s:update=NoAddItem`); the others' own are theirs
        siblings = gangs.analyze(resolved.workload).gangs if resolved.workload is not None else []
        siblings = siblings if any(g.name == resolved.gang.name for g in siblings) else [resolved.gang]
        ours = {resolved.gang.name, resolved.gang.id.native_workload}
        for desired in mechanism.group_objects(siblings, NamespaceInfo()):
            if desired["metadata"]["name"] not in ours:
                continue
            resource = group_resource(desired["apiVersion"], desired["kind"])
            meta = desired["metadata"]
            path = resource.path(meta.get("namespace") or gang.namespace, meta["name"])
            readable, current = self._read(resource, meta.get("namespace") or gang.namespace, meta["name"])
            if not readable:
                continue
            if current is None:
                refused = self._write("create", self.api.create, resource.path(gang.namespace), desired)
                self._report_refusal(gang.key, resolved.workload or gang.raw[0], desired, refused)
                continue
            current_meta = current.get("metadata") or {}
            if (current_meta.get("labels") or {}).get(contract.GROUP_LABEL) is None:
                continue  # someone else's object of the same name: never a second owner
            if awaiting_owner(current_meta):
                continue  # held until create_ahead adopts it for its workload, or replaces it
            if resource.group_version in IMMUTABLE_GROUP_SPECS:
                # the API refuses any change (422); admission refuses the gangs that would need one
                continue
            # a group's claims are immutable, and dropped by an API server whose gate is off: written once
            wanted = {k: v for k, v in desired["spec"].items() if k != "resourceClaims"}
            patch = spec_patch(resource.group_version, current.get("spec"), wanted)
            if patch is not None:
                self._write("update", self.api.merge_patch, path, {"spec": patch})

    def wake(self, resolved: Resolved, now: dt.datetime) -> None:
        """Touch the gang's coscheduling PodGroup (gangkeeper's own only): kube-scheduler then retries the
        pods Coscheduling rejected (webhook/controller/act/wakeup.py says why)."""
        if resolved.gang is None:
            return
        for desired in self.mechanisms.coscheduling.group_objects([resolved.gang], NamespaceInfo()):
            resource = group_resource(desired["apiVersion"], desired["kind"])
            namespace = desired["metadata"].get("namespace") or resolved.gang.namespace
            name = desired["metadata"]["name"]
            readable, current = self._read(resource, namespace, name)
            if (
                not readable
                or current is None
                or contract.GROUP_LABEL not in ((current.get("metadata") or {}).get("labels") or {})
            ):
                continue
            touch = {"metadata": {"annotations": {WAKE_ANNOTATION: now.isoformat()}}}
            self._write("wake", self.api.merge_patch, resource.path(namespace, name), touch)

    def _read(self, resource: Resource, namespace: str, name: str) -> tuple[bool, Obj | None]:
        """(False, None) when the API could not say (counted; the caller skips the object this pass),
        else (True, the object or None when it does not exist)."""
        try:
            return True, self.workloads.read(resource, namespace, name)
        except ApiError as error:
            metrics.API_ERRORS.labels("get", str(error.status)).inc()
            return False, None

    def _write(self, action: str, call: Callable[[str, Obj], Any], path: str, body: Obj) -> ApiError | None:
        try:
            call(path, body)
            metrics.GROUP_OBJECTS.labels(action).inc()
        except ApiError as error:
            metrics.API_ERRORS.labels(action, str(error.status)).inc()
            return error
        return None

    def create_ahead_of_pods(self, informers: Iterable[Informer], opted_out: Callable[[str], bool]) -> None:
        """`create_ahead` for every watched workload that changed since it was last looked at."""
        looked_at: dict[str, str] = {}
        for informer in informers:
            for workload in informer.items():
                meta = workload.get("metadata") or {}
                uid, version = str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))
                looked_at[uid] = version
                if self.store.workloads_looked_at.get(uid) == version or opted_out(str(meta.get("namespace", ""))):
                    continue
                try:
                    self.create_ahead(workload)
                except Exception:  # one workload's failure is logged and counted; the others go on
                    log.exception("group object ahead of pods failed", extra={"workload": meta.get("name")})
                    metrics.GANG_FAILURES.inc()
                    looked_at.pop(uid)  # looked at again next pass
        self.store.workloads_looked_at = looked_at

    def create_ahead(self, workload: Obj) -> None:
        """Volcano's admission refuses a pod that names a PodGroup that does not exist yet (volcano
        pkg/webhooks/admission/pods/validate/admit_pod.go, checkPG): a gang whose PodGroup were made from its
        pods would never get a pod. So for a workload whose pods gangkeeper puts in Volcano groups, the
        PodGroups are made from the workload itself, before its owner creates the first pod; the pods' own
        sync keeps them in step afterwards. A gang whose operator makes its own PodGroup keeps the
        operator's alone, gangkeeper's removed while empty: a LeaderWorkerSet group that LWS's Volcano
        provider manages (its PodGroup labelled with the set's name and the group's index, lws
        pkg/schedulerprovider/volcano_provider.go), a workload another PodGroup is controlled by."""
        wanted = volcano_groups_in(workload)
        is_lws = kinds.volcano_groups_by_operator(str(workload.get("kind", ""))) and lws.volcano_scheduled(
            workload, self.volcano_scheduler
        )
        if not wanted and not is_lws:
            return
        for gang in gangs.analyze(workload).gangs:
            if gang.name in wanted or is_lws:
                self._create_ahead_for(workload, gang, is_lws)

    def _create_ahead_for(self, workload: Obj, gang: Gang, is_lws: bool) -> None:
        meta = workload.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        desired = self.mechanisms.volcano.group_objects([gang], NamespaceInfo())[0]
        resource = group_resource(desired["apiVersion"], desired["kind"])
        name = desired["metadata"]["name"]
        readable, current = self._read(resource, namespace, name)
        if not readable:
            return
        if (is_lws and self._lws_manages(resource, namespace, str(meta.get("name", "")), name)) or (
            not is_lws and self._operator_manages(resource, namespace, str(meta.get("uid", "")))
        ):
            ours = ((current or {}).get("metadata") or {}).get("labels") or {}
            if current is not None and contract.GROUP_LABEL in ours and not self._has_members(current):
                self._write("delete", lambda path, _: self.api.delete(path), resource.path(namespace, name), {})
            return
        if current is None:
            refused = self._write("create", self.api.create, resource.path(namespace), desired)
            self._report_refusal(f"{namespace}/{gang.name}", workload, desired, refused)
            if refused is None or refused.status != CONFLICT:
                return
            try:  # made a moment ago, at the workload's admission (admission/ahead.py)
                current = self.api.get(resource.path(namespace, name))
            except ApiError:
                return
        self._adopt(current, desired, resource, workload)

    def _adopt(self, current: Obj | None, desired: Obj, resource: Resource, workload: Obj) -> None:
        """A PodGroup the webhook made at the workload's admission has no owner yet (the workload was not
        stored then). Made for this workload (`made_ahead_for`), the workload becomes its owner and its
        spec the gang's; any other unowned group of gangkeeper's by that name (made for an earlier
        workload of the name, or not as the webhook makes them) is deleted and made again."""
        meta = (current or {}).get("metadata") or {}
        owners = desired["metadata"].get("ownerReferences")
        if current is None or not owners or contract.GROUP_LABEL not in (meta.get("labels") or {}):
            return
        if meta.get("ownerReferences"):
            return  # adopted already (sync keeps it), or someone else's
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        path = resource.path(namespace, name)
        if made_ahead_for(current, workload):
            adopted: Obj = {
                "metadata": {"ownerReferences": owners, "annotations": {contract.AWAITING_OWNER_ANNOTATION: None}}
            }
            patch = spec_patch(resource.group_version, current.get("spec"), desired["spec"])
            if patch is not None:
                adopted["spec"] = patch
            self._write("adopt", self.api.merge_patch, path, adopted)
            return
        log.warning("replacing a PodGroup not made for its workload", extra={"group": f"{namespace}/{name}"})
        uid = str(meta.get("uid") or "")
        gone = self._write(
            "delete",
            lambda p, _: self.api.request("DELETE", p, body={"preconditions": {"uid": uid}}, answer=False),
            path,
            {},
        )
        if gone is None:
            self._write("create", self.api.create, resource.path(namespace), desired)

    def _lws_manages(self, resource: Resource, namespace: str, set_name: str, gang_name: str) -> bool:
        """Whether LWS's own Volcano provider made a PodGroup for this group (gang `lws-NAME-INDEX`)."""
        index = gang_name.rsplit("-", 1)[-1]
        informer = self.workloads.informers.get((resource.group_version, resource.plural))
        for group in informer.items() if informer is not None else []:
            meta = group.get("metadata") or {}
            labels = meta.get("labels") or {}
            if (
                meta.get("namespace") == namespace
                and contract.GROUP_LABEL not in labels
                and labels.get(lws.NAME_LABEL) == set_name
                and labels.get(lws.GROUP_INDEX_LABEL) == index
            ):
                return True
        return False

    def _operator_manages(self, resource: Resource, namespace: str, uid: str) -> bool:
        """Whether the workload's operator made a PodGroup of its own for it (training-operator with
        --gang-scheduler-name=volcano, mpi-operator, KubeRay: controlled by the workload, not gangkeeper's)."""
        informer = self.workloads.informers.get((resource.group_version, resource.plural))
        for group in informer.items() if informer is not None and uid else []:
            meta = group.get("metadata") or {}
            if meta.get("namespace") != namespace or contract.GROUP_LABEL in (meta.get("labels") or {}):
                continue
            if any(ref.get("uid") == uid and ref.get("controller") for ref in meta.get("ownerReferences") or []):
                return True
        return False

    @staticmethod
    def _has_members(group: Obj) -> bool:
        status = group.get("status") or {}
        return any(int(status.get(key) or 0) > 0 for key in ("running", "succeeded", "failed"))

    def _report_refusal(self, key: str, subject: Obj, desired: Obj, error: ApiError | None) -> None:
        """A group object the API refused (Volcano's admission refuses a PodGroup whose queue is missing
        or closed) leaves the pods Pending: say so on the workload, once per distinct refusal."""
        refusal = (
            _refusal_text(error) if error is not None and 400 <= error.status < 500 and error.status != CONFLICT else ""
        )
        record = self.store.record(key)
        if record.group_refused == refusal:
            return
        record.group_refused = refusal
        if refusal:
            kind, name = desired["kind"], desired["metadata"]["name"]
            log.warning("group object refused", extra={"gang": key, "status": error.status if error else 0})
            self.reporter.event(subject, "Warning", "GroupObjectRefused", f"{kind} {name}: {refusal}")


def _refusal_text(error: ApiError) -> str:
    """The API server's reason from a Status body, short enough for an event."""
    try:
        message = str(json.loads(error.body).get("message", ""))
    except (ValueError, AttributeError):
        message = error.body
    return (message or f"HTTP {error.status}")[:400]


def orphan_groups(
    api: Api, live_groups: set[tuple[str, str]], resources: Iterable[Resource], now: dt.datetime | None = None
) -> list[str]:
    """Delete group objects gangkeeper made whose gang has no pods and no owner left to collect them (one
    the webhook made at its workload's admission after ORPHAN_GRACE_SECONDS: it waits for adoption)."""
    deleted = []
    now = now or dt.datetime.now(dt.UTC)
    for resource in resources:
        try:
            items = api.list(resource.path(), labelSelector=contract.GROUP_LABEL)["items"]
        except ApiError:
            continue
        for item in items:
            meta = item["metadata"]
            if (
                meta.get("ownerReferences")
                or (meta.get("namespace"), meta["labels"][contract.GROUP_LABEL]) in live_groups
                or (
                    contract.AWAITING_OWNER_ANNOTATION in (meta.get("annotations") or {})
                    and _age_seconds(meta, now) < ORPHAN_GRACE_SECONDS
                )
            ):
                continue
            try:
                api.delete(resource.path(meta.get("namespace"), meta["name"]))
                deleted.append(f"{meta.get('namespace')}/{meta['name']}")
            except ApiError:
                pass
    if deleted:
        metrics.GROUP_OBJECTS.labels("delete").inc(len(deleted))
        log.info("deleted orphaned group objects", extra={"objects": deleted})
    return deleted


def _age_seconds(meta: Obj, now: dt.datetime) -> float:
    """How long ago the API server made the object (an unreadable timestamp: old)."""
    try:
        created = dt.datetime.fromisoformat(str(meta.get("creationTimestamp")).replace("Z", "+00:00"))
    except ValueError:
        return float("inf")
    return (now - created).total_seconds()
