"""The controller's pass: each gang reconciled on its own, then one release cycle for the gate gangs.

Level-based, as controller-runtime and Kueue reconcilers are: a gang is looked at when its pods, its
workload or its group object changed, or when it falls due in the work queue (a deadline of its own,
its periodic resync, the end of its backoff after a failure); whatever it needs is read from the cluster
(the informers' caches when they run), so a controller killed at any moment and started again picks up
exactly where the cluster is. The gate gangs share the nodes, so their release is one cycle in queue
order; the pass ends with the moment it must run again although nothing changes (`next_wake`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from webhook.backends import Backend
from webhook.controller import metrics
from webhook.controller.act.events import Recorder
from webhook.controller.act.gangobject import GANGS
from webhook.controller.act.groups import orphan_groups
from webhook.controller.act.kueue_checks import KueueChecks
from webhook.controller.act.supervise import Supervisor
from webhook.controller.decide.deadlines import MIN_REQUEUE_SECONDS, earliest, gang_deadline
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.queue import Ending, Policy, QueuePass
from webhook.controller.decide.recovery import held_partly, may_hold_partly
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.decide.whole_groups import group_states
from webhook.controller.observe.devices import DeviceWatch, watch_costs
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.related import RelatedObjects, drained, watch_keys
from webhook.controller.observe.resolve import Resolved
from webhook.controller.observe.reuse import Snapshot, running_endings
from webhook.controller.observe.source import Listing, Source, bring_up_to_date
from webhook.controller.observe.workloads import all_workload_resources, group_resource
from webhook.controller.run.bootstrap import ControllerSettings, wire
from webhook.controller.run.clockguard import SteadyClock
from webhook.controller.run.steer import Steering
from webhook.controller.run.supervised import SupervisedTurn
from webhook.controller.run.workqueue import GangQueue, staggered
from webhook.gangs.model import Obj
from webhook.informer import Informer
from webhook.kube import Api

log = logging.getLogger("gangkeeper.controller")
VOLCANO_PODGROUPS = group_resource("scheduling.volcano.sh/v1beta1", "PodGroup")


@dataclass
class _Pass:
    """What one pass shares between its gangs' turns."""

    snapshot: Snapshot
    now: dt.datetime
    due: set[str]  # gangs the work queue says are due: looked at afresh even if nothing changed
    touched: set[str]  # gangs whose workload or group object changed since the last pass
    workloads: dict[tuple[str, str, str], Obj | None]
    queue: QueuePass


