"""One reconciliation pass over every gang: group objects, and release of gated gangs.

Everything is read from the cluster each pass (from the informers' caches when they run), so a
controller killed at any moment and started again picks up exactly where the cluster is.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from webhook import backends, contract, gangs
from webhook.backends import NamespaceInfo
from webhook.controller import metrics, placement
from webhook.controller.clockguard import ClockGuard, no_guard
from webhook.controller.cluster import ClusterIndex, GangView
from webhook.controller.events import EventRecorder
from webhook.controller.gangobject import GANGS, Books, GangObjects, books_of, desired_object, desired_status
from webhook.controller.informer import Informer
from webhook.controller.kube import NODES, PODS, Api, ApiError, Resource, typed_items
from webhook.controller.placement import Eligibility, HostPort, Member, Node, Shape
from webhook.controller.queue import DEFAULT_DEPTH, DEFAULT_POLICY, Ending, Policy, QueuePass, take_turn
from webhook.controller.state import (
    DEFAULT_TIMEOUT_SECONDS,
    Decision,
    GangSpec,
    GangState,
    PodView,
    backoff_seconds,
    decide,
    format_time,
    release_patch,
)
from webhook.controller.workloads import (
    OTHER_VERSIONS,
    SUSPEND_PATHS,
    SUSPENDED_ANNOTATION,
    WORKLOAD_RESOURCES,
    group_resource,
    nested,
)
from webhook.gangs.model import Gang, Obj

log = logging.getLogger("gangkeeper.controller")

DEFAULT_MAX_ATTEMPTS = 5
# replicas that serve: spread over nodes so one node's failure takes few of them (batch gangs pack)
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # a workload Kueue admits (and suspends) itself
# native generations whose group specs cannot be updated (k8s.io/api scheduling v1alpha1 Workload.spec,
# v1alpha2 `+k8s:immutable`; a PodGroup cannot be replaced either while pods name it: its
# podgroup-protection finalizer holds the deletion); v1beta1 lets minCount change
IMMUTABLE_GROUP_SPECS = frozenset({"scheduling.k8s.io/v1alpha1", "scheduling.k8s.io/v1alpha2"})
SERVING_KINDS = frozenset({"StatefulSet", "Deployment", "LeaderWorkerSet"})
REFUSED_NODE_SECONDS = DEFAULT_TIMEOUT_SECONDS  # how long a node that lost a gang's pods is not planned again


def _adjust(free: dict[str, dict[str, int]], units: Mapping[str, Mapping[str, int]], sign: int) -> None:
    """Add (or take) units to a pass's free capacity. A node's figures are replaced, never changed in
    place: the pass shares them with the cluster index until it writes."""
    for node, amounts in units.items():
        node_free = dict(free.get(node) or {})
        for resource, amount in amounts.items():
            node_free[resource] = node_free.get(resource, 0) + sign * amount
        free[node] = node_free


def expected_seconds(workload: Obj | None) -> float | None:
    """How long the workload runs once started, when it says: `gangkeeper.io/expected-seconds`, else a
    Job's activeDeadlineSeconds (the most it may run)."""
    meta = (workload or {}).get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(contract.EXPECTED_SECONDS_ANNOTATION)
    if raw is None and (workload or {}).get("kind") == "Job":
        raw = ((workload or {}).get("spec") or {}).get("activeDeadlineSeconds")
    try:
        value = float(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and value > 0 else None


class Source(Protocol):
    def pods(self) -> list[Obj]: ...
    def nodes(self) -> list[Obj]: ...


@runtime_checkable
class ChangeSource(Source, Protocol):
    """A source that also says what changed since it was last asked (the informers)."""

    def changes(self) -> tuple[Mapping[str, Obj | None], Mapping[str, Obj | None]]: ...


@dataclass
class Listing:
    """A source that lists on every pass: simple, and what `gangkeeper explain` uses."""

    api: Api

    def pods(self) -> list[Obj]:
        return typed_items(self.api.list(PODS.path()))

    def nodes(self) -> list[Obj]:
        return typed_items(self.api.list(NODES.path()))


def backend_of(pod: Obj) -> str:
    """Which mechanism the webhook stamped on this pod."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    spec = pod.get("spec") or {}
    if contract.VOLCANO_GROUP_ANNOTATION in annotations:
        return "volcano"
    if contract.COSCHEDULING_GROUP_LABEL in labels:
        return "coscheduling"
    if spec.get("workloadRef"):
        return "native-1.35"
    if spec.get("schedulingGroup"):
        return "native"
    return "gate"


@dataclass
class Snapshot:
    """What one pass works on: nodes, a copy of the free capacity it may promise from, and the gangs."""

    nodes: list[Node]
    free: dict[str, dict[str, int]]
    hostnames: Mapping[str, str]
    gangs: dict[str, GangView]
    stray_gated: list[tuple[PodView, Obj]]
    ports: dict[str, Counter[HostPort]]
    eligibility: Eligibility
    index: ClusterIndex
    grown: set[str] = field(default_factory=set)
    _relaxed: dict[int, Mapping[str, Mapping[str, int]] | None] = field(default_factory=dict)

    def without_lower_priority(self, priority: int) -> Mapping[str, Mapping[str, int]] | None:
        if priority not in self._relaxed:
            self._relaxed[priority] = self.index.free_without_priorities_below(priority)
        return self._relaxed[priority]


@dataclass
class _Waiting:
    """A waiting gang's last decision and what it depended on: reused until one of those changes."""

    version: int
    resolved: tuple[object, ...]
    nodes_epoch: int
    avoid: frozenset[str]
    decision: Decision
    context: tuple[object, ...]
    # per shape of its gated pods: how many it needs, and how many fit on each node ("": the total),
    # updated as nodes gain room; placed again only once some shape could have enough
    capacity: dict[Shape, tuple[int, dict[str, int]]]


def _resolved_key(resolved: Resolved) -> tuple[object, ...]:
    """What a decision took from the workload: the periodic resync reads it again, which must not count
    as a change unless it is one."""
    meta = (resolved.workload or {}).get("metadata") or {}
    return (resolved.spec, resolved.problem, resolved.gone, meta.get("uid"), meta.get("resourceVersion"))


def _capacity(
    gang: GangView, eligibility: Eligibility, room: Mapping[str, Mapping[str, int]]
) -> dict[Shape, tuple[int, dict[str, int]]]:
    needed: dict[Shape, int] = {}
    for pod in gang.pods:
        if pod.gated and not pod.terminal:
            needed[pod.shape] = needed.get(pod.shape, 0) + 1
    found = {}
    for shape, count in needed.items():
        fits = {}
        for node in eligibility(shape)[0]:
            node_room = room.get(node.name)
            if node_room is not None and (fit := placement.fit_count(shape, node_room)) > 0:
                fits[node.name] = fit
        fits[""] = sum(fits.values())
        found[shape] = (count, fits)
    return found


@dataclass(eq=False)
class Resolved:
    spec: GangSpec | None
    gang: Gang | None
    workload: Obj | None
    problem: str = ""
    gone: bool = False  # the workload was deleted (404): nothing will ever size or release this gang


class Controller:
    def __init__(
        self,
        api: Api,
        source: Source | None = None,
        native_version: str = "1.37",
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        component: str = "gangkeeper-controller",
        release_concurrency: int = 16,
        orphan_every: int = 30,
        resync_every: int = 10,
        informers: Mapping[tuple[str, str], Informer] | None = None,
        may_write: Callable[[], bool] = lambda: True,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        queue_policy: Policy = DEFAULT_POLICY,
        queue_depth: int = DEFAULT_DEPTH,
        opted_out: Callable[[str], bool] = lambda namespace: False,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.api, self.source = api, source or Listing(api)
        # a namespace that left gangkeeper (its gangkeeper.io/enabled label gone): its gates are lifted
        self.opted_out = opted_out
        self.native_version, self.clock, self.component = native_version, clock, component
        self.last_state: dict[str, str] = {}
        self._refusals: dict[str, str] = {}  # gang key -> why the API refused its group object
        self.release_concurrency = release_concurrency
        self.passes, self.orphan_every, self.resync_every = 0, orphan_every, resync_every
        self._seen: dict[str, tuple[tuple[tuple[str, str], ...], Resolved]] = {}
        self.informers: dict[tuple[str, str], Informer] = dict(informers or {})
        self.recorder = EventRecorder(api, component, clock)
        self.decisions: dict[str, Decision] = {}
        # leadership, asked again before each batch of writes: a leader that lost its lease mid-pass
        # must not release a gang another replica is deciding about
        self.may_write = may_write
        self.max_attempts = max_attempts
        self.queue_policy = Policy(queue_policy)
        self.queue_depth = queue_depth
        # the Gang objects: what people see of each gang, and the controller's books (attempts, backoff,
        # suspensions), read back from there and never from an annotation a tenant could write
        self.gang_objects = GangObjects(api, lambda: self.informers.get((GANGS.group_version, GANGS.plural)), may_write)
        # timeouts are judged by a clock a wall-clock jump cannot move forward (none in tests that drive it)
        self.judge = ClockGuard(monotonic).judge if monotonic is not None else no_guard
        self.judged_now: dt.datetime | None = None
        # a gang whose reconciliation raised: (failures in a row, not before) — it alone waits
        self._failing: dict[str, tuple[int, dt.datetime]] = {}
        # capacity kept for members a released gang will create later (Spark executors): gang -> when, node -> units
        self._reserved: dict[str, tuple[dt.datetime, dict[str, dict[str, int]]]] = {}
        self.index = ClusterIndex()
        self._waiting: dict[str, _Waiting] = {}
        # nodes a gang's pods lost to a steal or were refused by the scheduler: not planned again for a while
        self._avoid: dict[str, dict[str, dt.datetime]] = {}
        self._order: dict[str, tuple[int, tuple[int, dt.datetime]]] = {}  # gang -> (version, queue key)
        self.replaced = 0  # decisions re-placed in the last pass (the others were reused)

    # --- the pass -------------------------------------------------------------------------------
    def reconcile_once(self) -> dict[str, Decision]:
        with metrics.PASS_SECONDS.time():
            return self._reconcile(self.clock())

    def _reconcile(self, now: dt.datetime) -> dict[str, Decision]:
        self.judged_now = self.judge(now)
        if self.may_write():
            self.resume_due(now)
        snapshot = self.snapshot()
        workloads: dict[tuple[str, str, str], Obj | None] = {}
        decisions: dict[str, Decision] = {}
        if self.may_write():
            # a gate on a pod that is in no gang (its label removed, a stray template) holds it forever
            self.lift_gates(snapshot.stray_gated, "it belongs to no gang", now)
        resync = self.passes % self.resync_every == 0
        seen: dict[str, tuple[tuple[tuple[str, str], ...], Resolved]] = {}
        self._apply_reservations(snapshot, now)
        waiting, self._waiting = self._waiting, {}
        self.replaced = 0
        queue = QueuePass(
            self.queue_policy,
            snapshot.nodes,
            snapshot.free,
            lambda: self.endings(snapshot, seen, workloads),
            now.timestamp(),
            snapshot.eligibility,
            self.queue_depth,
        )
        # the queue: higher priority first, then whoever waited longest
        for gang in sorted(snapshot.gangs.values(), key=lambda g: self.queue_key(g, now)):
            # the workload is read, and the group object checked, only when the gang's pods changed
            # or on the periodic resync: a quiet cluster costs no API calls per pass
            fingerprint = (("pods", str(self.index.gang_versions[gang.key])), *self.related_versions(gang))
            cached = self._seen.get(gang.key)
            fresh = resync or cached is None or cached[0] != fingerprint
            resolved = self.resolve(gang, workloads) if fresh or cached is None else cached[1]
            seen[gang.key] = (fingerprint, resolved)
            backend = backend_of(gang.raw[0])
            switched = {backend_of(raw) for raw in gang.raw} - {"gate"}
            gated = [(v, raw) for v, raw in zip(gang.pods, gang.raw, strict=True) if v.gated]
            if self.opted_out(gang.namespace):
                # the namespace left gangkeeper: its pods are scheduled as any pod, nothing waits for a
                # release (the opt-out the README gives to unblock a namespace)
                if gated and self.may_write():
                    self.lift_gates(gated, f"namespace {gang.namespace} is no longer opted in", now)
                continue
            if switched and gated and self.may_write():
                # the namespace moved this gang to another mechanism: its new members will never join
                # the gated ones, who would otherwise wait for a gang that cannot fill
                self.lift_gates(gated, f"the gang's newer pods use {', '.join(sorted(switched))}, not the gate", now)
                continue
            if self._held_back(gang.key, now):
                continue
            try:
                if backend != "gate":
                    if fresh and self.may_write():
                        self.sync_group_objects(gang, resolved, backend)
                        self.report_other(gang, resolved, backend, now)
                    continue
                if resolved.gone and self.may_write():
                    self.lift_gates(gated, f"its gang's workload is gone ({resolved.problem})", now)
                decisions[gang.key] = self.step(gang, resolved, snapshot, now, waiting.get(gang.key), queue)
                self._failing.pop(gang.key, None)
            except Exception:  # one gang's failure is that gang's: the others are still reconciled
                self._failed(gang.key, now)
        self._seen = seen
        self.publish(decisions)
        self.decisions = decisions
        self.passes += 1
        if (self.passes % self.orphan_every == 1 or self.orphan_every == 1) and self.may_write():
            live = {(g.namespace, g.name) for g in snapshot.gangs.values()}
            deleted = orphan_groups(self.api, live, [*self.group_resources(), GANGS])
            if deleted:
                metrics.GROUP_OBJECTS.labels("delete").inc(len(deleted))
                log.info("deleted orphaned group objects", extra={"objects": deleted})
        return decisions

    def _held_back(self, key: str, now: dt.datetime) -> bool:
        failing = self._failing.get(key)
        return failing is not None and now < failing[1]

    def _failed(self, key: str, now: dt.datetime) -> None:
        log.exception("gang reconciliation failed", extra={"gang": key})
        metrics.GANG_FAILURES.inc()
        count = self._failing.get(key, (0, now))[0] + 1
        self._failing[key] = (count, now + dt.timedelta(seconds=min(300, 2 ** min(count, 9))))

    def queue_key(self, gang: GangView, now: dt.datetime) -> tuple[int, dt.datetime]:
        """Where a gang stands in the queue: its priority (the highest of its pods'), then its arrival
        (its oldest pod's creation), remembered until the gang's pods change."""
        version = self.index.gang_versions[gang.key]
        cached = self._order.get(gang.key)
        if cached is None or cached[0] != version:
            live = [p for p in gang.pods if not p.terminal] or gang.pods
            key = (-max(p.priority for p in live), min((p.created_at or now for p in live), default=now))
            cached = self._order[gang.key] = (version, key)
        return cached[1]

    def endings(
        self,
        snapshot: Snapshot,
        seen: Mapping[str, tuple[tuple[tuple[str, str], ...], Resolved]],
        workloads: dict[tuple[str, str, str], Obj | None],
    ) -> list[Ending]:
        """When the capacity held by running gangs returns: from each released pod's release time plus
        its workload's expected run time (gangs whose workload does not say are never expected to end)."""
        found = []
        for key, gang in snapshot.gangs.items():
            if not any(p.holds_node and p.released_at for p in gang.pods):
                continue
            known = seen.get(key) or self._seen.get(key)
            resolved = known[1] if known is not None else self.resolve(gang, workloads)
            spec = resolved.spec
            if spec is None or spec.expected_seconds is None:
                continue
            for pod in gang.pods:
                node = pod.holds_node
                if node is not None and pod.released_at is not None:
                    found.append(Ending(pod.released_at.timestamp() + spec.expected_seconds, node, pod.units))
        return found

    def related_versions(self, gang: GangView) -> list[tuple[str, str]]:
        """Versions of the watched workload and group object of a gang: a scale-up or a deleted
        PodGroup changes them, so the gang is looked at again at once, not at the next resync."""
        stamp = gang.pods[0].annotations.get(contract.WORKLOAD_ANNOTATION, "")
        kind, _, rest = stamp.partition("/")
        versions = [
            ("workload", self.watched_version(self.workload_resource(kind), gang.namespace, rest.split("/")[0]))
        ]
        for resource in self.group_resources():
            versions.append((resource.group_version, self.watched_version(resource, gang.namespace, gang.name)))
        return versions

    def group_resources(self) -> list[Resource]:
        from webhook.backends.native import GENERATIONS

        native = f"scheduling.k8s.io/{GENERATIONS[self.native_version].version}"
        return [
            group_resource("scheduling.volcano.sh/v1beta1", "PodGroup"),
            group_resource("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
            group_resource(native, "PodGroup"),
            group_resource(native, "Workload"),
        ]

    def snapshot(self) -> Snapshot:
        """The cluster as this pass sees it: the index brought up to date (by the informers' changes, or by
        comparing a full listing), and a copy of the free capacity for the pass to promise from."""
        index = self.index
        if isinstance(self.source, ChangeSource):
            pod_changes, node_changes = self.source.changes()
            index.apply_nodes(node_changes)
            index.apply_pods(pod_changes)
        else:
            index.replace_nodes(self.source.nodes())
            index.replace_pods(self.source.pods())
        live = index.gangs()
        for key in self._order.keys() - live.keys():
            del self._order[key]
        return Snapshot(
            nodes=index.node_list(),
            # the index's figures, shared: a pass replaces a node's figures when it promises capacity
            free=dict(index.free),
            hostnames=index.hostnames(),
            gangs=live,
            stray_gated=list(index.stray_gated.values()),
            ports=dict(index.ports),
            eligibility=index.eligibility(),
            index=index,
            grown=index.take_grown(),
        )

    def read(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        """From the watch cache of that resource when there is one, else from the API; None: not found."""
        informer = self.informers.get((resource.group_version, resource.plural))
        if informer is not None and informer.synced.is_set():
            return informer.get(namespace, name)
        try:
            return dict(self.api.get(resource.path(namespace, name)))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def workload_resource(self, kind: str) -> Resource | None:
        """Where a workload kind is read: the version this cluster serves and we watch, else the usual one."""
        default = WORKLOAD_RESOURCES.get(kind)
        for candidate in OTHER_VERSIONS.get(kind, ()):
            if (candidate.group_version, candidate.plural) in self.informers:
                return candidate
        return default

    def watched_version(self, resource: Resource | None, namespace: str, name: str) -> str:
        """resourceVersion of a watched object ("" when unwatched or absent), for change detection."""
        informer = self.informers.get((resource.group_version, resource.plural)) if resource else None
        obj = informer.get(namespace, name) if informer is not None else None
        return str(((obj or {}).get("metadata") or {}).get("resourceVersion", "")) if informer else ""

    def resolve(self, gang: GangView, cache: dict[tuple[str, str, str], Obj | None]) -> Resolved:
        """The gang's size and timeout, from its workload (or from the pods of a bare pod group)."""
        first = gang.pods[0]
        stamp = first.annotations.get(contract.WORKLOAD_ANNOTATION, "")
        kind, _, rest = stamp.partition("/")
        workload_name = rest.split("/")[0]
        if kind == "Pod" or (not stamp and contract.GROUP_NAME_LABEL in first.labels):
            plan = gangs.analyze(gang.raw[0])
            found = next((g for g in plan.gangs if g.name == gang.name), None)
            if found is None:
                reason = str(plan.errors[0]) if plan.errors else "the pod group has no valid gangkeeper.io/group-size"
                return Resolved(None, None, None, reason)
            return Resolved(self._spec(found, evictable=False), found, None)
        resource = self.workload_resource(kind)
        if resource is None or not workload_name:
            return Resolved(None, None, None, f"unknown workload {stamp!r}")
        key = (kind, gang.namespace, workload_name)
        unreadable = False
        if key not in cache:
            try:
                cache[key] = self.read(resource, gang.namespace, workload_name)
            except ApiError as error:
                metrics.API_ERRORS.labels("get", str(error.status)).inc()
                cache[key], unreadable = None, True
        workload = cache[key]
        if workload is None:
            if unreadable:
                return Resolved(None, None, None, f"{kind} {workload_name} cannot be read")
            return Resolved(None, None, None, f"{kind} {workload_name} does not exist", gone=True)
        plan = gangs.analyze(workload)
        found = next((g for g in plan.gangs if g.name == gang.name), None)
        if found is None:
            why = f": {plan.errors[0]}" if plan.errors else ""
            return Resolved(None, None, workload, f"{kind} {workload_name} has no gang {gang.name}{why}")
        return Resolved(self._spec(found, evictable=True, workload=workload), found, workload)

    @staticmethod
    def _spec(gang: Gang, evictable: bool, workload: Obj | None = None) -> GangSpec:
        later = tuple(
            placement.Shape.from_requests(members.requests) for members in gang.later for _ in range(members.count)
        )
        annotations = ((workload or {}).get("metadata") or {}).get("annotations") or {}
        asked = annotations.get(contract.PLACEMENT_ANNOTATION)
        spread = asked == "spread" if asked in ("pack", "spread") else gang.id.workload_kind in SERVING_KINDS
        return GangSpec(
            gang.min_member,
            gang.timeout_seconds or DEFAULT_TIMEOUT_SECONDS,
            evictable,
            later,
            spread,
            expected_seconds(workload),
        )

    # --- gate backend -----------------------------------------------------------------------------
    def step(
        self,
        gang: GangView,
        resolved: Resolved,
        snapshot: Snapshot,
        now: dt.datetime,
        waiting: _Waiting | None,
        queue: QueuePass,
    ) -> Decision:
        free = snapshot.free
        held = self._reserved.get(gang.key)
        if held is not None:  # what was kept for this gang's members to come is theirs to use
            _adjust(free, held[1], +1)
        avoid = self._avoided(gang.key, now)
        expected = resolved.spec.expected_seconds if resolved.spec is not None else None
        room = queue.room_for(now.timestamp() + expected if expected is not None else None)
        context = (queue.context(gang.key), room is free)
        if (
            waiting is not None
            and waiting.context == context
            and self._still_valid(waiting, gang, resolved, snapshot, avoid, room)
        ):
            decision = waiting.decision
        else:
            decision = self.decide_for(gang, resolved, snapshot, now, avoid, room=None if room is free else room)
            self.replaced += 1
        if held is not None:
            _adjust(free, held[1], -1)
        # nothing in a waiting decision depends on the clock while no released pod waits to bind: reuse it
        # until the gang, its workload, the nodes, the queue ahead, or the room it could use change
        if decision.state in (
            GangState.WAITING_FOR_CAPACITY,
            GangState.NEVER_FITS,
            GangState.WAITING_FOR_MEMBERS,
        ) and not any(not p.gated and not p.terminal and not p.node_name for p in gang.pods):
            if waiting is None or waiting.decision is not decision:
                waiting = _Waiting(
                    self.index.gang_versions[gang.key],
                    _resolved_key(resolved),
                    self.index.nodes_epoch,
                    avoid,
                    decision,
                    context,
                    _capacity(gang, snapshot.eligibility, room)
                    if decision.state == GangState.WAITING_FOR_CAPACITY
                    else {},
                )
            self._waiting[gang.key] = waiting
        members = [Member(p.name, p.shape) for p in gang.pods if p.gated and not p.terminal]
        spread = resolved.spec.spread if resolved.spec is not None else False
        decision = take_turn(queue, gang.key, decision, members, spread, room is not free, expected)
        if decision.state == GangState.RELEASE:
            if decision.reserve:
                self._reserved[gang.key] = (now, decision.reserve)
                _adjust(free, decision.reserve, -1)
            self.release(gang, decision, snapshot, now)
            queue.released()
        elif decision.state == GangState.TIMED_OUT:
            self.time_out(gang, resolved, decision, now)
        elif decision.state == GangState.REPAIR:
            self.repair(gang, resolved, decision, now)
        self.transition(gang, resolved, decision, now)
        return decision

    def _still_valid(
        self,
        waiting: _Waiting,
        gang: GangView,
        resolved: Resolved,
        snapshot: Snapshot,
        avoid: frozenset[str],
        room: Mapping[str, Mapping[str, int]],
    ) -> bool:
        if (
            waiting.version != self.index.gang_versions[gang.key]
            or waiting.resolved != _resolved_key(resolved)
            or waiting.nodes_epoch != self.index.nodes_epoch
            or waiting.avoid != avoid
        ):
            return False
        if waiting.decision.state != GangState.WAITING_FOR_CAPACITY:
            return True  # waiting for members, or too large for the cluster: only the above changes that
        # capacity only shrank, or grew too little where its pods could go: the gang still does not fit
        for shape, (needed, fits) in waiting.capacity.items():
            eligible = snapshot.eligibility.names(shape)
            total = fits.pop("", 0)
            for node in snapshot.grown:
                node_room = room.get(node)
                if node_room is not None and node in eligible:
                    now_fits = placement.fit_count(shape, node_room)
                    total += now_fits - fits.get(node, 0)
                    fits[node] = now_fits
            fits[""] = total
            if total >= needed:
                return False
        return True

    def _avoided(self, gang_key: str, now: dt.datetime) -> frozenset[str]:
        nodes = self._avoid.get(gang_key)
        if not nodes:
            return frozenset()
        for node, until in list(nodes.items()):
            if until <= now:
                del nodes[node]
        if not nodes:
            del self._avoid[gang_key]
        return frozenset(nodes)

    def _apply_reservations(self, snapshot: Snapshot, now: dt.datetime) -> None:
        """Take the capacity kept for members to come out of what other gangs may use. A reservation ends
        when those members are released (they then hold capacity as pods), when the gang is gone, or after the
        default timeout (a driver that never asks for its executors must not hold them forever)."""
        for key, (since, reserve) in list(self._reserved.items()):
            gang = snapshot.gangs.get(key)
            # members beyond the first that were released: from then on they hold capacity as pods
            arrived = sum(1 for view in gang.pods if not view.terminal and not view.gated) - 1 if gang else 0
            expected = sum(units.get(placement.PODS, 0) for units in reserve.values())  # one `pods` each
            expired = (now - since).total_seconds() > DEFAULT_TIMEOUT_SECONDS
            if gang is None or expired or arrived >= expected:
                del self._reserved[key]
                snapshot.grown.update(reserve)  # room again for the gangs that wait
                continue
            _adjust(snapshot.free, reserve, -1)

    def decide_for(
        self,
        gang: GangView,
        resolved: Resolved,
        snapshot: Snapshot,
        now: dt.datetime,
        avoid: frozenset[str] = frozenset(),
        room: Mapping[str, Mapping[str, int]] | None = None,
    ) -> Decision:
        """The decision for one gang, with its workload's backoff: what the pass acts on and what
        `gangkeeper explain` prints."""
        if resolved.spec is None:
            return Decision(GangState.UNKNOWN, f"cannot size the gang: {resolved.problem}", present=len(gang.pods))
        not_before = self.gang_objects.books(gang.namespace, gang.name).not_before
        nodes = snapshot.nodes
        eligibility: Eligibility | None = snapshot.eligibility
        if avoid:
            nodes, eligibility = [n for n in nodes if n.name not in avoid], None
        judged = self.judged_now if self.judged_now is not None and self.judged_now <= now else now
        return decide(
            gang.pods,
            resolved.spec,
            nodes,
            snapshot.free,
            judged,
            not_before,
            used_ports=snapshot.ports,
            eligibility=eligibility,
            without_lower_priority=snapshot.without_lower_priority,
            room=room,
            ever=snapshot.index.ever if not avoid else None,
        )

    def lift_gates(self, pods: list[tuple[PodView, Obj]], why: str, now: dt.datetime) -> None:
        """Take gangkeeper's gate off pods that are no live gate gang's members, so they are scheduled
        like any pod instead of waiting for a release that will never come."""
        for view, raw in pods:
            gates = (raw.get("spec") or {}).get("schedulingGates") or []
            remaining = [dict(g) for g in gates if g.get("name") != contract.GATE]
            patch = {
                "metadata": {"resourceVersion": view.resource_version},
                "spec": {"schedulingGates": remaining or None},
            }
            try:
                self.api.merge_patch(PODS.path(view.namespace, view.name), patch)
            except ApiError as error:
                metrics.API_ERRORS.labels("patch", str(error.status)).inc()
                continue
            self.event(raw, "Normal", "GateLifted", f"gangkeeper's gate lifted: {why}")

    def release(self, gang: GangView, decision: Decision, snapshot: Snapshot, now: dt.datetime) -> None:
        by_name = {p.name: (p, raw) for p, raw in zip(gang.pods, gang.raw, strict=True)}
        patches: list[tuple[PodView, Obj]] = []
        free, ports = snapshot.free, snapshot.ports
        for pod_name, node in decision.release.items():
            view, raw = by_name[pod_name]
            _adjust(free, {node: view.units}, -1)  # promised before any PATCH: no other gang takes it
            if view.shape.host_ports:
                ports[node] = Counter(ports.get(node) or {}) + Counter(view.shape.host_ports)
            gates = (raw.get("spec") or {}).get("schedulingGates") or []
            # a pin would promise what placement did not check (pod affinity, spread): leave those to the
            # scheduler, with the planned node's capacity reserved until the pod binds or times out
            pin = None if decision.unmodelled else snapshot.hostnames.get(node, node)
            patches.append((view, release_patch(view, pin, now, gates, planned=node)))
        if not self.may_write():
            log.warning("not the leader any more: release abandoned", extra={"gang": gang.key})
            return
        with self.recorder.deferred():
            if len(patches) <= 2:
                for item in patches:
                    self._send_release(item)
            else:  # the decision is made; the PATCHes are independent, so they go side by side
                with ThreadPoolExecutor(max_workers=min(self.release_concurrency, len(patches))) as pool:
                    list(pool.map(self._send_release, patches))
        created = [p.created_at for p in gang.pods if p.created_at]
        if created:
            metrics.RELEASE_LATENCY.observe(max(0.0, (now - max(created)).total_seconds()))
        if decision.unmodelled:
            self.event(
                gang.raw[0],
                "Warning",
                "UnmodelledConstraints",
                f"gang {gang.name} released without a check of {', '.join(decision.unmodelled)}; "
                "the scheduler may still leave some pods pending",
            )

    def _send_release(self, item: tuple[PodView, Obj]) -> None:
        view, patch = item
        try:
            self.api.merge_patch(PODS.path(view.namespace, view.name), patch)
        except ApiError as error:
            # 409: the pod changed since we read it; 404: it is gone. The next pass sees the truth.
            metrics.API_ERRORS.labels("patch", str(error.status)).inc()
            log.warning("release patch failed", extra={"pod": view.key, "status": error.status})

    def repair(self, gang: GangView, resolved: Resolved, decision: Decision, now: dt.datetime) -> None:
        """Pods pinned to a node they can no longer bind on go now, not at the timeout: their owner
        recreates them gated, and the next pass places them around the members that stay. The nodes
        they lost are not planned for this gang again for a while (the scheduler may disagree for a
        reason placement does not see)."""
        lost = {p.pinned_node for p in gang.pods if p.name in decision.evict and p.pinned_node}
        until = now + dt.timedelta(seconds=REFUSED_NODE_SECONDS)
        self._avoid.setdefault(gang.key, {}).update({node: until for node in lost})
        if not self.may_write():
            return
        if decision.evict and self._requeues_by_suspending(resolved):
            # a replaced pod would count as the Job's failure: the whole gang goes back instead
            self.requeue_whole(gang, resolved, decision, now)
            return
        if decision.evict:
            self._evict(gang, decision.evict)
            metrics.REPAIRS.inc(len(decision.evict))
        message = f"gang {gang.name}: {decision.message}"
        self.event(resolved.workload or gang.raw[0], "Warning", "GangMembersReplaced", message)

    def time_out(self, gang: GangView, resolved: Resolved, decision: Decision, now: dt.datetime) -> None:
        first = self.last_state.get(gang.key) != GangState.TIMED_OUT  # events on transitions only
        if first:
            metrics.TIMEOUTS.inc()
        if not decision.evict:
            if first:
                self.event(
                    gang.raw[0],
                    "Warning",
                    "GangTimedOut",
                    f"gang {gang.name}: {decision.message}; bare pods are not evicted, delete and recreate them "
                    "to retry",
                )
            return
        if not decision.whole_gang:  # late newcomers of a running gang go back; its members stay
            self._evict(gang, decision.evict)
            self.event(
                resolved.workload or gang.raw[0],
                "Warning",
                "GangMembersRequeued",
                f"gang {gang.name}: {decision.message}; evicted {len(decision.evict)} to be recreated gated",
            )
            return
        self.requeue_whole(gang, resolved, decision, now)

    def _requeues_by_suspending(self, resolved: Resolved) -> bool:
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
            self.event(workload, "Warning", "GangLeftToKueue", f"gang {gang.name}: {decision.message}")
            return
        attempts = self.gang_objects.books(gang.namespace, gang.name).attempts + 1
        kind = str((workload or {}).get("kind", ""))
        suspend = SUSPEND_PATHS.get(kind) if workload is not None else None
        if attempts > self.max_attempts:
            decision.state = GangState.GAVE_UP
            how = "it stays suspended; set its suspend field to false" if suspend else "no more evictions; recreate it"
            decision.message = f"{decision.message}; requeued {self.max_attempts} times, giving up ({how} to retry)"
            self.save_books(gang, resolved, decision, Books(attempts), now)
            if workload is not None and suspend:
                self._patch_workload(workload, {**nested(suspend, True), **_marked(None)})
            return
        wait = backoff_seconds(attempts)
        not_before = now + dt.timedelta(seconds=wait)
        if workload is not None and suspend:
            # the books first: a workload suspended with no record of it would never be resumed
            if not self.save_books(gang, resolved, decision, Books(attempts, not_before, now), now):
                return
            if self._patch_workload(workload, {**nested(suspend, True), **_marked(format_time(now))}):
                self.event(
                    workload,
                    "Warning",
                    "GangRequeued",
                    f"gang {gang.name}: {decision.message}; suspended {kind} {workload['metadata'].get('name')} so "
                    f"its pods go without counting as failures; resumes after {wait}s (attempt {attempts} of "
                    f"{self.max_attempts})",
                )
            return
        if not self.save_books(gang, resolved, decision, Books(attempts, not_before), now):
            return
        self._evict(gang, decision.evict)
        self.event(
            workload or gang.raw[0],
            "Warning",
            "GangEvicted",
            f"gang {gang.name}: {decision.message}; evicted {len(decision.evict)} pods to retry "
            f"gated (attempt {attempts} of {self.max_attempts}, next after {wait}s)",
        )

    def _suspend_target(self, workload: Obj | None) -> Obj | None:
        """The object whose suspend field stops a gang: the workload itself, except a TrainJob's JobSet,
        whose suspend Kubeflow Trainer keeps in step with its TrainJob's (so the TrainJob is suspended)."""
        owner = next(
            (r for r in ((workload or {}).get("metadata") or {}).get("ownerReferences") or [] if r.get("controller")),
            None,
        )
        if workload is None or workload.get("kind") != "JobSet" or not owner or owner.get("kind") != "TrainJob":
            return workload
        try:
            trainjob = self.read(WORKLOAD_RESOURCES["TrainJob"], workload["metadata"].get("namespace"), owner["name"])
        except ApiError as error:
            metrics.API_ERRORS.labels("get", str(error.status)).inc()
            return workload
        return trainjob or workload

    def _evict(self, gang: GangView, names: list[str]) -> None:
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

    def resume_due(self, now: dt.datetime) -> None:
        """Resume the workloads gangkeeper suspended (its Gang books say so) once their backoff has passed.
        A workload whose user took gangkeeper's mark off, or resumed it, is theirs: the books let it go."""
        for gang_object in self.gang_objects.suspended():
            books = books_of(gang_object)
            ref = (gang_object.get("spec") or {}).get("workload") or {}
            namespace = str((gang_object.get("metadata") or {}).get("namespace", ""))
            resource = self.workload_resource(str(ref.get("kind", "")))
            try:
                workload = self.read(resource, namespace, str(ref.get("name", ""))) if resource else None
            except ApiError as error:
                metrics.API_ERRORS.labels("get", str(error.status)).inc()
                continue
            target = self._suspend_target(workload)
            kind = str((target or {}).get("kind", ""))
            meta = (target or {}).get("metadata") or {}
            still_ours = (
                target is not None
                and kind in SUSPEND_PATHS
                and SUSPENDED_ANNOTATION in (meta.get("annotations") or {})
                and _get(target, SUSPEND_PATHS[kind]) is True
            )
            if still_ours and books.not_before is not None and now < books.not_before:
                continue
            if target is not None and still_ours:
                if not self._patch_workload(target, {**nested(SUSPEND_PATHS[kind], False), **_marked(None)}):
                    continue
                self.event(
                    target,
                    "Normal",
                    "GangResumed",
                    f"{kind} {meta.get('name')} resumed after its backoff; its pods come back gated",
                )
            self.gang_objects.write(gang_object, {"suspendedAt": None})

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
    def sync_group_objects(self, gang: GangView, resolved: Resolved, backend: str) -> None:
        if resolved.gang is None:
            return
        name, _, version = backend.partition("-")
        chosen = backends.make(name, kubernetes_version=version or self.native_version)
        for desired in chosen.group_objects([resolved.gang], NamespaceInfo()):
            resource = group_resource(desired["apiVersion"], desired["kind"])
            meta = desired["metadata"]
            path = resource.path(meta.get("namespace") or gang.namespace, meta["name"])
            try:
                current = self.read(resource, meta.get("namespace") or gang.namespace, meta["name"])
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
            self.event(resolved.workload or gang.raw[0], "Warning", "GroupObjectRefused", f"{kind} {name}: {refusal}")
        else:
            self._refusals.pop(gang.key, None)

    # --- what people see -------------------------------------------------------------------------
    def save_books(
        self, gang: GangView, resolved: Resolved, decision: Decision, books: Books, now: dt.datetime
    ) -> bool:
        """Write the gang's books (and its state) to its Gang object; False when that failed."""
        return self._write_gang(gang, resolved, "gate", decision.state, decision.message, decision.position, books, now)

    def _write_gang(
        self,
        gang: GangView,
        resolved: Resolved,
        backend: str,
        state: str,
        message: str,
        position: int,
        books: Books,
        now: dt.datetime,
    ) -> bool:
        min_member = resolved.spec.min_member if resolved.spec is not None else max(1, len(gang.pods))
        wanted = desired_object(gang.namespace, gang.name, backend, min_member, resolved.workload)
        current = self.gang_objects.get(gang.namespace, gang.name)
        live = [p for p in gang.pods if not p.terminal]
        counts = (len(live), sum(1 for p in live if p.node_name), sum(1 for p in live if p.gated))
        status = desired_status(
            state, message, counts, min_member, position, books, (current or {}).get("status") or {}, now
        )
        return self.gang_objects.write(wanted, status) is not None

    def report_other(self, gang: GangView, resolved: Resolved, backend: str, now: dt.datetime) -> None:
        """The Gang object of a gang another scheduler places: its pods counted, as its PodGroup shows."""
        previous = (self.gang_objects.get(gang.namespace, gang.name) or {}).get("status") or {}
        live = [p for p in gang.pods if not p.terminal]
        running = sum(1 for p in live if p.node_name)
        need = resolved.spec.min_member if resolved.spec is not None else len(live)
        state = str(GangState.RUNNING) if running >= need else "Pending"
        message = f"{running} of {need} members scheduled by the {backend.split('-')[0]} gang scheduler"
        if resolved.spec is None:
            state, message = str(GangState.UNKNOWN), f"cannot size the gang: {resolved.problem}"
        self._write_gang(gang, resolved, backend, state, message, 0, books_of({"status": previous}), now)

    def transition(self, gang: GangView, resolved: Resolved, decision: Decision, now: dt.datetime) -> None:
        """The Gang object brought to the decision; an event when its state changes (level-based: the
        state is compared with the Gang's, so a workload recreated under the same name is told again)."""
        current = self.gang_objects.get(gang.namespace, gang.name)
        previous = ((current or {}).get("status") or {}).get("state") or self.last_state.get(gang.key)
        self.last_state[gang.key] = decision.state
        books = books_of(current)
        if decision.state == GangState.RUNNING and (books.attempts or books.not_before):
            books = Books(suspended_at=books.suspended_at)  # a gang that runs gets its whole budget back
        if self.may_write():
            self.save_books(gang, resolved, decision, books, now)
        if previous == decision.state:
            return
        reason, kind = {
            "WaitingForMembers": ("WaitingForMembers", "Normal"),
            "WaitingForCapacity": ("WaitingForCapacity", "Normal"),
            "NeverFits": ("GangTooLarge", "Warning"),
            "Release": ("GangReleased", "Normal"),
            "Running": ("GangRunning", "Normal"),
            "Backoff": ("GangBackoff", "Normal"),
            "Unknown": ("GangUnknown", "Warning"),
            "GaveUp": ("GangGaveUp", "Warning"),
        }.get(decision.state, ("", ""))
        if not reason:
            return
        message = f"gang {gang.name}: {decision.message}"
        if decision.placement is not None and decision.state in ("WaitingForCapacity", "NeverFits"):
            message += "; " + "; ".join(placement.summarize(decision.placement.why, limit=3)[:3])
        self.event(resolved.workload or gang.raw[0], kind, reason, message)
        if decision.state in ("Release", "NeverFits"):
            for pod in gang.raw:
                self.event(pod, kind, reason, message)

    def event(self, obj: Obj, kind: str, reason: str, message: str) -> None:
        self.recorder.record(obj, kind, reason, message)

    def publish(self, decisions: Mapping[str, Decision]) -> None:
        counts: dict[str, int] = {}
        for decision in decisions.values():
            counts[decision.state] = counts.get(decision.state, 0) + 1
        for state in GangState:
            metrics.GANGS.labels(state.value).set(counts.get(state, 0))
        metrics.GATED_PODS.set(self.index.gated)


def _marked(when: str | None) -> Obj:
    """gangkeeper's mark on a workload it suspended (None takes it off): it tells people why, and a user
    who removes it keeps the workload suspended. Never the controller's state: that is the Gang's."""
    return {"metadata": {"annotations": {SUSPENDED_ANNOTATION: when}}}


def _get(obj: Obj, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None  # type: ignore[assignment]
    return obj


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
