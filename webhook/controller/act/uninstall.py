"""Leaving gangkeeper: every gate it set lifted and every workload it suspended resumed, so nothing
waits for a controller that is about to go. Run before the webhook configurations and the controller
are deleted (the chart's pre-delete hook; `gangkeeper release-all` by hand), and safe to run twice.

Pods then schedule as any pod does, one by one; group objects stay, owned by their workloads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook import contract
from webhook.controller.act.gangobject import GANGS
from webhook.controller.act.requeue import KUEUE_QUEUE_LABEL
from webhook.controller.observe.books import books_of
from webhook.controller.observe.workloads import SUSPEND_PATHS, SUSPENDED_ANNOTATION, WORKLOAD_RESOURCES, nested
from webhook.gangs import kinds
from webhook.kube import PODS, Api, ApiError, Resource

log = logging.getLogger("gangkeeper.uninstall")
PAGE = "500"


@dataclass
class Released:
    gates: list[str] = field(default_factory=list)  # namespace/pod
    resumed: list[str] = field(default_factory=list)  # Kind namespace/name
    failed: list[str] = field(default_factory=list)  # what could not be written, with why


def release_all(api: Api) -> Released:
    done = Released()
    for pod in _listed(api, PODS, contract.GROUP_LABEL):
        _lift_gate(api, pod, done)
    # what gangkeeper suspended is what its Gang objects' books say (the controller's alone to write);
    # a workload's own annotation is never enough: a Job Kueue holds, or one its user suspended, stays
    for gang in _listed(api, GANGS, None):
        if books_of(gang).suspended_at is None:
            continue
        target = _suspended_workload(api, gang)
        if target is None:
            continue
        kind, workload = target
        meta = workload.get("metadata") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        if SUSPENDED_ANNOTATION not in annotations or KUEUE_QUEUE_LABEL in labels:
            continue  # its user took gangkeeper's mark off, or Kueue admits it: theirs to resume
        patch = {**nested(SUSPEND_PATHS[kind], False), "metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}}
        what = f"{kind} {meta.get('namespace')}/{meta.get('name')}"
        path = WORKLOAD_RESOURCES[kind].path(meta.get("namespace"), meta.get("name"))
        _write(api, path, patch, what, done.resumed, done)
    return done


def _suspended_workload(api: Api, gang: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(kind, object) of the workload a Gang's books say gangkeeper suspended: the Gang's workload, or
    for a TrainJob's JobSet the TrainJob (whose suspend Kubeflow Trainer copies to the JobSet)."""
    namespace = str((gang.get("metadata") or {}).get("namespace", ""))
    ref = (gang.get("spec") or {}).get("workload") or {}
    kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
    workload = _read(api, kind, namespace, name)
    through = kinds.suspend_owner(workload)
    if through is not None:
        kind, workload = through[0], _read(api, through[0], namespace, through[1])
    if workload is None or kind not in SUSPEND_PATHS:
        return None
    if ref.get("uid") and kind == ref.get("kind") and (workload.get("metadata") or {}).get("uid") != ref["uid"]:
        return None  # another workload of the same name: not the one suspended
    return kind, workload


def _read(api: Api, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    resource = WORKLOAD_RESOURCES.get(kind)
    if resource is None or not name:
        return None
    try:
        return dict(api.get(resource.path(namespace, name)))
    except ApiError as error:
        if error.status != 404:
            log.warning("could not read a suspended workload", extra={"object": f"{kind} {namespace}/{name}"})
        return None


def _lift_gate(api: Api, pod: dict[str, Any], done: Released) -> None:
    """The gate off, the pod's other gates kept. The patch names the version it read: a pod that changed
    meanwhile is reported, and the next run (the hook Job's retry) reads it again."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    if not any(g.get("name") == contract.GATE for g in gates):
        return
    meta = pod["metadata"]
    remaining = [g for g in gates if g.get("name") != contract.GATE]
    patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {"schedulingGates": remaining or None}}
    _write(
        api, PODS.path(meta["namespace"], meta["name"]), patch, f"{meta['namespace']}/{meta['name']}", done.gates, done
    )


def _listed(api: Api, resource: Resource, selector: str | None) -> Iterator[dict[str, Any]]:
    """Every object of the resource, page by page; nothing when the cluster does not serve it."""
    query = {"limit": PAGE, **({"labelSelector": selector} if selector else {})}
    while True:
        try:
            page = api.list(resource.path(), **query)
        except ApiError as error:
            if error.status == 404:
                return
            raise
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return
        query["continue"] = token


def _write(api: Api, path: str, patch: dict[str, Any], what: str, into: list[str], done: Released) -> None:
    try:
        api.merge_patch(path, patch)
    except ApiError as error:
        if error.status == 404:
            return  # gone meanwhile: nothing waits
        done.failed.append(f"{what}: HTTP {error.status}")
        log.warning("could not release", extra={"object": what, "status": error.status})
        return
    into.append(what)
