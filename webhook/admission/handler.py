"""From request bytes to response document, without any web framework.

Returns (HTTP status, JSON document). Never raises but WouldWait (an API read asked for on the serving
loop; the transport answers the review again off it): a bug in gang logic becomes a logged
`allowed: false` with code 500 for that one request, not a dead worker.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from webhook.admission import keys, metrics, review
from webhook.admission.decide import admit
from webhook.admission.resolve import BackendResolver
from webhook.admission.under_review import Outcome, describe
from webhook.backends import Backend, Volcano
from webhook.backends.discovery import Unavailable
from webhook.gangs import limits
from webhook.gangs.model import Obj
from webhook.kube import WouldWait

log = logging.getLogger("gangkeeper.admission")


class Handler:
    def __init__(self, resolver: BackendResolver) -> None:
        self.resolver = resolver

    def handle(self, endpoint: str, body: bytes) -> tuple[int, dict[str, Any]]:
        started = time.perf_counter()
        try:
            request = review.decode(body)
        except review.BadReview as bad:
            metrics.REQUESTS.labels(
                metrics.label(endpoint, metrics.ENDPOINTS), metrics.OTHER, metrics.OTHER, "bad-request"
            ).inc()
            log.info("bad admission review", extra={"endpoint": endpoint, "reason": bad.reason})
            return bad.http_status, {"error": bad.reason, "code": bad.http_status}
        kind = metrics.kind_label(request["kind"].get("kind"))
        try:
            response, outcome_label = self._decide(endpoint, request)
        except WouldWait:
            raise  # an API read asked for on the serving loop: the review is answered again off it
        except Exception:
            log.exception("internal error in admission", extra={"uid": request["uid"], "endpoint": endpoint})
            response = review.deny(
                request["uid"], 500, f"gangkeeper internal error; see the webhook logs for request {request['uid']}"
            )
            outcome_label = "error"
        endpoint_label = metrics.label(endpoint, metrics.ENDPOINTS)
        metrics.REQUESTS.labels(endpoint_label, request["operation"], kind, outcome_label).inc()
        metrics.LATENCY.labels(endpoint_label).observe(time.perf_counter() - started)
        return 200, review.envelope(response)

    def noop(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """Decode and allow: the transport's own cost, the benchmark's baseline."""
        try:
            request = review.decode(body)
        except review.BadReview as bad:
            return bad.http_status, {"error": bad.reason, "code": bad.http_status}
        return 200, review.envelope(review.allow(request["uid"]))

    def _decide(self, endpoint: str, request: review.AdmissionRequest) -> tuple[review.AdmissionResponse, str]:
        uid, operation = request["uid"], request["operation"]
        obj: Obj | None = request.get("object")
        if obj is None or operation not in ("CREATE", "UPDATE"):
            return review.allow(uid), "allowed"
        if request.get("subResource") == "scale":
            return _scale(uid, obj, (request.get("resource") or {}).get("resource", "")), "allowed"
        if request["kind"].get("kind") == "Namespace" and not request["kind"].get("group"):
            # the opt-in is a namespace selector: a misspelt label would mean no gang and no word
            return review.allow(uid, warnings=keys.namespace_warnings(obj)), "allowed"
        namespace = request.get("namespace")
        backend = self.resolver.resolve(namespace)
        outcome = admit(
            obj,
            operation,
            backend,
            namespace,
            self.resolver.namespace_info(namespace),
            mutate=endpoint == "mutate",
            controller=self.resolver.controller(),
            queues=self.resolver.queues(),
            old=request.get("oldObject"),
            user=_username(request),
            topology_levels=self.resolver.topology_levels,
            priority_classes=self.resolver.priority_classes(),
            volcano_queues=self.resolver.volcano_queues,
            protect_from_disruption=self.resolver.protect_from_disruption,
            workload_uids=self.resolver.workload_uids,
        )
        # a denial is logged at info; an object let through at debug (`--log-level debug`): a 1,000-pod Job
        # made 1,000 lines, each about 80 us of a serving process's 480 us per review (#80); the metrics
        # count them all
        level = logging.INFO if not outcome.allowed else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(
                level,
                "admission decision",
                extra={
                    "uid": uid,
                    "endpoint": endpoint,
                    "operation": operation,
                    "object": describe(obj),
                    "namespace": namespace,
                    "gang": _gang_names(outcome),
                    "allowed": outcome.allowed,
                    "reason": outcome.reason,
                    "dryRun": bool(request.get("dryRun")),
                },
            )
        if not outcome.allowed:
            return review.deny(uid, outcome.code, outcome.message, outcome.warnings), "denied"
        if endpoint == "validate":
            if operation == "CREATE" and not request.get("dryRun"):
                self._make_groups_ahead(obj, backend)
            return review.allow(uid), "allowed"  # warnings come once, from the mutating webhook
        return review.allow(uid, outcome.patch, outcome.warnings), "mutated" if outcome.patch else "allowed"

    def _make_groups_ahead(self, obj: Obj, backend: Backend | Unavailable) -> None:
        """The workload's Volcano PodGroups before its first pod (admission/ahead.py); never refuses it."""
        if self.resolver.groups_ahead is None or not isinstance(backend, Volcano):
            return
        try:
            self.resolver.groups_ahead(obj, backend)
        except WouldWait:
            raise
        except Exception:  # the controller makes them too: the workload is admitted whatever happens here
            log.exception("PodGroups ahead of the pods failed", extra={"object": describe(obj)})


def _username(request: review.AdmissionRequest) -> str | None:
    info = request.get("userInfo")
    name = info.get("username") if isinstance(info, dict) else None
    return name if isinstance(name, str) else None


def _scale(uid: str, scale: Obj, resource: str) -> review.AdmissionResponse:
    """`kubectl scale` and autoscalers change a gang's size through /scale, past the workload's own
    validation: the replica count alone is held to the gang size limit (each replica is a pod or more)."""
    spec = scale.get("spec")
    replicas = spec.get("replicas") if isinstance(spec, dict) else None
    if isinstance(replicas, int) and replicas > limits.max_gang_pods():
        error = limits.too_many("spec.replicas", replicas, replicas, f"scale {resource} to fewer replicas")
        return review.deny(uid, 422, f'Scale "{(scale.get("metadata") or {}).get("name", "")}" is invalid: {error}')
    return review.allow(uid)


def _gang_names(outcome: Outcome) -> str:
    if outcome.plan and outcome.plan.pod_gang:
        return outcome.plan.pod_gang.name
    return ",".join(g.name for g in outcome.gangs)
