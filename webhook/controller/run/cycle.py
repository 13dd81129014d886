"""The release cycle of the gate gangs: one turn per gang in queue order, sharing the nodes' capacity.

A turn decides for one gang (`state.decide`, with the queue's room and reservations, `queue.take_turn`)
and acts: release, requeue on timeout, repair. The controller runs the cycle after each gang's own
reconciliation, and `gangkeeper explain` and the simulator run the same controller, so what they say is
what the cycle does. Waiting decisions are reused while nothing they depend on changed (`reuse`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import replace

from webhook.controller.act.gangobject import GangObjects
from webhook.controller.act.placeholders import Placeholders
from webhook.controller.act.preemptor import Preemptor
from webhook.controller.act.release import Releaser, adjust
from webhook.controller.act.report import Reporter
from webhook.controller.act.requeue import Requeuer
from webhook.controller.decide import shapes
from webhook.controller.decide.autoscaling import on_free_room
from webhook.controller.decide.eligibility import Eligibility
from webhook.controller.decide.headofline import HeadOfLine
from webhook.controller.decide.placement import Member
from webhook.controller.decide.pods import DEFAULT_TIMEOUT_SECONDS, gang_priority
from webhook.controller.decide.queue import QueuePass, seen_from, take_turn
from webhook.controller.decide.recovery import overran_claim
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.decide.state import decide
from webhook.controller.observe.cluster import ClusterIndex
from webhook.controller.observe.device_check import devices_check
from webhook.controller.observe.devices import shared_reaches, with_selector_problems
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.informer import trim_pod
from webhook.controller.observe.resolve import Resolved
from webhook.controller.observe.reuse import Read, Snapshot, Waiting, capacity, resolved_key, still_valid
from webhook.controller.observe.store import GangStore

# decisions that depend on no clock while no released pod waits to bind: reused until the gang, its
# workload, the nodes, the queue ahead, or the room it could use change
REUSABLE_STATES = (GangState.WAITING_FOR_CAPACITY, GangState.NEVER_FITS, GangState.WAITING_FOR_MEMBERS)


def reusable(decision: Decision, gang: GangView) -> bool:
    return decision.state in REUSABLE_STATES and not any(
        not p.gated and not p.terminal and not p.node_name for p in gang.pods
    )


class ReleaseCycle:
    def __init__(
        self,
        store: GangStore,
        index: ClusterIndex,
        gang_objects: GangObjects,
        reporter: Reporter,
        releaser: Releaser,
        requeuer: Requeuer,
        head_of_line: HeadOfLine,
        preemptor: Preemptor | None = None,
        placeholders: Placeholders | None = None,
    ) -> None:
        self.preemptor = preemptor  # whole-gang preemption for gangs that wait on lower-priority pods
        self.placeholders = placeholders  # an autoscaler's capacity for gangs that wait on it
        self.index, self.gang_objects, self.reporter = index, gang_objects, reporter
        self.releaser, self.requeuer, self.head_of_line = releaser, requeuer, head_of_line
        # each gang's reservation, waiting decision and queue key are fields of its record
        self.store = store
        self.replaced = 0  # decisions re-placed in the last cycle (the others were reused)

    def autoscaled(self) -> bool:
        """Whether something adds nodes for Unschedulable pods here (an autoscaler known to the placeholders)."""
        return self.placeholders is not None and self.placeholders.autoscaler()

    def keep_only(self, live: Mapping[str, GangView]) -> None:
        self.head_of_line.keep_only(live)

    def queue_key(self, gang: GangView, now: dt.datetime) -> tuple[int, dt.datetime]:
        """Where a gang stands in the queue: its priority (state.gang_priority), then its arrival
        (its oldest pod's creation), remembered until the gang gains or loses a pod or one ends (a
        pod's priority and creation never change)."""
        version = self.index.roster_versions.get(gang.key, 0)
        record = self.store.record(gang.key)
        cached = record.order
        if cached is None or cached[0] != version:
            live = [p for p in gang.pods if not p.terminal] or gang.pods
            key = (-gang_priority(p.priority for p in live), min((p.created_at or now for p in live), default=now))
            cached = record.order = (version, key)
        return cached[1]

    def step(
        self,
        gang: GangView,
        resolved: Resolved,
        snapshot: Snapshot,
        now: dt.datetime,
        queue: QueuePass,
    ) -> Decision:
        """One gang's turn: placed (or its waiting decision reused), its place in the queue taken, then
        released, timed out or repaired; its Gang object told."""
        previous = self.reporter.state_of(gang)  # before this turn writes the Gang
        books = self.gang_objects.books(gang.namespace, gang.name)
        # a gang that once overran its claim is never backfilled on one again
        expected = resolved.spec.expected_seconds if resolved.spec is not None and not books.claim_broken else None
        waiting = self.store.previous_waiting(gang.key)  # the last pass's, reused while nothing changed
        decision, room = self._placed(gang, resolved, snapshot, now, waiting, queue, expected)
        decision = self._queued(gang, resolved, decision, snapshot, now, queue, room, expected, books.claim_until)
        if self.placeholders is not None:
            free, eligible = snapshot.free, snapshot.eligibility.names
            decision = self.placeholders.sync(gang, decision, lambda waiting: on_free_room(waiting, eligible, free))
        self._act(gang, resolved, decision, snapshot, now, queue)
        self.reporter.transition(gang, resolved, decision, now, previous)
        return decision

    def _placed(
        self,
        gang: GangView,
        resolved: Resolved,
        snapshot: Snapshot,
        now: dt.datetime,
        waiting: Waiting | None,
        queue: QueuePass,
        expected: float | None,
    ) -> tuple[Decision, Mapping[str, Mapping[str, int]]]:
        """The gang's placement, and the room it was placed in: its waiting decision while nothing it rests
        on changed, else decided afresh; a waiting one is remembered for the next pass."""
        free = snapshot.free
        record = self.store.get(gang.key)
        held = record.reserved if record is not None else None
        if held is not None:  # what was kept for this gang's members to come is theirs to use
            adjust(free, held[1], +1)
        own = self.placeholder_room(gang)
        if own:  # what an autoscaler made room for on this gang's behalf is its own to use
            adjust(free, own, +1)
        room = queue.room_for(now.timestamp() + expected if expected is not None else None)
        avoid = self.requeuer.avoided(gang.key, now)
        read = Read(
            self.index.gang_versions[gang.key],
            resolved_key(resolved),
            snapshot.generations.nodes,
            avoid,
            (queue.context(gang.key), room is free),
        )
        if (
            waiting is not None
            and not waiting.decision.timed  # a recovery or stranded clock runs: decided afresh
            and still_valid(waiting, read, snapshot, room)
        ):
            decision = waiting.decision
        else:
            decision = self.decide_for(gang, resolved, snapshot, now, avoid, room=None if room is free else room)
            self.replaced += 1
        if held is not None:
            adjust(free, held[1], -1)
        if own:
            adjust(free, own, -1)
        if reusable(decision, gang):
            if waiting is None or waiting.decision is not decision:
                fits = decision.state == GangState.WAITING_FOR_CAPACITY
                waiting = Waiting(
                    read, decision, capacity(gang, snapshot.eligibility, room, _min_member(resolved)) if fits else {}
                )
            self.store.waits(gang.key, waiting)
        return decision, room

    def hand_over(self, gang: GangView, scheduler: str, snapshot: Snapshot) -> str | None:
        """A gang another gang scheduler places, on an autoscaled cluster: its placeholders while that
        scheduler refuses it for want of room, gone once the room for all of it is there
        (Placeholders.hand_over); what its Gang says of them, or None."""
        if self.placeholders is None or not self.autoscaled():
            return None
        free, eligible = snapshot.free, snapshot.eligibility.names

        def with_own(waiting: Mapping[shapes.Shape, int]) -> dict[shapes.Shape, int]:
            # copied only for a gang that waits (every pass visits the running ones too)
            whole = {node: dict(room) for node, room in free.items()}
            adjust(whole, self.placeholder_room(gang), +1)
            return on_free_room(waiting, eligible, whole)

        return self.placeholders.hand_over(
            gang, scheduler, lambda waiting: on_free_room(waiting, eligible, free), with_own
        )

    def placeholder_room(self, gang: GangView) -> dict[str, dict[str, int]]:
        """Node -> the requests of the gang's placeholders (its Gang's own) bound there."""
        room: dict[str, dict[str, int]] = {}
        if gang.key not in self.index.placeholders:
            return room
        owner = self.gang_objects.get(gang.namespace, gang.name) or {}
        for node, units in self.index.placeholders_of(
            gang.key, str(owner.get("metadata", {}).get("uid") or "")
        ).values():
            if node:
                node_room = room.setdefault(node, {})
                for name, amount in units:
                    node_room[name] = node_room.get(name, 0) + amount
        return room

    def _queued(
        self,
        gang: GangView,
        resolved: Resolved,
        decision: Decision,
        snapshot: Snapshot,
        now: dt.datetime,
        queue: QueuePass,
        room: Mapping[str, Mapping[str, int]],
        expected: float | None,
        claim_until: dt.datetime | None,
    ) -> Decision:
        """The placement as the queue lets it stand: its turn taken (fifo, backfill, reservations), the head
        of the line bounded, a broken claim reported, lower gangs preempted for it."""
        # only a gang that waits takes a place in the queue with its members (queue.take_turn): a
        # 1,000-pod gang's list, made on every turn, was a twentieth of the controller's CPU
        waits = decision.state == GangState.WAITING_FOR_CAPACITY
        members = [Member(p.name, p.shape) for p in gang.pods if p.gated and not p.terminal] if waits else []
        spread = resolved.spec.spread if resolved.spec is not None else False
        domains = resolved.spec.domains() if resolved.spec is not None else None
        backfill = room is not snapshot.free
        decision = take_turn(queue, gang.key, decision, members, spread, backfill, expected, domains)
        self.bound_head_of_line(gang.key, decision, queue, now)
        overtaken = queue.head.gang if queue.head is not None else None
        decision = overran_claim(
            decision,
            claim_until,
            now,
            seen_from(gang.key, overtaken) if overtaken is not None else None,
            resolved.spec is not None and resolved.spec.evictable,
            [p.name for p in gang.pods if not p.terminal] if claim_until is not None else [],
        )
        if self.preemptor is not None and decision.state == GangState.WAITING_FOR_CAPACITY:
            decision = self.preemptor.consider(gang, resolved, decision, snapshot, now)
        if decision.state == GangState.RELEASE and expected is not None and overtaken is not None:
            # released while a gang ahead waits on a reservation, which its claim said it would not delay
            decision = replace(decision, claim_until=now + dt.timedelta(seconds=expected))
        return decision

    def _act(
        self,
        gang: GangView,
        resolved: Resolved,
        decision: Decision,
        snapshot: Snapshot,
        now: dt.datetime,
        queue: QueuePass,
    ) -> None:
        if decision.state == GangState.RELEASE:
            if decision.reserve:
                self.store.reserve(gang.key, now, decision.reserve)
                adjust(snapshot.free, decision.reserve, -1)
            self.releaser.release(gang, resolved, decision, snapshot.free, snapshot.ports, now)
            snapshot.released(gang, decision.release.values())
            queue.released()
        elif decision.state == GangState.TIMED_OUT:
            self.requeuer.time_out(gang, resolved, decision, now)
        elif decision.state == GangState.REPAIR:
            self.requeuer.repair(gang, resolved, decision, now)

    def bound_head_of_line(self, key: str, decision: Decision, queue: QueuePass, now: dt.datetime) -> None:
        decision.message += self.head_of_line.after_turn(
            key,
            decision.state == GangState.WAITING_FOR_CAPACITY,
            decision.state == GangState.QUEUED,
            queue.holds_open_ended(key),
            now,
        )

    def finish_releases(self) -> None:
        """The pass's release PATCHes landed (sent side by side across its gangs): the pods as answered
        go into the index, so the next pass knows them released before the watch delivers them; trimmed
        as the watch's are (what the index keeps of a pod is the same whichever brought it)."""
        self.index.own_writes([(version, trim_pod(pod)) for version, pod in self.releaser.finish()])

    def apply_reservations(self, snapshot: Snapshot, now: dt.datetime) -> float | None:
        """Take the capacity kept for members to come out of what other gangs may use. A reservation ends
        when those members are released (they then hold capacity as pods), when the gang is gone, or after the
        default timeout (a driver that never asks for its executors must not hold them forever). Returns
        when the first reservation left runs out."""
        ends = []
        for key, (since, reserve) in self.store.reservations():
            gang = snapshot.gangs.get(key)
            # members beyond the first that were released: from then on they hold capacity as pods
            arrived = sum(1 for view in gang.pods if not view.terminal and not view.gated) - 1 if gang else 0
            expected = sum(units.get(shapes.PODS, 0) for units in reserve.values())  # one `pods` each
            expired = (now - since).total_seconds() > DEFAULT_TIMEOUT_SECONDS
            if gang is None or expired or arrived >= expected:
                self.store.end_reservation(key)
                snapshot.grown.update(reserve)  # room again for the gangs that wait
                continue
            adjust(snapshot.free, reserve, -1)
            ends.append(since.timestamp() + DEFAULT_TIMEOUT_SECONDS + 0.001)
        return min(ends, default=None)

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
        `gangkeeper explain` prints. A gang whose pods share one claim is placed inside the nodes one
        allocation of it reaches, each in turn until one holds the gang (observe/devices.py)."""
        reaches = shared_reaches(snapshot.index, gang) if resolved.spec is not None else None
        if not reaches:
            return with_selector_problems(
                snapshot.index, gang, self._decide_for(gang, resolved, snapshot, now, avoid, room)
            )
        everywhere = frozenset(n.name for n in snapshot.nodes)
        first: Decision | None = None
        for reach in reaches:
            decision = self._decide_for(gang, resolved, snapshot, now, avoid | (everywhere - reach), room)
            if decision.state == GangState.RELEASE:
                return decision
            first = first or decision
        assert first is not None
        return first

    def _decide_for(
        self,
        gang: GangView,
        resolved: Resolved,
        snapshot: Snapshot,
        now: dt.datetime,
        avoid: frozenset[str] = frozenset(),
        room: Mapping[str, Mapping[str, int]] | None = None,
    ) -> Decision:
        if resolved.spec is None:
            return Decision(GangState.UNKNOWN, f"cannot size the gang: {resolved.problem}", present=len(gang.pods))
        books = self.gang_objects.books(gang.namespace, gang.name)
        nodes = snapshot.nodes
        eligibility: Eligibility | None = snapshot.eligibility
        if avoid:
            nodes, eligibility = [n for n in nodes if n.name not in avoid], None
        return decide(
            gang.pods,
            resolved.spec,
            nodes,
            snapshot.free,
            now,
            books.not_before,
            used_ports=snapshot.ports,
            eligibility=eligibility,
            without_lower_priority=snapshot.without_lower_priority,
            room=room,
            ever=snapshot.index.ever
            if not avoid and resolved.spec.topology is None and resolved.spec.workload_topology is None
            else None,
            history=books.history,
            records=self.gang_objects.releases(gang.namespace, gang.name),
            workload_nodes=snapshot.workload_nodes(gang)
            if resolved.spec.workload_topology is not None
            else frozenset(),
            devices_fit=devices_check(snapshot.index, gang, self.store.record(gang.key)),
            going=snapshot.index.going,
            yielding=snapshot.index.yielding,
        )


def _min_member(resolved: Resolved) -> int | None:
    return resolved.spec.min_member if resolved.spec is not None else None
