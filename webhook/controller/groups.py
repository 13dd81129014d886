"""The group objects of the other backends (Volcano and coscheduling PodGroups, native Workloads and
PodGroups): created and kept in step with the gang's workload, never taken from someone else, and
deleted when the bare pod group they stood for is gone."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from webhook import backends, contract
from webhook.backends import NamespaceInfo
from webhook.controller import metrics
from webhook.controller.cluster import GangView
from webhook.controller.kube import Api, ApiError, Resource
from webhook.controller.report import Reporter
from webhook.controller.resolve import Resolved, Workloads
from webhook.controller.workloads import group_resource
from webhook.gangs.model import Obj

log = logging.getLogger("gangkeeper.controller")

# native generations whose group specs cannot be updated (k8s.io/api scheduling v1alpha1 Workload.spec,
# v1alpha2 `+k8s:immutable`; a PodGroup cannot be replaced either while pods name it: its
# podgroup-protection finalizer holds the deletion); v1beta1 lets minCount change
IMMUTABLE_GROUP_SPECS = frozenset({"scheduling.k8s.io/v1alpha1", "scheduling.k8s.io/v1alpha2"})


class GroupObjects:
    def __init__(self, api: Api, workloads: Workloads, reporter: Reporter, native_version: str) -> None:
        self.api, self.workloads, self.reporter, self.native_version = api, workloads, reporter, native_version
        self._refusals: dict[str, str] = {}  # gang key -> why the API refused its group object

    def resources(self) -> list[Resource]:
        from webhook.backends.native import GENERATIONS

        native = f"scheduling.k8s.io/{GENERATIONS[self.native_version].version}"
        return [
            group_resource("scheduling.volcano.sh/v1beta1", "PodGroup"),
            group_resource("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
            group_resource(native, "PodGroup"),
            group_resource(native, "Workload"),
        ]

    def sync(self, gang: GangView, resolved: Resolved, backend: str) -> None:
        if resolved.gang is None:
            return
        name, _, version = backend.partition("-")
        chosen = backends.make(name, kubernetes_version=version or self.native_version)
        for desired in chosen.group_objects([resolved.gang], NamespaceInfo()):
            resource = group_resource(desired["apiVersion"], desired["kind"])
            meta = desired["metadata"]
            path = resource.path(meta.get("namespace") or gang.namespace, meta["name"])
            try:
                current = self.workloads.read(resource, meta.get("namespace") or gang.namespace, meta["name"])
            except ApiError as error:
                metrics.API_ERRORS.labels("get", str(error.status)).inc()
                continue
            if current is None:
                refused = self._write("create", self.api.create, resource.path(gang.namespace), desired)
                self._report_refusal(gang, resolved, desired, refused)
                continue
            if ((current.get("metadata") or {}).get("labels") or {}).get(contract.GROUP_LABEL) is None:
                continue  # someone else's object of the same name: never a second owner
            if current.get("spec") == desired["spec"]:
                continue
            if resource.group_version in IMMUTABLE_GROUP_SPECS:
                # the API refuses any change (422); admission refuses the gangs that would need one
                continue
            self._write("update", self.api.merge_patch, path, {"spec": desired["spec"]})

    def _write(self, action: str, call: Callable[[str, Obj], Any], path: str, body: Obj) -> ApiError | None:
        try:
            call(path, body)
            metrics.GROUP_OBJECTS.labels(action).inc()
        except ApiError as error:
            metrics.API_ERRORS.labels(action, str(error.status)).inc()
            return error
        return None

    def _report_refusal(self, gang: GangView, resolved: Resolved, desired: Obj, error: ApiError | None) -> None:
        """A group object the API refused (Volcano's admission refuses a PodGroup whose queue is missing
        or closed) leaves the pods Pending: say so on the workload, once per distinct refusal."""
        refusal = (
            _refusal_text(error) if error is not None and 400 <= error.status < 500 and error.status != 409 else ""
        )
        if self._refusals.get(gang.key, "") == refusal:
            return
        if refusal:
            self._refusals[gang.key] = refusal
            kind, name = desired["kind"], desired["metadata"]["name"]
            log.warning("group object refused", extra={"gang": gang.key, "status": error.status if error else 0})
            self.reporter.event(
                resolved.workload or gang.raw[0], "Warning", "GroupObjectRefused", f"{kind} {name}: {refusal}"
            )
        else:
            self._refusals.pop(gang.key, None)


def _refusal_text(error: ApiError) -> str:
    """The API server's reason from a Status body, short enough for an event."""
    try:
        message = str(json.loads(error.body).get("message", ""))
    except (ValueError, AttributeError):
        message = error.body
    return (message or f"HTTP {error.status}")[:400]


def orphan_groups(api: Api, live_groups: set[tuple[str, str]], resources: Iterable[Resource]) -> list[str]:
    """Delete group objects gangkeeper made whose gang has no pods and no owner left to collect them."""
    deleted = []
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
            ):
                continue
            try:
                api.delete(resource.path(meta.get("namespace"), meta["name"]))
                deleted.append(f"{meta.get('namespace')}/{meta['name']}")
            except ApiError:
                pass
    return deleted
