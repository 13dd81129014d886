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
from webhook.controller.kube import PODS, Api, ApiError, Resource
from webhook.controller.workloads import SUSPEND_PATHS, SUSPENDED_ANNOTATION, WORKLOAD_RESOURCES, nested

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
    for kind, path in SUSPEND_PATHS.items():
        resource = WORKLOAD_RESOURCES[kind]
        for workload in _listed(api, resource, None):
            meta = workload.get("metadata") or {}
            if SUSPENDED_ANNOTATION not in (meta.get("annotations") or {}):
                continue  # suspended by its user or by Kueue: theirs to resume
            patch = {**nested(path, False), "metadata": {"annotations": {SUSPENDED_ANNOTATION: None}}}
            what = f"{kind} {meta.get('namespace')}/{meta.get('name')}"
            _write(api, resource.path(meta.get("namespace"), meta.get("name")), patch, what, done.resumed, done)
    return done


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
