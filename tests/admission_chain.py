"""Webhook admission as kube-apiserver runs it, for the test API server (tests/apiserver.py).

What is modelled, each from k8s.io/apiserver/pkg/admission/plugin/webhook/:
- which webhooks are called (generic/webhook.go ShouldCallHook): `rules` (apiGroups, apiVersions,
  resources, operations, `*`; rules/rules.go), `namespaceSelector` against the namespace's labels
  (namespace/matcher.go: cluster-scoped objects other than namespaces skip it), `objectSelector`
  against the new or the old object's labels (object/matcher.go);
- the call (generic/webhook.go, the client from k8s.io/apiserver/pkg/util/webhook): an AdmissionReview
  v1 POSTed over HTTPS to `<service>.<namespace>.svc`, verified against the configuration's caBundle,
  `?timeout=<timeoutSeconds>s`, HTTP/1.1 with idle connections reused;
- `failurePolicy` (mutating/dispatcher.go, validating/dispatcher.go): a failed call refuses the request
  under Fail ("failed calling webhook") and is skipped under Ignore;
- a denial becomes `admission webhook "<name>" denied the request: <message>` with the webhook's code
  (errors/statuserror.go ToStatusErr, 403 when none);
- the JSONPatch applied in order; `reinvocationPolicy: IfNeeded` calls a webhook once more when a later
  one changed the object (mutating/reinvocationcontext.go); validating webhooks then see the final object.
"""

from __future__ import annotations

import base64
import http.client
import json
import select
import socket
import ssl
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from tests.apiserver import Obj, Reject, Store

MUTATING = ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations")
VALIDATING = ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations")
KINDS = {  # plural -> kind, for the request's kind field
    "pods": "Pod",
    "jobs": "Job",
    "cronjobs": "CronJob",
    "statefulsets": "StatefulSet",
    "deployments": "Deployment",
    "namespaces": "Namespace",
    "leaderworkersets": "LeaderWorkerSet",
    "jobsets": "JobSet",
    "mpijobs": "MPIJob",
    "pytorchjobs": "PyTorchJob",
}


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics (k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go); nil matches all."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def rule_matches(rule: Obj, group: str, version: str, resource: str, operation: str) -> bool:
    def has(values: list[str], value: str) -> bool:
        return "*" in values or value in values

    return (
        has(rule.get("apiGroups") or [], group)
        and has(rule.get("apiVersions") or [], version)
        and has(rule.get("resources") or [], resource)
        and has(rule.get("operations") or [], operation)
    )


@dataclass
class Call:
    """One call as the test saw it: which webhook, and how it went."""

    webhook: str
    operation: str
    resource: str
    outcome: str  # "allowed", "patched", "denied", "failed: ...", "ignored: ..."


