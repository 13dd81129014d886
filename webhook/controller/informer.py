"""List-and-watch caches: the controller's view of pods and nodes without listing them every pass.

A watch resumes from the last resourceVersion it saw; when the server says that version is too old
(410 Gone) or the connection fails, the cache lists again from scratch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import urllib3

from webhook import contract
from webhook.controller import interning, metrics
from webhook.controller.kube import Api, ApiError, Resource, typed_items

log = logging.getLogger("gangkeeper.controller.informer")


def _keep(value: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: value[k] for k in keys if isinstance(value, dict) and k in value}


def trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """Only what placement and release read: a cluster's worth of full pods would not fit in memory.

    Pods of gangs keep what release needs; every other pod only counts against its node's capacity.
    """
    spec = pod.get("spec") or {}
    metadata = pod.get("metadata") or {}
    managed = contract.GROUP_LABEL in (metadata.get("labels") or {})
    trimmed_spec = _keep(
        spec,
        ("nodeName", "overhead", "nodeSelector", "schedulingGates", "resources", "priority")
        if not managed
        else (
            "nodeName",
            "nodeSelector",
            "schedulingGates",
            "overhead",
            "resources",  # pod-level requests (KEP-2837)
            "affinity",
            "tolerations",
            "topologySpreadConstraints",
            "schedulerName",
            "priorityClassName",
            "priority",
            "preemptionPolicy",  # Never: the gang preempts nothing (preemptor.py)
            "hostNetwork",
            "resourceClaims",
            # the native gang link: which mechanism the pod was stamped for (reconciler.backend_of)
            "workloadRef",
            "schedulingGroup",
        ),
    )
    if managed and spec.get("volumes"):  # only whether a claim may tie the pod to nodes
        trimmed_spec["volumes"] = [
            {"persistentVolumeClaim": v["persistentVolumeClaim"]}
            for v in spec["volumes"]
            if "persistentVolumeClaim" in v
        ]
    container_keys = ("resources", "restartPolicy", "ports") if managed else ("resources", "restartPolicy")
    for key in ("containers", "initContainers"):
        if spec.get(key):
            trimmed_spec[key] = interning.canonical([_keep(c, container_keys) for c in spec[key]])
    if "nodeName" in trimmed_spec:
        trimmed_spec["nodeName"] = interning.text(trimmed_spec["nodeName"])
    meta_keys: tuple[str, ...] = ("name", "namespace", "resourceVersion", "deletionTimestamp")
    if managed:
        meta_keys += ("uid", "labels", "annotations", "ownerReferences", "creationTimestamp")
    meta = _keep(metadata, meta_keys)
    if "namespace" in meta:
        meta["namespace"] = interning.text(meta["namespace"])
    status = pod.get("status") or {}
    trimmed_status: dict[str, Any] = {"phase": interning.text(status["phase"])} if status.get("phase") else {}
    if managed:  # whether the scheduler refused a released pod
        scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
        if scheduled:
            trimmed_status["conditions"] = [_keep(c, ("type", "status", "reason")) for c in scheduled]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": trimmed_spec, "status": trimmed_status}


def trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """Nodes carry image lists and conditions placement never reads."""
    return {
        "metadata": _keep(node.get("metadata") or {}, ("name", "labels", "resourceVersion")),
        "spec": _keep(node.get("spec") or {}, ("taints", "unschedulable")),
        "status": _keep(node.get("status") or {}, ("allocatable",)),
    }


def identity(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


class Informer:
    def __init__(
        self,
        api: Api,
        resource: Resource,
        label_selector: str = "",
        watch_seconds: int = 300,
        transform: Callable[[dict[str, Any]], dict[str, Any]] = identity,
        changed: threading.Event | None = None,
        page_size: int = 500,
    ) -> None:
        self.api, self.resource, self.selector, self.watch_seconds = api, resource, label_selector, watch_seconds
        self.transform, self.page_size = transform, page_size
        self._items: dict[str, dict[str, Any]] = {}
        # what changed since the consumer last asked (key -> the object now, None: deleted), so the
        # controller updates its picture of the cluster by the changes instead of rebuilding it each pass
        self._changes: dict[str, dict[str, Any] | None] = {}
        self._lock = threading.Lock()
        self.resource_version = ""
        self.relists = 0
        self.synced = threading.Event()
        self.changed = changed or threading.Event()  # shared: any cache's change wakes the controller
        self._stop = threading.Event()

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items.values())

    def drain(self) -> dict[str, dict[str, Any] | None]:
        """The changes since the last drain; the first drain holds every object."""
        with self._lock:
            changes, self._changes = self._changes, {}
        return changes

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._items.get(f"{namespace or ''}/{name}")

    @staticmethod
    def _key(obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def relist(self) -> None:
        """List in pages of `page_size`: each page is parsed and trimmed before the next is asked for,
        so a large cluster is never held whole as JSON (the apiserver pages the same way for client-go's
        reflector, tools/pager). An object whose resourceVersion did not change keeps its trimmed copy:
        a relist after a 410 allocates only for what changed."""
        query = {"limit": str(self.page_size), **({"labelSelector": self.selector} if self.selector else {})}
        with self._lock:
            previous = self._items
        items: dict[str, dict[str, Any]] = {}
        resource_version = ""
        while True:
            page = self.api.list(self.resource.path(), **query)
            for obj in typed_items(page):
                key = self._key(obj)
                kept = previous.get(key)
                version = (obj.get("metadata") or {}).get("resourceVersion")
                same = kept is not None and (kept.get("metadata") or {}).get("resourceVersion") == version
                items[key] = kept if same and kept is not None else self.transform(obj)
            metadata = page.get("metadata") or {}
            resource_version = resource_version or metadata.get("resourceVersion", "")
            token = metadata.get("continue")
            del page
            if not token:
                break
            query["continue"] = token
        with self._lock:
            for key, obj in items.items():
                if previous.get(key) is not obj:
                    self._changes[key] = obj
            for key in previous.keys() - items.keys():
                self._changes[key] = None
            self._items = items
            self.resource_version = resource_version
        self.relists += 1
        self.synced.set()
        self.changed.set()

    def watch_once(self) -> bool:
        """Follow one watch until it ends; False when the cache must be listed again."""
        query = {
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(self.watch_seconds),
            "allowWatchBookmarks": "true",
        }
        if self.selector:
            query["labelSelector"] = self.selector
        for event in self.api.stream(self.resource.path(), query, timeout=self.watch_seconds + 30):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                log.info(
                    "watch expired; listing again", extra={"resource": self.resource.plural, "code": obj.get("code")}
                )
                return False
            with self._lock:
                if kind == "DELETED":
                    key = self._key(obj)
                    if self._items.pop(key, None) is not None:
                        self._changes[key] = None
                elif kind in ("ADDED", "MODIFIED"):
                    key = self._key(obj)
                    self._items[key] = self._changes[key] = self.transform(obj)
                self.resource_version = (obj.get("metadata") or {}).get("resourceVersion", self.resource_version)
            self.changed.set()
        return True

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.synced.is_set() or not self.resource_version:
                    self.relist()
                if not self.watch_once():
                    self.relist()
            except (ApiError, OSError, ValueError, urllib3.exceptions.HTTPError) as error:
                if self._stop.is_set():  # the watch broke because we are shutting down
                    return
                # a reset or refused connection must not end the thread: the cache would freeze
                metrics.API_ERRORS.labels("watch", str(getattr(error, "status", 0))).inc()
                log.warning("watch failed; listing again", extra={"resource": self.resource.plural}, exc_info=True)
                self.synced.clear()
                self._stop.wait(1.0)

    def start(self) -> None:
        threading.Thread(target=self.run, name=f"informer-{self.resource.plural}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


class InformerSource:
    """Pods and nodes from informers, for the reconciler."""

    def __init__(self, pods: Informer, nodes: Informer) -> None:
        self._pods, self._nodes = pods, nodes

    def pods(self) -> list[dict[str, Any]]:
        return self._pods.items()

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes.items()

    def changes(self) -> tuple[dict[str, dict[str, Any] | None], dict[str, dict[str, Any] | None]]:
        """Pods and nodes changed since the last call (everything, the first time)."""
        return self._pods.drain(), self._nodes.drain()
