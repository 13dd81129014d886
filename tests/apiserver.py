"""A small Kubernetes API server for controller tests, enforcing the rules the real one enforces for
the calls gangkeeper's controller makes:

- a pod's scheduling gates can only be removed, never added, after creation; `spec.nodeSelector`
  may only gain keys, and the required node affinity terms only gain requirements (none may be set
  freely), and only while the pod is gated; other spec fields are immutable
  (pkg/apis/core/validation/validation.go ValidatePodUpdate, validatePodSchedulingGates and
  validateNodeAffinityMutation; KEP-3521, KEP-3838);
- a write carrying a stale `metadata.resourceVersion` gets 409 Conflict; a missing object 404;
  creating an existing name 409 AlreadyExists (k8s.io/apiserver/pkg/storage/etcd3/store.go
  GuaranteedUpdate and Create);
- watches resume from a resourceVersion; one older than the retained history gets a 410 Gone event
  (k8s.io/apiserver/pkg/storage/cacher/watch_cache.go, "too old resource version");
- lists are paged with `limit` and `continue` (apiserver storage: a continue token carries the revision
  of the first page and the last key; one older than the retained history gets 410 Expired,
  k8s.io/apiserver/pkg/storage/etcd3/store.go GetList);
- discovery: `/api`, `/apis` (APIGroupList) and `/apis/<group>/<version>` (APIResourceList) from `served`;
- every namespace carries the label `kubernetes.io/metadata.name` (NamespaceDefaultLabelName, set by
  the namespace strategy since 1.21: pkg/registry/core/namespace/strategy.go);
- creates and updates pass through `admission` when set (tests/admission_chain.py: the webhook
  dispatch of k8s.io/apiserver), before they are stored.
Objects are stored as JSON; every write bumps one global resourceVersion, as etcd's revision does.
"""

from __future__ import annotations

import base64
import bisect
import copy
import datetime as dt
import json
import re
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

Obj = dict[str, Any]
_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)
CLUSTER_SCOPED = {"nodes", "namespaces", "admissionchecks"}


# group-versions kube-apiserver serves from typed structs (their lists' items carry no TypeMeta)
BUILT_IN_VERSIONS = frozenset(
    {"v1", "batch/v1", "apps/v1", "policy/v1", "coordination.k8s.io/v1", "events.k8s.io/v1", "discovery.k8s.io/v1"}
    | {f"scheduling.k8s.io/{v}" for v in ("v1", "v1alpha1", "v1alpha2", "v1beta1")}
    | {"admissionregistration.k8s.io/v1", "rbac.authorization.k8s.io/v1"}
)
# plural -> kind of a list's items, for the list's own kind ("JobList")
LIST_ITEM_KINDS = {
    "pods": "Pod",
    "nodes": "Node",
    "namespaces": "Namespace",
    "events": "Event",
    "leases": "Lease",
    "secrets": "Secret",
    "jobs": "Job",
    "cronjobs": "CronJob",
    "statefulsets": "StatefulSet",
    "deployments": "Deployment",
    "workloads": "Workload",
    "podgroups": "PodGroup",
    "leaderworkersets": "LeaderWorkerSet",
    "jobsets": "JobSet",
    "pytorchjobs": "PyTorchJob",
    "mpijobs": "MPIJob",
    "queues": "Queue",
}