@dataclass
class AdmissionChain:
    store: Store
    # "<service>.<namespace>:<port>" -> candidate (host, port) endpoints, like a Service's endpoints
    endpoints: Callable[[str], list[tuple[str, int]]]
    calls: list[Call] = field(default_factory=list)
    pool_size: int = 25  # idle connections kept per endpoint: MaxIdleConnsPerHost of the apiserver's transport
    _pool: dict[tuple[str, int, str], list[http.client.HTTPSConnection]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: int = 0

    def install(self) -> AdmissionChain:
        self.store.admission = self.admit
        return self

    # the chain

    def admit(self, operation: str, gv: str, plural: str, namespace: str, obj: Obj, old: Obj | None) -> Obj:
        if plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations", "events", "leases"):
            return (
                obj  # webhooks are never called for these (generic/webhook.go IsExemptAdmissionConfigurationResource)
            )
        group, _, version = gv.rpartition("/")
        mutating = self._webhooks(MUTATING, group, version, plural, operation, namespace, obj, old)
        called: dict[str, int] = {}  # webhook -> the object's version it last saw
        changes = 0
        for webhook in mutating:
            obj, changed = self._call(webhook, operation, gv, plural, namespace, obj, old, mutate=True)
            changes += changed
            called[webhook["name"]] = changes
        for webhook in mutating:  # once more for IfNeeded webhooks that ran before a later change
            if webhook.get("reinvocationPolicy") == "IfNeeded" and called[webhook["name"]] < changes:
                obj, _ = self._call(webhook, operation, gv, plural, namespace, obj, old, mutate=True)
        for webhook in self._webhooks(VALIDATING, group, version, plural, operation, namespace, obj, old):
            self._call(webhook, operation, gv, plural, namespace, obj, old, mutate=False)
        return obj

    def _webhooks(
        self,
        configurations: tuple[str, str],
        group: str,
        version: str,
        plural: str,
        operation: str,
        namespace: str,
        obj: Obj,
        old: Obj | None,
    ) -> list[Obj]:
        found = []
        namespace_labels: dict[str, str] = {}
        if namespace:
            try:
                namespace_labels = self.store.get("v1", "namespaces", "", namespace)["metadata"].get("labels") or {}
            except Reject:
                namespace_labels = {}
        items, _, _ = self.store.list(*configurations, None)
        for configuration in sorted(items, key=lambda c: c["metadata"]["name"]):
            for webhook in configuration.get("webhooks") or []:
                if not any(rule_matches(r, group, version, plural, operation) for r in webhook.get("rules") or []):
                    continue
                if namespace and not selector_matches(webhook.get("namespaceSelector"), namespace_labels):
                    continue
                labels = [(o.get("metadata") or {}).get("labels") or {} for o in (obj, old) if o is not None]
                if not any(selector_matches(webhook.get("objectSelector"), each) for each in labels):
                    continue
                found.append(webhook)
        return found

    def _call(
        self,
        webhook: Obj,
        operation: str,
        gv: str,
        plural: str,
        namespace: str,
        obj: Obj,
        old: Obj | None,
        mutate: bool,
    ) -> tuple[Obj, bool]:
        name = webhook["name"]
        group, _, version = gv.rpartition("/")
        meta = obj.get("metadata") or {}
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": group, "version": version, "kind": KINDS.get(plural, plural)},
                "resource": {"group": group, "version": version, "resource": plural},
                "requestKind": {"group": group, "version": version, "kind": KINDS.get(plural, plural)},
                "requestResource": {"group": group, "version": version, "resource": plural},
                "name": meta.get("name", ""),
                "namespace": namespace,
                "operation": operation,
                "userInfo": {"username": "system:serviceaccount:test:client"},
                "object": obj,
                "oldObject": old,
                "dryRun": False,
                "options": {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"},
            },
        }
        try:
            response = self._post(webhook, review)
        except Exception as error:  # any failure to get an answer is the failurePolicy's to judge
            if webhook.get("failurePolicy", "Fail") == "Ignore":
                self.calls.append(Call(name, operation, plural, f"ignored: {error}"))
                return obj, False
            self.calls.append(Call(name, operation, plural, f"failed: {error}"))
            raise Reject(
                500, "InternalError", f'Internal error occurred: failed calling webhook "{name}": {error}'
            ) from None
        if not response.get("allowed"):
            status = response.get("status") or {}
            self.calls.append(Call(name, operation, plural, "denied"))
            raise Reject(
                int(status.get("code") or 403),
                "Forbidden",
                f'admission webhook "{name}" denied the request: {status.get("message", "")}',
            )
        if mutate and response.get("patch"):
            if response.get("patchType") != "JSONPatch":
                raise Reject(500, "InternalError", f'webhook "{name}" sent a patch of type {response.get("patchType")}')
            patched = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
            changed = patched != obj
            self.calls.append(Call(name, operation, plural, "patched"))
            return patched, changed
        self.calls.append(Call(name, operation, plural, "allowed"))
        return obj, False

    # transport

    def _post(self, webhook: Obj, review: Obj) -> Obj:
        config = webhook["clientConfig"]
        service = config["service"]
        hostname = f"{service['name']}.{service['namespace']}.svc"
        targets = self.endpoints(f"{service['name']}.{service['namespace']}:{service.get('port', 443)}")
        if not targets:
            raise ConnectionError(f'no endpoints available for service "{service["name"]}"')
        with self._lock:
            self._next += 1
            host, port = targets[self._next % len(targets)]
        ca_bundle = base64.b64decode(config.get("caBundle") or "")
        if not ca_bundle:
            raise ssl.SSLError("x509: certificate signed by unknown authority (no caBundle)")
        timeout = float(webhook.get("timeoutSeconds", 10))
        key = (host, port, config.get("caBundle") or "")
        connection = self._take(key, host, port, hostname, ca_bundle, timeout)
        body = json.dumps(review).encode()
        try:
            connection.request(
                "POST",
                f"{service.get('path', '/')}?timeout={int(timeout)}s",
                body=body,
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            answer = connection.getresponse()
            data = answer.read()
        except Exception:
            connection.close()
            raise
        if answer.getheader("Connection", "").lower() == "close":
            connection.close()
        else:
            self._give_back(key, connection)
        if answer.status != 200:
            raise ConnectionError(f"the server responded with status {answer.status}: {data[:200]!r}")
        document = json.loads(data)
        response: Obj = document["response"]
        if response.get("uid") != review["request"]["uid"]:
            raise ValueError("expected response.uid to match the request.uid")
        return response

    def _take(
        self, key: tuple[str, int, str], host: str, port: int, hostname: str, ca: bytes, timeout: float
    ) -> http.client.HTTPSConnection:
        with self._lock:
            idle = self._pool.get(key) or []
            while idle:
                connection = idle.pop()
                # Go's transport reads idle connections in the background and drops one the server
                # closed; here a readable idle socket means the same (EOF), so it is not reused
                if connection.sock is not None and not _readable(connection.sock):
                    return connection
                connection.close()
        with tempfile.NamedTemporaryFile("wb", suffix=".crt") as bundle:
            bundle.write(ca)
            bundle.flush()
            context = ssl.create_default_context(cafile=bundle.name)
        connection = _SniConnection(host, port, hostname, context=context, timeout=timeout)
        return connection

    def _give_back(self, key: tuple[str, int, str], connection: http.client.HTTPSConnection) -> None:
        with self._lock:
            idle = self._pool.setdefault(key, [])
            if len(idle) < self.pool_size:
                idle.append(connection)
                return
        connection.close()


class _SniConnection(http.client.HTTPSConnection):
    """Connects to an endpoint address but verifies, and sends as SNI, the service's DNS name."""

    def __init__(self, host: str, port: int, server_hostname: str, **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self._server_hostname = server_hostname

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_hostname)  # type: ignore[attr-defined]


def _readable(sock: socket.socket) -> bool:
    """poll, not select: a test process with a thousand descriptors open (a worker that ran the real
    tier) has sockets past select's FD_SETSIZE of 1024, which it refuses ("filedescriptor out of range")."""
    waiting = select.poll()
    waiting.register(sock, select.POLLIN)
    return bool(waiting.poll(0))
