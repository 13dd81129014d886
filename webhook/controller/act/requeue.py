"""What a timed-out gang costs its workload: requeued whole by suspending it (the kinds whose owner
counts a deleted pod as a failure), or its pods evicted (the others); backoff and the attempt budget
kept in the gang's Gang object; the workload resumed once its backoff has passed. A workload that Kueue
manages is left to Kueue, and one its user suspended (or unmarked) is never resumed by gangkeeper."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from webhook.controller import metrics
from webhook.controller.act.gangobject import GangObjects
from webhook.controller.act.report import Reporter
from webhook.controller.decide.pods import DEFAULT_TIMEOUT_SECONDS, format_time
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.decide.state import DEFAULT_BACKOFF_BASE_SECONDS, backoff_seconds
from webhook.controller.observe.books import Books, books_of
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved, Workloads
from webhook.controller.observe.workloads import SUSPEND_PATHS, SUSPENDED_ANNOTATION, WORKLOAD_RESOURCES, nested
from webhook.gangs import kinds
from webhook.gangs.model import Obj
from webhook.kube import PODS, Api, ApiError, Resource

DEFAULT_MAX_ATTEMPTS = 5
REFUSED_NODE_SECONDS = DEFAULT_TIMEOUT_SECONDS  # how long a node that lost a gang's pods is not planned again
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # a workload Kueue admits (and suspends) itself
# how long after gangkeeper suspended a workload a read that does not show it yet is a stale cache, not its
# user taking the workload back
SETTLE_SECONDS = 30
RETRY_SECONDS = 5.0  # how soon a resume that failed is tried again


class Requeuer:
    def __init__(
        self,
        api: Api,
        workloads: Workloads,
        reporter: Reporter,
        gang_objects: GangObjects,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        may_write: Callable[[], bool] = lambda: True,
        backoff_base_seconds: float = DEFAULT_BACKOFF_BASE_SECONDS,
    ) -> None:
        self.api, self.workloads, self.reporter, self.gang_objects = api, workloads, reporter, gang_objects
        self.max_attempts, self.may_write = max_attempts, may_write
        self.backoff_base_seconds = backoff_base_seconds
        # nodes a gang's pods lost to a steal or were refused by the scheduler (its record's `avoid`)
        self.store = reporter.store

    def time_out(self, gang: GangView, resolved: Resolved, decision: Decision, now: dt.datetime) -> None:
        first = self.reporter.last_state(gang.key) != GangState.TIMED_OUT  # events on transitions only
        if first:
            metrics.TIMEOUTS.inc()
        if not decision.evict:
            if first:
                self.reporter.event(
                    gang.raw[0],
                    "Warning",
                    "GangTimedOut",
                    f"gang {gang.name}: {decision.message}; bare pods are not evicted, delete and recreate them "
                    "to retry",
                )
            return
        if not decision.whole_gang and (
            not self.requeues_by_suspending(resolved) or ignores_disruptions(resolved.workload)
        ):
            # late newcomers of a running gang go back; its members stay. For a Job only when its
            # podFailurePolicy ignores evictions (DisruptionTarget): otherwise the late pod's eviction would
            # be counted as the Job's failure (a Job with backoffLimit 0 fails on it, as the real Job
            # controller showed), and the gang goes back whole by suspension instead
            self.evict(gang, decision.evict)
            self.reporter.event(
                resolved.workload or gang.raw[0],
                "Warning",
                "GangMembersRequeued",
                f"gang {gang.name}: {decision.message}; evicted {len(decision.evict)} to be recreated gated",
            )
            return
        self.requeue_whole(gang, resolved, decision, now)

    def requeues_by_suspending(self, resolved: Resolved) -> bool:
        """Whether the gang's owner is one whose controller counts a deleted pod that had not succeeded
        as a failure, spent against its backoffLimit (the Job controller, k8s.io/kubernetes
        pkg/controller/job/job_controller.go, and every kind built on Jobs): such a gang is never
        thinned by evictions, it is requeued whole by suspension, which counts no failure."""
        target = self._suspend_target(resolved.workload)
        return target is not None and str(target.get("kind", "")) in SUSPEND_PATHS

    def requeue_whole(self, gang: GangView, resolved: Resolved, decision: Decision, now: dt.datetime) -> None:
        workload = self._suspend_target(resolved.workload)
        if workload is not None and KUEUE_QUEUE_LABEL in ((workload.get("metadata") or {}).get("labels") or {}):
            # Kueue owns this workload's suspend field (its admission): gangkeeper neither suspends it
            # nor evicts its pods; Kueue's waitForPodsReady requeues a workload whose pods do not start
            decision.message = f"{decision.message}; left to Kueue (its waitForPodsReady requeues the workload)"
            self.reporter.event(workload, "Warning", "GangLeftToKueue", f"gang {gang.name}: {decision.message}")
            return
        books = self.gang_objects.books(gang.namespace, gang.name)
        kind = str((workload or {}).get("kind", ""))
        suspend = SUSPEND_PATHS.get(kind) if workload is not None else None
        if already_requeued(gang, books, self.max_attempts):
            # this release was requeued (or given up on) already: its pods are on their way out (the Job
            # controller deletes a suspended Job's pods, evictions take a grace period); counting it again
            # on every look until they are gone would spend the whole budget on one timeout
            if books.attempts > self.max_attempts:
                decision.state = GangState.GAVE_UP
                decision.message = f"{decision.message}; requeued {self.max_attempts} times, gave up"
            elif not suspend:
                self.evict(gang, decision.evict)  # again: an eviction refused for now (a PDB's 429) is retried
            return
        attempts = books.attempts + 1
        if attempts > self.max_attempts:
            decision.state = GangState.GAVE_UP
            how = "it stays suspended; set its suspend field to false" if suspend else "no more evictions; recreate it"
            decision.message = f"{decision.message}; requeued {self.max_attempts} times, giving up ({how} to retry)"
            self.reporter.save_books(gang, resolved, decision, Books(attempts), now)
            if workload is not None and suspend:
                self._patch_workload(workload, {**nested(suspend, True), **_marked(None)})
            return
        wait = backoff_seconds(attempts, self.backoff_base_seconds)
        not_before = now + dt.timedelta(seconds=wait)
        if workload is not None and suspend:
            # the books first: a workload suspended with no record of it would never be resumed
            if not self.reporter.save_books(gang, resolved, decision, Books(attempts, not_before, now), now):
                return
            if self._patch_workload(workload, {**nested(suspend, True), **_marked(format_time(now))}):
                self.reporter.event(
                    workload,
                    "Warning",
                    "GangRequeued",
                    f"gang {gang.name}: {decision.message}; suspended {kind} {workload['metadata'].get('name')} so "
                    f"its pods go without counting as failures; resumes after {wait:g}s (attempt {attempts} of "
                    f"{self.max_attempts})",
                )
            return
        if not self.reporter.save_books(gang, resolved, decision, Books(attempts, not_before), now):
            return
        self.evict(gang, decision.evict)
        self.reporter.event(
            workload or gang.raw[0],
            "Warning",
            "GangEvicted",
            f"gang {gang.name}: {decision.message}; evicted {len(decision.evict)} pods to retry "
            f"gated (attempt {attempts} of {self.max_attempts}, next after {wait:g}s)",
        )

    def _suspend_target(self, workload: Obj | None) -> Obj | None:
        """The object whose suspend field stops a gang: the workload itself, except a TrainJob's JobSet,
        whose suspend Kubeflow Trainer keeps in step with its TrainJob's (so the TrainJob is suspended)."""
        through = kinds.suspend_owner(workload)
        if workload is None or through is None:
            return workload
        try:
            owner = self.workloads.read(
                WORKLOAD_RESOURCES[through[0]], workload["metadata"].get("namespace"), through[1]
            )
        except ApiError as error:
            metrics.API_ERRORS.labels("get", str(error.status)).inc()
            return workload
        return owner or workload

    def evict(self, gang: GangView, names: list[str]) -> None:
        for pod_name in names:
            pod = next(p for p in gang.pods if p.name == pod_name)
            try:
                self.api.create(
                    PODS.path(pod.namespace, pod.name, "eviction"),
                    {
                        "apiVersion": "policy/v1",
                        "kind": "Eviction",
                        "metadata": {"name": pod.name, "namespace": pod.namespace},
                    },
                )
                metrics.EVICTIONS.inc()
            except ApiError as error:
                metrics.API_ERRORS.labels("evict", str(error.status)).inc()

    def resume_due(self, now: dt.datetime) -> float | None:
        """Resume the workloads gangkeeper suspended (its Gang books say so) once their backoff has passed.
        A workload whose user took gangkeeper's mark off, or resumed it, is theirs: the books let it go.
        Returns when the next backoff left ends (the moment to look again)."""
        pending: list[float] = []
        for gang_object in self.gang_objects.suspended():
            wait_until = self._resume_one(gang_object, now)
            if wait_until is not None:
                pending.append(wait_until)
        return min(pending, default=None)

    def _resume_one(self, gang_object: Obj, now: dt.datetime) -> float | None:
        """One suspended gang's workload resumed when due, or its books let go; when to look again."""
        books = books_of(gang_object)
        ref = (gang_object.get("spec") or {}).get("workload") or {}
        namespace = str((gang_object.get("metadata") or {}).get("namespace", ""))
        resource = self.workloads.workload_resource(str(ref.get("kind", "")))
        try:
            workload = self.workloads.read(resource, namespace, str(ref.get("name", ""))) if resource else None
        except ApiError as error:
            metrics.API_ERRORS.labels("get", str(error.status)).inc()
            return None
        target = self._suspend_target(workload)
        still_ours = target is not None and _suspended_by_gangkeeper(target)
        wait = _not_yet(books, still_ours, now)
        if wait is not None:
            return wait
        if not still_ours and target is not None:
            # letting the books go ends gangkeeper's hold for good: asked of the API server itself, not
            # of a watch cache that may be behind (a cache that missed the suspend reads as the user's
            # choice, and the workload would stay suspended for ever)
            try:
                target = self._suspend_target(self.workloads.fresh(resource, namespace, str(ref.get("name", ""))))
            except ApiError as error:
                metrics.API_ERRORS.labels("get", str(error.status)).inc()
                return now.timestamp() + RETRY_SECONDS
            still_ours = target is not None and _suspended_by_gangkeeper(target)
        if target is not None and still_ours and not self._resume(target):
            return now.timestamp() + RETRY_SECONDS  # refused or lost (a webhook's timeout, a 429): soon again
        self.gang_objects.write(gang_object, {"suspendedAt": None})
        return None

    def _resume(self, target: Obj) -> bool:
        kind = str(target.get("kind", ""))
        if not self._patch_workload(target, {**nested(SUSPEND_PATHS[kind], False), **_marked(None)}):
            return False
        name = (target.get("metadata") or {}).get("name")
        self.reporter.event(
            target, "Normal", "GangResumed", f"{kind} {name} resumed after its backoff; its pods come back gated"
        )
        return True

    def _patch_workload(self, workload: Obj, patch: Mapping[str, Any]) -> bool:
        meta = workload.get("metadata") or {}
        default = WORKLOAD_RESOURCES.get(str(workload.get("kind")))
        if default is None:
            return False
        resource = Resource(str(workload.get("apiVersion") or default.group_version), default.plural)
        try:
            self.api.merge_patch(resource.path(meta.get("namespace"), meta.get("name")), patch)
        except ApiError as error:
            metrics.API_ERRORS.labels("patch", str(error.status)).inc()
            return False
        return True

    # --- group objects for the other backends -----------------------------------------------------

    def avoid_ends(self, gang_key: str) -> dt.datetime | None:
        """When the first node this gang avoids may be planned for it again."""
        record = self.store.get(gang_key)
        return min(record.avoid.values(), default=None) if record is not None and record.avoid else None

    def avoided(self, gang_key: str, now: dt.datetime) -> frozenset[str]:
        record = self.store.get(gang_key)
        if record is None or not record.avoid:
            return frozenset()
        record.avoid = {node: until for node, until in record.avoid.items() if until > now} or None
        return frozenset(record.avoid or ())

    def repair(self, gang: GangView, resolved: Resolved, decision: Decision, now: dt.datetime) -> None:
        """Pods pinned to a node they can no longer bind on go now, not at the timeout: their owner
        recreates them gated, and the next pass places them around the members that stay. The nodes
        the scheduler refused them on are not planned for this gang again for a while (it may disagree
        for a reason placement does not see). A node whose room pods bound since took is not: placement sees
        that room taken, and avoiding it kept a gang from the very node its placeholders then held."""
        until = now + dt.timedelta(seconds=REFUSED_NODE_SECONDS)
        if decision.refused_on:
            record = self.store.record(gang.key)
            record.avoid = {**(record.avoid or {}), **dict.fromkeys(decision.refused_on, until)}
        if not self.may_write():
            return
        if decision.evict and self.requeues_by_suspending(resolved):
            # a replaced pod would count as the Job's failure: the whole gang goes back instead
            self.requeue_whole(gang, resolved, decision, now)
            return
        if decision.evict:
            self.evict(gang, decision.evict)
            metrics.REPAIRS.inc(len(decision.evict))
        message = f"gang {gang.name}: {decision.message}"
        self.reporter.event(resolved.workload or gang.raw[0], "Warning", "GangMembersReplaced", message)