class Controller:
    def __init__(
        self,
        api: Api,
        source: Source | None = None,
        settings: ControllerSettings | None = None,
        *,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        informers: Mapping[tuple[str, str], Informer] | None = None,
        may_write: Callable[[], bool] = lambda: True,
        opted_out: Callable[[str], bool] = lambda namespace: False,
        monotonic: Callable[[], float] | None = None,
        recorder: Recorder | None = None,
        **tuning: Any,
    ) -> None:
        """`settings` (bootstrap.ControllerSettings), with any of its fields given by name in `tuning`."""
        self.settings = settings = replace(settings or ControllerSettings(), **tuning)
        self.api, self.source = api, source or Listing(api)
        # a namespace that left gangkeeper (its gangkeeper.io/enabled label gone): its gates are lifted
        self.opted_out = opted_out
        # every deadline is judged by the time that really passed: a wall-clock jump moves none of them
        # (tests that drive the wall clock by hand pass no monotonic clock: their steps are real time)
        self.clock = SteadyClock(clock, monotonic, api.server_time) if monotonic is not None else clock
        self.native_version = settings.native_version
        self.passes, self.orphan_seconds, self.resync_seconds = 0, settings.orphan_seconds, settings.resync_seconds
        self._orphans_at = float("-inf")  # when stray group and Gang objects are next looked for
        self.related = RelatedObjects()
        self.informers: dict[tuple[str, str], Informer] = dict(informers or {})
        self.device_watch = DeviceWatch(self.informers)
        watch_costs(self.device_watch)
        # leadership, asked again before each batch of writes: a leader that lost its lease mid-pass
        # must not release a gang another replica is deciding about
        self.may_write = may_write
        self.queue_policy, self.queue_depth = Policy(settings.queue_policy), settings.queue_depth
        parts = wire(api, settings, self.informers, may_write, self.clock, recorder)
        self.recorder, self.gang_objects, self.workloads = parts.recorder, parts.gang_objects, parts.workloads
        self.reporter, self.releaser, self.requeuer = parts.reporter, parts.releaser, parts.requeuer
        self.mechanisms, self.groups, self.index, self.cycle = parts.mechanisms, parts.groups, parts.index, parts.cycle
        self.store = parts.store  # all the controller remembers of each gang between passes (observe/store.py)
        # gangs due for a look, keyed by gang; one whose reconciliation raised alone waits out its backoff
        self.work = GangQueue()
        self.supervisor = Supervisor(self.reporter, self.requeuer, self.gang_objects, may_write)
        steering = Steering(self.cycle, self.releaser, self.work, parts.claim_holders, self.store)
        self.supervised = SupervisedTurn(
            self.cycle, self.store, self.groups, self.supervisor, self.releaser, self.work, may_write, steering
        )
        self.next_wake: float | None = None  # when the next pass must run although nothing changes
        self.visited = 0  # gangs the last pass took a turn for (the untouched running ones are skipped)
        self._next_ending: float | None = None  # the earliest promised end of a running gang's run time
        self.kueue_checks = KueueChecks(
            api, may_write, self.informers, self.gang_objects, opted_out, timeout_of=self._timeout_of
        )

    @property
    def replaced(self) -> int:
        """Decisions re-placed in the last pass (the others were reused)."""
        return self.cycle.replaced

    def _timeout_of(self, gang_key: str) -> float | None:
        resolved = self.resolved(gang_key)
        return resolved.spec.timeout_seconds if resolved is not None and resolved.spec is not None else None

    def resolved(self, gang_key: str) -> Resolved | None:
        """What the last pass read of the gang's workload (its size, timeout, topology), or None."""
        record = self.store.get(gang_key)
        return record.seen[1] if record is not None and record.seen is not None else None

    @property
    def decisions(self) -> dict[str, Decision]:
        """What the last pass decided, gang by gang."""
        return self.store.decisions()

    def reconcile_once(self) -> dict[str, Decision]:
        with metrics.PASS_SECONDS.time():
            return self._reconcile(self.clock())

    def _reconcile(self, now: dt.datetime) -> dict[str, Decision]:
        stamp = now.timestamp()
        due = self.work.take_due(stamp)
        self.store.begin_pass()
        wakes: list[float | None] = []
        if self.may_write():
            wakes.append(self.requeuer.resume_due(now))
        snapshot = self.snapshot()
        workloads: dict[tuple[str, str, str], Obj | None] = {}
        decisions: dict[str, Decision] = {}
        if self.may_write():
            # a gate on a pod that is in no gang (its label removed, a stray template) holds it forever
            self.releaser.lift_gates(snapshot.stray_gated, "it belongs to no gang", now)
            if (VOLCANO_PODGROUPS.group_version, VOLCANO_PODGROUPS.plural) in self.informers:
                watched = [self.informers.get((r.group_version, r.plural)) for r in all_workload_resources()]
                self.groups.create_ahead_of_pods([i for i in watched if i is not None], self.opted_out)
        touched = self.related.touched(drained(self.informers))
        wakes.append(self.cycle.apply_reservations(snapshot, now))
        self.cycle.replaced, self._next_ending, self.supervised.next_refresh = 0, None, None
        queue = QueuePass(
            self.queue_policy,
            snapshot.nodes,
            snapshot.free,
            lambda: self.endings(snapshot, workloads, now),
            stamp,
            snapshot.eligibility,
            self.queue_depth,
            lambda gang: self.cycle.head_of_line.may_hold(gang, now),
        )
        current = _Pass(snapshot, now, due, touched, workloads, queue)
        # each gang on its own: group objects of the other backends, gates nothing will release; the
        # NodePools' room goes to the other schedulers' gangs first, then to the gate's in queue order
        if self.cycle.placeholders is not None:
            self.cycle.placeholders.begin_pass()
        cycle: list[tuple[GangView, Resolved]] = []
        visited: list[GangView] = []  # a gang skipped is a gate gang running whole: never partly running
        self.visited = 0
        for gang in snapshot.gangs.values():
            if (last := self._untouched_running(gang, current)) is not None:
                decisions[gang.key] = last
                continue
            self.visited += 1
            visited.append(gang)
            done, turn = self.work.guarded(gang.key, stamp, partial(self._reconcile_gang, gang, current))
            if done and turn is not None:
                cycle.append(turn)
            elif done:
                self.work.forget(gang.key)
        # the release cycle, gate gangs only: higher priority first, then whoever waited longest
        for gang, resolved in sorted(cycle, key=lambda item: self.cycle.queue_key(item[0], now)):
            done, decision = self.work.guarded(gang.key, stamp, partial(self._release_turn, gang, resolved, current))
            if done and decision is not None:
                self.work.forget(gang.key)
                decisions[gang.key] = decision
                self.store.decided(gang.key, decision)
        self.cycle.finish_releases()
        if self.may_write():  # Kueue's Workloads that wait on gangkeeper's check, in the room the gangs left
            wakes.append(self.kueue_checks.sync(snapshot, now))
        self.gang_objects.flush()  # every gang's reported status, side by side
        partly = held_partly(
            (min(g.mechanisms or {"gate"}), g.pods, r.spec.min_member)
            for g in visited
            if may_hold_partly(decisions.get(g.key)) and (r := self.resolved(g.key)) is not None and r.spec is not None
        )
        groups = group_states(
            (min(g.mechanisms or {"gate"}), g.pods, r.spec.whole_groups)
            for g in visited
            if (r := self.resolved(g.key)) is not None and r.spec is not None
        )
        self.reporter.publish(decisions, self.index.gated, partly, now, groups)
        self.passes += 1
        if stamp >= self._orphans_at and self.may_write():
            self._orphans_at = stamp + self.orphan_seconds
            live = {(g.namespace, g.name) for g in snapshot.gangs.values()}
            orphan_groups(self.api, live, [*self.groups.resources(), GANGS], now)
        hol = self.cycle.head_of_line.next_change(now)
        wakes += [self.work.next_at(), self._orphans_at, self._next_ending, hol.timestamp() if hol else None]
        wakes.append(self.supervised.next_refresh)
        self.next_wake = earliest(wakes, stamp)
        return decisions

    def serve_native(self, version: str, composite: bool) -> bool:
        """Write native group objects in what the API server serves now (re-discovered: a control plane
        upgraded under the controller); every gang's group objects are then synced again this pass."""
        native = self.mechanisms.native
        if (version, composite) == (native.generation.kubernetes, native.composite_groups):
            return False
        log.info("native API changed", extra={"from": native.api_version, "kubernetes": version})
        self.native_version = version
        self.mechanisms.serve_native(version, composite)
        self.store.forget_reads()
        self.index.reclassify(lambda pod: self.mechanisms.of_pod(pod).name)
        self.related.clear()  # the group kinds changed with the generation
        return True

    def _untouched_running(self, gang: GangView, current: _Pass) -> Decision | None:
        """A running gate gang nothing of its own changed since its last turn (its pods' version, its
        workload or group object, its deadlines and periodic re-read, its backfill claim) would decide
        Running again: skipped whole. So would a Finished one (its pods kept until its Job goes) whose
        recovery clock does not run: a steady pass costs the changed and the waiting gangs, not the
        thousands that ran. Returns its last decision when it is skipped."""
        key, record, this_pass = gang.key, self.store.get(gang.key), self.store.pass_number
        if record is None or record.decided_in != this_pass - 1 or (last := record.decision) is None:
            return None
        settled = last.state == GangState.RUNNING or (last.state == GangState.FINISHED and not last.timed)
        seen = record.seen
        skipped = (
            settled
            and not self.settings.visit_settled
            and (seen is not None and record.marks is not None)
            and seen[0] == self.index.gang_versions[key]
            and key not in current.due
            and key not in current.touched
            and self.gang_objects.books(gang.namespace, gang.name).claim_until is None
        )
        if not skipped:
            return None
        record.decided_in = this_pass  # the same decision, this pass's too
        return last

    def _reconcile_gang(self, whole: GangView, current: _Pass) -> tuple[GangView, Resolved] | None:
        """One gang's own reconciliation: its gates lifted when nothing will release it, its group objects
        synced (other backends). Returns the gang's members, by their workload's uid, and its workload
        when the release cycle must decide for it."""
        now = current.now
        resolved, fresh = self._resolved(whole, current)
        gang = whole.made_for(resolved.workload)
        if not gang.pods:
            return None
        mechanism, switched = self._mechanisms_of(gang)

        def gated() -> list[tuple[PodView, Obj]]:  # read only on the rare paths that lift gates
            return [(v, raw) for v, raw in zip(gang.pods, gang.raw, strict=True) if v.gated]

        if self.opted_out(gang.namespace):
            # the namespace left gangkeeper: its pods are scheduled as any pod, nothing waits for a
            # release (the opt-out docs/operations.md gives to unblock a namespace)
            if self.may_write() and (lifted := gated()):
                self.releaser.lift_gates(lifted, f"namespace {gang.namespace} is no longer opted in", now)
            return None
        if switched and not mechanism.steers_shared_claims and self.may_write() and (lifted := gated()):
            # the namespace moved this gang to another mechanism: its new members will never join
            # the gated ones, who would otherwise wait for a gang that cannot fill (a steered one's
            # gated pods are lifted by run/steer.py)
            why = f"the gang's newer pods use {', '.join(sorted(switched))}, not the gate"
            self.releaser.lift_gates(lifted, why, now)
            return None
        if not mechanism.gangkeeper_places:
            self.supervised.take(gang, resolved, mechanism, fresh, current.snapshot, now)
            return None
        if not resolved.gone:
            self.store.record(gang.key).gone_since = None
        elif self.may_write() and (lifted := gated()):
            self._lift_when_not_collected(gang.key, lifted, resolved, now)
        return gang, resolved

    def _lift_when_not_collected(
        self, key: str, gated: list[tuple[PodView, Obj]], resolved: Resolved, now: dt.datetime
    ) -> None:
        """The pods of a deleted workload are the garbage collector's: their ownerReferences dangle and it
        deletes them within seconds. A gate lifted meanwhile lets one of them bind on its own (a gang
        started partly for nothing), so gates come off only pods still there after `orphan_seconds`
        (a garbage collector that is off or far behind)."""
        record = self.store.record(key)
        since = record.gone_since = record.gone_since if record.gone_since is not None else now.timestamp()
        if now.timestamp() - since < self.orphan_seconds:
            self.work.add_at(key, since + self.orphan_seconds)
            return
        self.releaser.lift_gates(gated, f"its gang's workload is gone ({resolved.problem})", now)

    def _resolved(self, gang: GangView, current: _Pass) -> tuple[Resolved, bool]:
        """The gang's workload as read, and whether it was read afresh now: only when the gang's pods,
        workload or group object changed, or when the gang falls due (a quiet cluster costs no API calls
        per pass)."""
        version = self.index.gang_versions[gang.key]
        self.related.note(
            gang.key, version, lambda: watch_keys(gang, self.workloads.workload_resource, self.groups.resources())
        )
        record = self.store.record(gang.key)
        woken = gang.key in current.due or gang.key in current.touched
        if record.seen is not None and record.seen[0] == version and not woken:
            return record.seen[1], False
        resolved = self.workloads.resolve(gang, current.workloads)
        self.work.add_at(gang.key, current.now.timestamp() + staggered(gang.key, self.resync_seconds))
        record.seen = (version, resolved)
        return resolved, True

    def _mechanisms_of(self, gang: GangView) -> tuple[Backend, frozenset[str]]:
        """The gang's mechanism (its first pod's) and any other one its pods carry but the gate: the
        index tallies them as pods change (reading 1,000 pods on each change of one was a twentieth of
        the controller's CPU, bench/cluster.py autoscale); a view it did not make is read pod by pod."""
        version, record = self.index.gang_versions[gang.key], self.store.record(gang.key)
        known = record.marks
        if known is None or known[0] != version:
            names = gang.mechanisms
            if names is None:
                names = frozenset(self.mechanisms.of_pod(raw).name for raw in gang.raw)
            known = record.marks = (version, self.mechanisms.of_pod(gang.raw[0]), names - {"gate"})
        return known[1], known[2]

    def _release_turn(self, gang: GangView, resolved: Resolved, current: _Pass) -> Decision:
        """A gate gang's turn in the release cycle: decided, acted on, and queued again for its deadline."""
        now = current.now
        decision = self.cycle.step(gang, resolved, current.snapshot, now, current.queue)
        books = self.gang_objects.books(gang.namespace, gang.name)
        moments = [
            gang_deadline(
                gang.pods,
                resolved.spec,
                books.not_before,
                now,
                books.short_since,
                self.gang_objects.releases(gang.namespace, gang.name),
            ),
            self.requeuer.avoid_ends(gang.key),
            self.reporter.counts_due(gang.key),  # newer counts held back (report.py)
        ]
        if decision.state == GangState.RELEASE and resolved.spec is not None:  # the pods just released
            moments.append(now + dt.timedelta(seconds=resolved.spec.timeout_seconds, milliseconds=1))
        deadline = min((moment for moment in moments if moment is not None), default=None)
        if deadline is not None:
            self.work.add_at(gang.key, max(deadline.timestamp(), now.timestamp() + MIN_REQUEUE_SECONDS))
        return decision

    def endings(
        self, snapshot: Snapshot, workloads: dict[tuple[str, str, str], Obj | None], now: dt.datetime
    ) -> list[Ending]:
        """When the capacity held by running gangs returns (`running_endings`); the pass runs again when
        the first of those promises lapses."""

        def resolved_of(key: str, gang: GangView) -> Resolved | None:
            known = self.resolved(key)
            try:
                return known if known is not None else self.workloads.resolve(gang, workloads)
            except Exception:  # that gang's failure is reported on its own turn, not on the one asking
                return None

        found = running_endings(snapshot.gangs, resolved_of, now)
        first = min((ending.at for ending in found), default=None)
        if first is not None:
            self._next_ending = min(first, self._next_ending if self._next_ending is not None else first)
        return found

    def snapshot(self) -> Snapshot:
        """The cluster as this pass sees it: the index brought up to date (by the informers' changes, or by
        comparing a full listing), and a copy of the free capacity for the pass to promise from."""
        index = self.index
        self.device_watch.memo.new_pass()  # a budget of CEL evaluations per pass (devices.Memo)
        bring_up_to_date(index, self.source, lambda index: self.device_watch.inventory(index.waiting_claims()))
        live = index.gangs()
        self.cycle.keep_only(live)
        if self.cycle.placeholders is not None:
            self.cycle.placeholders.sweep(live)
        self.work.keep_only(live)
        self.store.keep_only(live)
        self.related.keep_only(live)
        return Snapshot.of(index, live)