class Reject(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


# custom resources served with a status subresource: a write to the object ignores its status, a write
# to /status ignores everything else (k8s.io/apiextensions-apiserver pkg/registry/customresource/strategy.go)
STATUS_SUBRESOURCE = frozenset({"gangs"})


def status_part(plural: str, sub: str | None, body: Any) -> Any:
    if plural not in STATUS_SUBRESOURCE or not isinstance(body, dict):
        return body
    if sub == "status":
        part = {"status": body.get("status")}
        meta = body.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if version:  # still the write's precondition (a stale one gets 409, as from the object itself)
            part["metadata"] = {"resourceVersion": version}
        return part
    return {k: v for k, v in body.items() if k != "status"}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# the lists of the kinds this server serves that a strategic merge patch merges by a key instead of
# replacing (k8s.io/api core/v1 types.go, patchStrategy:"merge"): the ones gangkeeper patches
STRATEGIC_MERGE_KEYS = {"schedulingGates": "name"}


def strategic_merge_patch(target: Any, patch: Any, key: str = "") -> Any:
    """A strategic merge patch, as far as gangkeeper sends them: maps merged, null deletes, the lists of
    STRATEGIC_MERGE_KEYS merged entry by entry (`$patch: delete` removes one), other lists replaced."""
    if isinstance(patch, list) and key in STRATEGIC_MERGE_KEYS:
        merge_key = STRATEGIC_MERGE_KEYS[key]
        result = [copy.deepcopy(i) for i in target] if isinstance(target, list) else []
        for entry in patch:
            unknown = {k for k in entry if k.startswith("$")} - {"$patch"}
            if unknown or entry.get("$patch", "delete") != "delete":
                raise Reject(400, "BadRequest", f"unsupported directive in {entry}")
            result = [i for i in result if i.get(merge_key) != entry.get(merge_key)]
            if "$patch" not in entry:
                result.append(copy.deepcopy(entry))
        return result
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if any(k.startswith("$") for k in patch):
        raise Reject(400, "BadRequest", f"unsupported directive in {patch}")
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = strategic_merge_patch(result.get(name), value, name)
    return result


def apply_patch(target: Any, applied: Any) -> Any:
    """Server-side apply, as far as these tests need it: maps merged, and lists of maps keyed by name or
    type (the +listType=map lists of conditions and Kueue's admission checks) merged entry by entry."""
    if isinstance(applied, dict):
        result = dict(target) if isinstance(target, dict) else {}
        for key, value in applied.items():
            result[key] = apply_patch(result.get(key), value)
        return result
    if isinstance(applied, list) and applied and all(isinstance(i, dict) for i in applied):
        key = "name" if all("name" in i for i in applied) else "type" if all("type" in i for i in applied) else None
        if key is not None and isinstance(target, list):
            merged = {i.get(key): i for i in target if isinstance(i, dict)}
            for item in applied:
                merged[item[key]] = apply_patch(merged.get(item[key]), item)
            return list(merged.values())
    return copy.deepcopy(applied)


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def check_pod_update(old: Obj, new: Obj) -> None:
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    old_gates = [g["name"] for g in old_spec.get("schedulingGates") or []]
    new_gates = [g["name"] for g in new_spec.get("schedulingGates") or []]
    added = [g for g in new_gates if g not in old_gates]
    if added:
        raise Reject(
            422,
            "Invalid",
            f"spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate '{added[0]}'",
        )
    old_selector, new_selector = old_spec.get("nodeSelector") or {}, new_spec.get("nodeSelector") or {}
    if old_selector != new_selector:
        if not old_gates:
            raise Reject(
                422,
                "Invalid",
                "spec.nodeSelector: Forbidden: pod updates may not change nodeSelector once the pod is not gated",
            )
        if any(new_selector.get(k) != v for k, v in old_selector.items()):
            raise Reject(
                422,
                "Invalid",
                "spec.nodeSelector: Invalid value: only additions to nodeSelector are allowed while the pod is gated",
            )
    old_affinity, new_affinity = old_spec.get("affinity") or {}, new_spec.get("affinity") or {}
    if old_affinity != new_affinity:
        _check_affinity_update(old_affinity, new_affinity, gated=bool(old_gates))
    strip = ("schedulingGates", "nodeSelector", "nodeName", "affinity")
    if {k: v for k, v in old_spec.items() if k not in strip} != {k: v for k, v in new_spec.items() if k not in strip}:
        raise Reject(422, "Invalid", "spec: Forbidden: pod updates may not change fields other than the allowed ones")
    if new_spec.get("nodeName") != old_spec.get("nodeName"):
        raise Reject(422, "Invalid", "spec.nodeName: Forbidden: set by binding, not by update")


def _required(affinity: Obj) -> Obj | None:
    return (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")


def _check_affinity_update(old: Obj, new: Obj, gated: bool) -> None:
    """Only a gated pod's required node terms may change, and only by gaining requirements."""
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    rest_old = {
        **old,
        "nodeAffinity": {k: v for k, v in (old.get("nodeAffinity") or {}).items() if "required" not in k},
    }
    rest_new = {
        **new,
        "nodeAffinity": {k: v for k, v in (new.get("nodeAffinity") or {}).items() if "required" not in k},
    }
    if not gated or rest_old != rest_new:
        raise Reject(422, "Invalid", "spec: Forbidden: pod updates may not change fields other than the allowed ones")
    old_terms = (_required(old) or {}).get("nodeSelectorTerms") or []
    new_terms = (_required(new) or {}).get("nodeSelectorTerms") or []
    if _required(old) is None or not old_terms:
        return
    if len(new_terms) != len(old_terms):
        raise Reject(
            422,
            "Invalid",
            f"{path}: Invalid value: no additions/deletions to non-empty NodeSelectorTerms list are allowed",
        )
    for i, (before, after) in enumerate(zip(old_terms, new_terms, strict=True)):
        grown = all(
            (after.get(part) or [])[: len(before.get(part) or [])] == (before.get(part) or [])
            for part in ("matchExpressions", "matchFields")
        )
        emptied = not (before.get("matchExpressions") or before.get("matchFields")) and after != before
        if not grown or emptied:
            raise Reject(
                422, "Invalid", f"{path}[{i}]: Invalid value: only additions are allowed (no mutations or deletions)"
            )


class Store:
    def __init__(self, history: int = 1000) -> None:
        self.lock = threading.Condition()
        self.objects: dict[tuple[str, str, str, str], Obj] = {}  # (gv, plural, ns, name)
        self.revision = 0
        self.events: list[tuple[int, str, str, str, Obj]] = []  # (rv, gv, plural, type, obj)
        self.history = history
        self.requests: list[tuple[str, str]] = []
        self.credentials: list[str | None] = []  # each request's Authorization header
        self.wall: Callable[[], dt.datetime] | None = None  # the server's clock (its Date header), when set
        # what discovery (GET /apis/<group>/<version>) reports as served; tests may change it
        self.served: dict[str, set[str]] = {
            "batch/v1": {"jobs", "cronjobs"},
            "apps/v1": {"statefulsets", "deployments"},
            "scheduling.volcano.sh/v1beta1": {"podgroups", "queues"},
            "scheduling.x-k8s.io/v1alpha1": {"podgroups"},
            "leaderworkerset.x-k8s.io/v1": {"leaderworkersets"},
        }
        self.fail_next: list[Callable[[str, str], Reject | None]] = []
        self._sorted: dict[tuple[str, str], list[tuple[str, str, str, str]]] = {}
        # (operation, group/version, plural, namespace, object, old object) -> the object to store
        self.admission: Callable[[str, str, str, str, Obj, Obj | None], Obj] | None = None

    def load(self, gv: str, plural: str, objects: list[Obj]) -> None:
        """Bulk insert without watch events (benchmarks filling a large cluster)."""
        with self.lock:
            for obj in objects:
                meta = obj["metadata"]
                self.revision += 1
                meta["resourceVersion"] = str(self.revision)
                meta.setdefault("uid", str(uuid.uuid4()))
                namespace = meta.get("namespace", "") if plural not in CLUSTER_SCOPED else ""
                self.objects[(gv, plural, namespace, meta["name"])] = obj
            self._sorted.pop((gv, plural), None)

    def _keys(self, gv: str, plural: str) -> list[tuple[str, str, str, str]]:
        """The collection's keys in order, kept between pages (a list of 150,000 pods is 300 pages)."""
        keys = self._sorted.get((gv, plural))
        if keys is None:
            keys = self._sorted[(gv, plural)] = sorted(k for k in self.objects if k[0] == gv and k[1] == plural)
        return keys

    def _index(self, key: tuple[str, str, str, str], present: bool) -> None:
        """Keep the collection's ordered keys in step with a create (present) or a delete, so that a list
        paged while objects come and go (50 a second in the benchmark) is not sorted again per page."""
        keys = self._sorted.get(key[:2])
        if keys is None:
            return
        at = bisect.bisect_left(keys, key)
        if present and (at == len(keys) or keys[at] != key):
            keys.insert(at, key)
        elif not present and at < len(keys) and keys[at] == key:
            del keys[at]

    def _bump(self, gv: str, plural: str, kind: str, obj: Obj) -> None:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        self.events.append((self.revision, gv, plural, kind, copy.deepcopy(obj)))
        del self.events[: max(0, len(self.events) - self.history)]
        self.lock.notify_all()

    def oldest(self) -> int:
        return self.events[0][0] if self.events else self.revision

    def create(self, gv: str, plural: str, ns: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        if plural == "namespaces":
            meta = obj.setdefault("metadata", {})
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
        if self.admission is not None:  # outside the lock: webhooks may take their time
            obj = self.admission("CREATE", gv, plural, ns if plural not in CLUSTER_SCOPED else "", obj, None)
        with self.lock:
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:8]
            if plural not in CLUSTER_SCOPED:
                meta["namespace"] = ns
            key = (gv, plural, ns if plural not in CLUSTER_SCOPED else "", meta["name"])
            if key in self.objects:
                raise Reject(409, "AlreadyExists", f'{plural} "{meta["name"]}" already exists')
            meta["uid"] = str(uuid.uuid4())
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            self.objects[key] = obj
            self._index(key, present=True)
            self._bump(gv, plural, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, gv: str, plural: str, ns: str, name: str) -> Obj:
        with self.lock:
            key = (gv, plural, ns if plural not in CLUSTER_SCOPED else "", name)
            if key not in self.objects:
                # as kube-apiserver names an object not found (apimachinery errors.go NewNotFound), unlike a
                # resource not served
                raise Reject(404, "NotFound", f'{plural} "{name}" not found', {"name": name, "kind": plural})
            return copy.deepcopy(self.objects[key])

    def list(
        self, gv: str, plural: str, ns: str | None, selector: str = "", limit: int = 0, token: str = ""
    ) -> tuple[list[Obj], str, str]:
        """(items, resourceVersion, continue token or "")."""
        with self.lock:
            after, revision = "", self.revision
            if token:
                state = json.loads(base64.urlsafe_b64decode(token))
                after, revision = state["after"], state["rv"]
                if revision < self.oldest() - 1:
                    raise Reject(
                        410, "Expired", "The provided continue parameter is too old to display a consistent list"
                    )
            ordered = self._keys(gv, plural)
            start = bisect.bisect_right(ordered, (gv, plural, *after.split("/", 1))) if after else 0
            items: list[Obj] = []
            for position in range(start, len(ordered)):
                key = ordered[position]
                if ns and key[2] != ns:
                    continue
                obj = self.objects[key]
                if selector_matches(selector, obj["metadata"].get("labels") or {}):
                    items.append(copy.deepcopy(obj))
                    if limit and len(items) == limit:
                        # sorted by namespace: the next key is of this namespace, or none is left
                        more = position + 1 < len(ordered) and (not ns or ordered[position + 1][2] == ns)
                        next_token = json.dumps({"after": "/".join(key[2:]), "rv": revision}).encode()
                        return items, str(revision), base64.urlsafe_b64encode(next_token).decode() if more else ""
            return items, str(revision), ""

    def update(
        self, gv: str, plural: str, ns: str, name: str, new: Obj, expected_rv: str | None, admit: bool = True
    ) -> Obj:
        if admit and self.admission is not None:
            old = self.get(gv, plural, ns, name)
            new = self.admission("UPDATE", gv, plural, ns if plural not in CLUSTER_SCOPED else "", new, old)
        with self.lock:
            old = self.get(gv, plural, ns, name)
            if expected_rv and expected_rv != old["metadata"]["resourceVersion"]:
                raise Reject(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {plural} "{name}": the object has '
                    "been modified; please apply your changes to the latest version and "
                    "try again",
                )
            if plural == "pods":
                check_pod_update(old, new)
            new["metadata"]["uid"] = old["metadata"]["uid"]
            new["metadata"]["creationTimestamp"] = old["metadata"].get("creationTimestamp")
            key = (gv, plural, ns if plural not in CLUSTER_SCOPED else "", name)
            self.objects[key] = new
            self._bump(gv, plural, "MODIFIED", new)
            return copy.deepcopy(new)

    def patch(self, gv: str, plural: str, ns: str, name: str, patch: Obj, strategic: bool = False) -> Obj:
        """A merge patch (`strategic`: a strategic merge patch); without a resourceVersion it is retried on
        conflict, as the apiserver's GuaranteedUpdate does (k8s.io/apiserver/pkg/registry/generic/registry/store.go)."""
        expected = (patch.get("metadata") or {}).get("resourceVersion")
        while True:
            with self.lock:
                old = self.get(gv, plural, ns, name)
                new = strategic_merge_patch(old, patch) if strategic else merge_patch(old, patch)
                new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            try:
                return self.update(gv, plural, ns, name, new, expected or old["metadata"]["resourceVersion"])
            except Reject as error:
                if error.code != 409 or expected:
                    raise

    def delete(self, gv: str, plural: str, ns: str, name: str) -> Obj:
        with self.lock:
            old = self.get(gv, plural, ns, name)
            key = (gv, plural, ns if plural not in CLUSTER_SCOPED else "", name)
            del self.objects[key]
            self._index(key, present=False)
            self._bump(gv, plural, "DELETED", old)
            return old

    def bind(self, ns: str, name: str, node: str) -> None:
        """What the scheduler's Binding does: set spec.nodeName once."""
        with self.lock:
            pod = self.get("v1", "pods", ns, name)
            if pod["spec"].get("schedulingGates"):
                raise Reject(422, "Invalid", "a gated pod cannot be bound")
            pod["spec"]["nodeName"] = node
            self.objects[("v1", "pods", ns, name)] = pod
            self._bump("v1", "pods", "MODIFIED", pod)


class Handler(BaseHTTPRequestHandler):
    store: Store
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small keep-alive responses must not wait for delayed ACKs
    wbufsize = 1 << 16  # headers and body leave in one segment; flushed after each request

    def log_message(self, format: str, *args: Any) -> None:  # the tests read the store, not logs
        pass

    def send_response(self, code: int, message: str | None = None) -> None:
        """As http.server's, but the Date header is the store's clock when a test sets one (the API
        server's clock, which the controller anchors its own on), and absent otherwise."""
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("Server", self.version_string())
        if self.store.wall is not None:
            self.send_header("Date", self.date_time_string(self.store.wall().timestamp()))

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, error: Reject) -> None:
        self._send(
            error.code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": error.message,
                "reason": error.reason,
                "code": error.code,
                **({"details": error.details} if error.details else {}),
            },
        )

    def _route(self) -> tuple[str, str, str, str | None, str | None, dict[str, list[str]]]:
        url = urlparse(self.path)
        match = _PATH.match(url.path)
        if not match:
            raise Reject(404, "NotFound", f"no route {url.path}")
        gv = "v1" if match["core"] else f"{match['group']}/{match['version']}"
        return gv, match["plural"], match["ns"] or "", match["name"], match["sub"], parse_qs(url.query)

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _body(self) -> Any:
        return self._request_body

    def _discovery(self) -> bool:
        path = urlparse(self.path).path
        if path in ("/api", "/apis"):
            self.store.requests.append(("GET", self.path))
            self._send(200, self._group_list() if path == "/apis" else {"kind": "APIVersions", "versions": ["v1"]})
            return True
        match = re.match(r"^/apis/([^/]+)/([^/?]+)$", path)
        if not match:
            return False
        group_version = f"{match[1]}/{match[2]}"
        self.store.requests.append(("GET", self.path))
        if group_version not in self.store.served:
            self._status(Reject(404, "NotFound", f"{group_version} is not served"))
        else:
            self._send(
                200,
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": group_version,
                    "resources": [
                        {"name": n, "namespaced": True, "kind": n, "verbs": ["get", "list"]}
                        for n in sorted(self.store.served[group_version])
                    ],
                },
            )
        return True

    def _group_list(self) -> Obj:
        groups: dict[str, list[str]] = {}
        for group_version in sorted(self.store.served):
            group, _, version = group_version.rpartition("/")
            if group:
                groups.setdefault(group, []).append(version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": group,
                    "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]},
                }
                for group, versions in groups.items()
            ],
        }

    def _handle(self, method: str) -> None:  # noqa: C901  (over 15: to be split, issue 77)
        store = self.store
        self._request_body = self._read_body()  # always read: the connection is kept alive
        if method == "GET" and self._discovery():
            return
        try:
            gv, plural, ns, name, sub, query = self._route()
            store.requests.append((method, self.path))
            store.credentials.append(self.headers.get("Authorization"))
            for hook in list(store.fail_next):
                failure = hook(method, self.path)
                if failure is not None:
                    store.fail_next.remove(hook)
                    raise failure
            if method == "GET" and name:
                self._send(200, store.get(gv, plural, ns, name))
            elif method == "GET" and query.get("watch") == ["true"]:
                self._watch(gv, plural, ns, query)
            elif method == "GET":
                items, rv, token = store.list(
                    gv,
                    plural,
                    ns or None,
                    query.get("labelSelector", [""])[0],
                    int(query.get("limit", ["0"])[0] or 0),
                    query.get("continue", [""])[0],
                )
                metadata = {"resourceVersion": rv, **({"continue": token} if token else {})}
                kind = LIST_ITEM_KINDS.get(plural, "")
                if gv in BUILT_IN_VERSIONS:
                    # as kube-apiserver answers a typed list: its items carry no apiVersion nor kind
                    # (custom resources' lists are unstructured and keep them)
                    items = [{k: v for k, v in item.items() if k not in ("apiVersion", "kind")} for item in items]
                listed = {"kind": f"{kind}List" if kind else "List", "apiVersion": gv, "metadata": metadata}
                self._send(200, {**listed, "items": items})
            elif method == "POST" and sub == "eviction":
                store.delete(gv, plural, ns, name or "")
                self._send(201, {"kind": "Status", "status": "Success"})
            elif method == "POST":
                self._send(201, store.create(gv, plural, ns, status_part(plural, None, self._body())))
            elif method == "PUT":
                body = self._body()
                self._send(200, store.update(gv, plural, ns, name or "", body, body["metadata"].get("resourceVersion")))
            elif method == "PATCH" and self.headers.get("Content-Type") == "application/apply-patch+yaml":
                body = status_part(plural, sub, self._body())
                with store.lock:
                    old = store.get(gv, plural, ns, name or "")
                    new = apply_patch(old, {k: v for k, v in body.items() if k not in ("apiVersion", "kind")})
                    new["metadata"] = old["metadata"]
                    version = old["metadata"]["resourceVersion"]
                self._send(200, store.update(gv, plural, ns, name or "", new, version))
            elif method == "PATCH":
                kind = self.headers.get("Content-Type")
                strategic = kind == "application/strategic-merge-patch+json"
                if strategic and "." in gv.partition("/")[0]:  # as the API server: no custom resource takes one
                    raise Reject(415, "UnsupportedMediaType", "strategic merge patches are for built-in kinds")
                if kind != "application/merge-patch+json" and not strategic:
                    raise Reject(415, "UnsupportedMediaType", "only merge and strategic merge patches here")
                body = status_part(plural, sub, self._body())
                self._send(200, store.patch(gv, plural, ns, name or "", body, strategic))
            elif method == "DELETE":
                self._send(200, store.delete(gv, plural, ns, name or ""))
        except Reject as error:
            self._status(error)

    def _watch(self, gv: str, plural: str, ns: str, query: dict[str, list[str]]) -> None:
        store = self.store
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        selector = query.get("labelSelector", [""])[0]
        timeout = float(query.get("timeoutSeconds", ["5"])[0])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(event: Obj) -> None:
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()

        deadline = time.monotonic() + timeout
        with store.lock:
            if since and since < store.oldest() - 1:
                emit(
                    {
                        "type": "ERROR",
                        "object": {
                            "kind": "Status",
                            "code": 410,
                            "reason": "Expired",
                            "message": f"too old resource version: {since}",
                        },
                    }
                )
                self.wfile.write(b"0\r\n\r\n")
                return
            while time.monotonic() < deadline:
                # events are in revision order: start after the last one sent, not at the oldest kept
                start = bisect.bisect_right(store.events, since, key=lambda event: event[0])
                for _, egv, eplural, kind, obj in store.events[start:]:
                    if (
                        egv == gv
                        and eplural == plural
                        and (not ns or obj["metadata"].get("namespace") == ns)
                        and selector_matches(selector, obj["metadata"].get("labels") or {})
                    ):
                        emit({"type": kind, "object": obj})
                since = store.revision
                store.lock.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


class ApiHttpServer(ThreadingHTTPServer):
    """One thread per connection, like the webhook's callers expect. kube-apiserver's listener takes the
    kernel's backlog (somaxconn); socketserver's default of 5 drops a burst of connects, each retried
    a second later, which would time a client's connection pool instead of the server."""

    daemon_threads = True
    request_queue_size = 1024


class TestApiServer:
    __test__ = False  # not a pytest test class

    def __init__(self, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.store = Store()
        handler = type("BoundHandler", (Handler,), {"store": self.store})
        self.httpd = ApiHttpServer((host, 0), handler)
        if tls is not None:  # serving certificate, and client certificates if the context asks for them
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://{host}:{self.httpd.server_address[1]}"
        # a short poll: shutdown() waits for the loop's next look, and serve_forever's default 0.5 s was
        # paid by every test that starts a server (a quarter second each on average, minutes in all)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> TestApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def main() -> None:
    """Serve on a port of its own, in its own process (benchmarks: the server must not share our GIL)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    store = Store(history=100_000)
    handler = type("BoundHandler", (Handler,), {"store": store})
    httpd = ApiHttpServer(("127.0.0.1", args.port), handler)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