def ignores_disruptions(workload: Obj | None) -> bool:
    """Whether a Job's podFailurePolicy ignores pods that fail with a DisruptionTarget condition (what the
    Eviction API sets): then the Job controller counts gangkeeper's eviction of a pod as no failure
    (pkg/controller/job/pod_failure_policy.go)."""
    if workload is None or workload.get("kind") != "Job":
        return False
    rules = ((workload.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or []
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, dict) or rule.get("action") != "Ignore":
            continue
        for pattern in rule.get("onPodConditions") or []:
            disruption = isinstance(pattern, dict) and pattern.get("type") == "DisruptionTarget"
            if disruption and pattern.get("status", "True") == "True":
                return True
    return False


def _marked(when: str | None) -> Obj:
    """gangkeeper's mark on a workload it suspended (None takes it off): it tells people why, and a user
    who removes it keeps the workload suspended. Never the controller's state: that is the Gang's."""
    return {"metadata": {"annotations": {SUSPENDED_ANNOTATION: when}}}


def _get(obj: Obj, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None  # type: ignore[assignment]
    return obj


def already_requeued(gang: GangView, books: Books, max_attempts: int) -> bool:
    """Whether the gang's current release was requeued already: a backoff set after its pods were released
    (a new release comes only once the backoff has passed), or the attempt budget spent."""
    released = [p.released_at for p in gang.pods if p.released_at is not None and not p.terminal]
    if not released:
        return False
    if books.attempts > max_attempts:
        return True
    return books.not_before is not None and books.not_before > max(released)


def _suspended_by_gangkeeper(target: Obj) -> bool:
    """Suspended, with gangkeeper's mark on it: a suspension the user did not take back."""
    kind = str(target.get("kind", ""))
    annotations = (target.get("metadata") or {}).get("annotations") or {}
    return kind in SUSPEND_PATHS and SUSPENDED_ANNOTATION in annotations and _get(target, SUSPEND_PATHS[kind]) is True


def _not_yet(books: Books, still_ours: bool, now: dt.datetime) -> float | None:
    """When to look at a suspended gang's workload again, if nothing is to be done now: its backoff
    not over, or a workload that no longer looks suspended read too soon after the suspend."""
    if still_ours and books.not_before is not None and now < books.not_before:
        return books.not_before.timestamp()
    settled = books.suspended_at is not None and (now - books.suspended_at).total_seconds() >= SETTLE_SECONDS
    if not still_ours and not settled and books.suspended_at is not None:
        # the books are written before the suspend: a workload read from a cache that has not seen
        # it yet is not one its user took back (found on the real tier: the books let go, the Job
        # stayed suspended for ever)
        return books.suspended_at.timestamp() + SETTLE_SECONDS
    return None
