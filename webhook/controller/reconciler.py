"""One reconciliation pass over every gang: group objects, and release of gated gangs.

Everything is read from the cluster each pass (from the informers' caches when they run), so a
controller killed at any moment and started again picks up exactly where the cluster is.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from webhook import contract
from webhook.controller import metrics, placement
from webhook.controller.clockguard import ClockGuard, no_guard
from webhook.controller.cluster import ClusterIndex, GangView
from webhook.controller.events import EventRecorder
from webhook.controller.gangobject import GANGS, GangObjects
from webhook.controller.groups import GroupObjects, orphan_groups
from webhook.controller.headofline import DEFAULT_BOUND_SECONDS, HeadOfLine
from webhook.controller.informer import Informer
from webhook.controller.kube import Api
from webhook.controller.placement import Eligibility, Member
from webhook.controller.queue import DEFAULT_DEPTH, DEFAULT_POLICY, Ending, Policy, QueuePass, take_turn
from webhook.controller.release import Releaser, adjust
from webhook.controller.report import Reporter
from webhook.controller.requeue import DEFAULT_MAX_ATTEMPTS, Requeuer
from webhook.controller.resolve import Resolved, Workloads
from webhook.controller.reuse import Snapshot, Waiting, capacity, resolved_key, still_valid
from webhook.controller.source import ChangeSource, Listing, Source, backend_of
from webhook.controller.state import DEFAULT_TIMEOUT_SECONDS, Decision, GangState, decide, format_time
from webhook.gangs.model import Obj

log = logging.getLogger("gangkeeper.controller")


@dataclass
class _Pass:
    """What one pass shares between its gangs' turns."""

    snapshot: Snapshot
    now: dt.datetime
    resync: bool
    workloads: dict[tuple[str, str, str], Obj | None]
    seen: dict[str, tuple[tuple[tuple[str, str], ...], Resolved]]
    waiting: dict[str, Waiting]
    queue: QueuePass


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
        head_of_line_seconds: float = DEFAULT_BOUND_SECONDS,
        opted_out: Callable[[str], bool] = lambda namespace: False,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.api, self.source = api, source or Listing(api)
        # a namespace that left gangkeeper (its gangkeeper.io/enabled label gone): its gates are lifted
        self.opted_out = opted_out
        self.native_version, self.clock, self.component = native_version, clock, component
        self.passes, self.orphan_every, self.resync_every = 0, orphan_every, resync_every
        self._seen: dict[str, tuple[tuple[tuple[str, str], ...], Resolved]] = {}
        self.informers: dict[tuple[str, str], Informer] = dict(informers or {})
        self.recorder = EventRecorder(api, component, clock)
        self.decisions: dict[str, Decision] = {}
        # leadership, asked again before each batch of writes: a leader that lost its lease mid-pass
        # must not release a gang another replica is deciding about
        self.may_write = may_write
        self.queue_policy = Policy(queue_policy)
        self.queue_depth = queue_depth
        self.head_of_line = HeadOfLine(head_of_line_seconds)
        # the Gang objects: what people see of each gang, and the controller's books (attempts, backoff,
        # suspensions), read back from there and never from an annotation a tenant could write
        self.gang_objects = GangObjects(api, lambda: self.informers.get((GANGS.group_version, GANGS.plural)), may_write)
        self.workloads = Workloads(api, self.informers)
        self.reporter = Reporter(self.recorder, self.gang_objects, may_write)
        self.releaser = Releaser(api, self.reporter, may_write, release_concurrency)
        self.requeuer = Requeuer(api, self.workloads, self.reporter, self.gang_objects, max_attempts, may_write)
        self.groups = GroupObjects(api, self.workloads, self.reporter, native_version)
        # timeouts are judged by a clock a wall-clock jump cannot move forward (none in tests that drive it)
        self.judge = ClockGuard(monotonic).judge if monotonic is not None else no_guard
        self.judged_now: dt.datetime | None = None
        # a gang whose reconciliation raised: (failures in a row, not before) — it alone waits
        self._failing: dict[str, tuple[int, dt.datetime]] = {}
        # capacity kept for members a released gang will create later (Spark executors): gang -> when, node -> units
        self._reserved: dict[str, tuple[dt.datetime, dict[str, dict[str, int]]]] = {}
        self.index = ClusterIndex(self.gang_objects.releases)
        self._waiting: dict[str, Waiting] = {}
        self._order: dict[str, tuple[int, tuple[int, dt.datetime]]] = {}  # gang -> (version, queue key)
        self.replaced = 0  # decisions re-placed in the last pass (the others were reused)

    # --- the pass -------------------------------------------------------------------------------
    def reconcile_once(self) -> dict[str, Decision]:
        with metrics.PASS_SECONDS.time():
            return self._reconcile(self.clock())

    def _reconcile(self, now: dt.datetime) -> dict[str, Decision]:
        self.judged_now = self.judge(now)
        if self.may_write():
            self.requeuer.resume_due(now)
        snapshot = self.snapshot()
        workloads: dict[tuple[str, str, str], Obj | None] = {}
        decisions: dict[str, Decision] = {}
        if self.may_write():
            # a gate on a pod that is in no gang (its label removed, a stray template) holds it forever
            self.releaser.lift_gates(snapshot.stray_gated, "it belongs to no gang", now)
        resync = self.passes % self.resync_every == 0
        seen: dict[str, tuple[tuple[tuple[str, str], ...], Resolved]] = {}
        self._apply_reservations(snapshot, now)
        waiting, self._waiting = self._waiting, {}
        self.replaced = 0
        queue = QueuePass(
            self.queue_policy,
            snapshot.nodes,
            snapshot.free,
            lambda: self.endings(snapshot, seen, workloads, now),
            now.timestamp(),
            snapshot.eligibility,
            self.queue_depth,
            lambda gang: self.head_of_line.may_hold(gang, now),
        )
        current = _Pass(snapshot, now, resync, workloads, seen, waiting, queue)
        # the queue: higher priority first, then whoever waited longest
        for gang in sorted(snapshot.gangs.values(), key=lambda g: self.queue_key(g, now)):
            if self._held_back(gang.key, now):
                continue
            try:
                decision = self._reconcile_gang(gang, current)
            except Exception:  # one gang's failure is that gang's: the others are still reconciled
                self._failed(gang.key, now)
                continue
            self._failing.pop(gang.key, None)
            if decision is not None:
                decisions[gang.key] = decision
        self._seen = seen
        self.reporter.publish(decisions, self.index.gated)
        self.decisions = decisions
        self.passes += 1
        if (self.passes % self.orphan_every == 1 or self.orphan_every == 1) and self.may_write():
            live = {(g.namespace, g.name) for g in snapshot.gangs.values()}
            deleted = orphan_groups(self.api, live, [*self.groups.resources(), GANGS])
            if deleted:
                metrics.GROUP_OBJECTS.labels("delete").inc(len(deleted))
                log.info("deleted orphaned group objects", extra={"objects": deleted})
        return decisions

    def _reconcile_gang(self, gang: GangView, current: _Pass) -> Decision | None:
        """One gang's turn in the pass: its gates lifted when nothing will release it, its group objects
        synced (other backends), or its gate decision made and acted on. None: no gate decision."""
        now, snapshot = current.now, current.snapshot
        # the workload is read, and the group object checked, only when the gang's pods changed
        # or on the periodic resync: a quiet cluster costs no API calls per pass
        fingerprint = (("pods", str(self.index.gang_versions[gang.key])), *self.related_versions(gang))
        cached = self._seen.get(gang.key)
        fresh = current.resync or cached is None or cached[0] != fingerprint
        resolved = self.workloads.resolve(gang, current.workloads) if fresh or cached is None else cached[1]
        current.seen[gang.key] = (fingerprint, resolved)
        backend = backend_of(gang.raw[0])
        switched = {backend_of(raw) for raw in gang.raw} - {"gate"}
        gated = [(v, raw) for v, raw in zip(gang.pods, gang.raw, strict=True) if v.gated]
        if self.opted_out(gang.namespace):
            # the namespace left gangkeeper: its pods are scheduled as any pod, nothing waits for a
            # release (the opt-out the README gives to unblock a namespace)
            if gated and self.may_write():
                self.releaser.lift_gates(gated, f"namespace {gang.namespace} is no longer opted in", now)
            return None
        if switched and gated and self.may_write():
            # the namespace moved this gang to another mechanism: its new members will never join
            # the gated ones, who would otherwise wait for a gang that cannot fill
            why = f"the gang's newer pods use {', '.join(sorted(switched))}, not the gate"
            self.releaser.lift_gates(gated, why, now)
            return None
        if backend != "gate":
            if fresh and self.may_write():
                self.groups.sync(gang, resolved, backend)
                self.reporter.report_other(gang, resolved, backend, now)
            return None
        if resolved.gone and self.may_write():
            self.releaser.lift_gates(gated, f"its gang's workload is gone ({resolved.problem})", now)
        return self.step(gang, resolved, snapshot, now, current.waiting.get(gang.key), current.queue)

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
        now: dt.datetime,
    ) -> list[Ending]:
        """When the capacity held by running gangs returns: from each released pod's release time plus
        its workload's expected run time (gangs whose workload does not say are never expected to end)."""
        found = []
        for key, gang in snapshot.gangs.items():
            if not any(p.holds_node and p.released_at for p in gang.pods):
                continue
            known = seen.get(key) or self._seen.get(key)
            try:
                resolved = known[1] if known is not None else self.workloads.resolve(gang, workloads)
            except Exception:  # that gang's failure is reported on its own turn, not on the one asking
                continue
            spec = resolved.spec
            if spec is None or spec.expected_seconds is None:
                continue
            for pod in gang.pods:
                node = pod.holds_node
                if node is None or pod.released_at is None:
                    continue
                end = pod.released_at.timestamp() + spec.expected_seconds
                # a pod still running past the run time its workload claimed: that claim is no longer
                # believed (its end is unknown), so no gang is backfilled on the promise of its capacity
                if end > now.timestamp():
                    found.append(Ending(end, node, pod.units))
        return found

    def related_versions(self, gang: GangView) -> list[tuple[str, str]]:
        """Versions of the watched workload and group object of a gang: a scale-up or a deleted
        PodGroup changes them, so the gang is looked at again at once, not at the next resync."""
        stamp = gang.pods[0].annotations.get(contract.WORKLOAD_ANNOTATION, "")
        kind, _, rest = stamp.partition("/")
        versions = [
            (
                "workload",
                self.workloads.watched_version(
                    self.workloads.workload_resource(kind), gang.namespace, rest.split("/")[0]
                ),
            )
        ]
        for resource in self.groups.resources():
            versions.append(
                (resource.group_version, self.workloads.watched_version(resource, gang.namespace, gang.name))
            )
        return versions

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
        self.head_of_line.keep_only(live)
        self.gang_objects.keep_only(set(live))
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

    # --- gate backend -----------------------------------------------------------------------------
    def step(
        self,
        gang: GangView,
        resolved: Resolved,
        snapshot: Snapshot,
        now: dt.datetime,
        waiting: Waiting | None,
        queue: QueuePass,
    ) -> Decision:
        previous = self.reporter.state_of(gang)  # before this turn writes the Gang
        free = snapshot.free
        held = self._reserved.get(gang.key)
        if held is not None:  # what was kept for this gang's members to come is theirs to use
            adjust(free, held[1], +1)
        avoid = self.requeuer.avoided(gang.key, now)
        expected = resolved.spec.expected_seconds if resolved.spec is not None else None
        room = queue.room_for(now.timestamp() + expected if expected is not None else None)
        context = (queue.context(gang.key), room is free)
        if (
            waiting is not None
            and waiting.context == context
            and still_valid(self.index, waiting, gang, resolved, snapshot, avoid, room)
        ):
            decision = waiting.decision
        else:
            decision = self.decide_for(gang, resolved, snapshot, now, avoid, room=None if room is free else room)
            self.replaced += 1
        if held is not None:
            adjust(free, held[1], -1)
        # nothing in a waiting decision depends on the clock while no released pod waits to bind: reuse it
        # until the gang, its workload, the nodes, the queue ahead, or the room it could use change
        if decision.state in (
            GangState.WAITING_FOR_CAPACITY,
            GangState.NEVER_FITS,
            GangState.WAITING_FOR_MEMBERS,
        ) and not any(not p.gated and not p.terminal and not p.node_name for p in gang.pods):
            if waiting is None or waiting.decision is not decision:
                waiting = Waiting(
                    self.index.gang_versions[gang.key],
                    resolved_key(resolved),
                    self.index.nodes_epoch,
                    avoid,
                    decision,
                    context,
                    capacity(gang, snapshot.eligibility, room)
                    if decision.state == GangState.WAITING_FOR_CAPACITY
                    else {},
                )
            self._waiting[gang.key] = waiting
        members = [Member(p.name, p.shape) for p in gang.pods if p.gated and not p.terminal]
        spread = resolved.spec.spread if resolved.spec is not None else False
        decision = take_turn(queue, gang.key, decision, members, spread, room is not free, expected)
        self._bound_head_of_line(gang.key, decision, queue, now)
        if decision.state == GangState.RELEASE:
            if decision.reserve:
                self._reserved[gang.key] = (now, decision.reserve)
                adjust(free, decision.reserve, -1)
            self.releaser.release(gang, resolved, decision, snapshot.free, snapshot.ports, snapshot.hostnames, now)
            queue.released()
        elif decision.state == GangState.TIMED_OUT:
            self.requeuer.time_out(gang, resolved, decision, now)
        elif decision.state == GangState.REPAIR:
            self.requeuer.repair(gang, resolved, decision, now)
        self.reporter.transition(gang, resolved, decision, now, previous)
        return decision

    def _bound_head_of_line(self, key: str, decision: Decision, queue: QueuePass, now: dt.datetime) -> None:
        if decision.state != GangState.WAITING_FOR_CAPACITY:
            if decision.state != GangState.QUEUED:
                self.head_of_line.done(key)
            return
        if decision.reservation or queue.blocked_by == key:
            self.head_of_line.holds(key, now)
            return
        until = self.head_of_line.yields_until(key, now)
        if until is not None:
            decision.message += (
                f"; it could not start within {self.head_of_line.bound_seconds:.0f}s at the head of the queue, so "
                f"it holds no gang back until {format_time(until)}"
            )

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
            adjust(snapshot.free, reserve, -1)

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
