"""The start rules: what to do with a gang that is not running whole, the first rule of START_RULES that
applies (a rule table, read top to bottom in docs/controller.md's order). The controller and `gangkeeper
explain` both ask `start_decision`, so they never disagree."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence

from webhook import contract
from webhook.controller.decide import placement, whole_groups
from webhook.controller.decide.eligibility import Eligibility
from webhook.controller.decide.placement import Member, Placement
from webhook.controller.decide.pods import EMPTY_RECORDS, PodView, Release, format_time, gang_priority
from webhook.controller.decide.recovery import ever_placement, stranded_since
from webhook.controller.decide.shapes import HostPort, Node
from webhook.controller.decide.situation import Decision, GangSpec, GangState, Situation, overcommitted


def late_release(s: Situation) -> Decision | None:
    """Rule 1: a pod released more than `timeout_seconds` ago and still unbound has timed out. When
    members released earlier are bound (the gang has run: a replacement, a scale-up, a rolling update
    came late) only the late pods go back; otherwise the whole gang is requeued."""
    timeout = s.spec.timeout_seconds
    late = [
        p for p in s.released if not p.node_name and p.released_at and (s.now - p.released_at).total_seconds() > timeout
    ]
    if not late:
        return None
    first_late = min(p.released_at for p in late if p.released_at)
    established = [p for p in s.bound if p.released_at is None or p.released_at < first_late]
    if established:
        return Decision(
            GangState.TIMED_OUT,
            f"{len(late)} newly released pods not scheduled within {timeout}s; "
            f"the {len(established)} running members stay",
            evict=s.evict(late),
            present=s.present,
        )
    return Decision(
        GangState.TIMED_OUT,
        f"{len(s.released) - len(s.bound)} of {len(s.released)} released pods not scheduled within {timeout}s",
        evict=s.evict(s.live),
        present=s.present,
        whole_gang=True,
    )


def stranded_release(s: Situation) -> Decision | None:
    """Rule 1b: members a release left gated (its PATCH failed) for `timeout_seconds` while the gang
    cannot run without them: the whole gang is requeued."""
    stranded = stranded_since(s.live, s.spec, s.records)
    if stranded is None or (s.now - stranded).total_seconds() <= s.spec.timeout_seconds:
        return None
    return Decision(
        GangState.TIMED_OUT,
        f"{len(s.gated)} members of the release at {format_time(stranded)} are still gated after "
        f"{s.spec.timeout_seconds}s (their release was refused or lost) and {len(s.released)} of "
        f"{s.spec.min_member} run without them",
        evict=s.evict(s.live),
        present=s.present,
        whole_gang=True,
    )


def node_taken(s: Situation) -> Decision | None:
    """Rule 2: a pod pinned to a node whose capacity pods bound since have overcommitted (or that is
    gone), or that the scheduler marked Unschedulable, will never bind there: those pods alone are replaced.
    Room that pods being deleted there still hold is on its way back (the placeholders a release deletes
    in its turn, a preempted victim): the scheduler refuses a pod while they go and takes it once they
    are gone, so neither counts until then; a refusal counts once the release is REFUSAL_SETTLE_SECONDS old.
    Room placeholders hold there is the pod's too when it may preempt them: kube-scheduler's preemption
    takes them for it (a waiting gang's placeholder made as another gang is released may bind first: a
    pod whose gates just went is in the scheduler's backoff, a new pod is not). Only the nodes the
    scheduler refused are planned around for a while: one whose room was taken is seen as such."""
    lost = {p.name: why for p in s.released if not p.node_name and p.pinned_node and (why := _lost(s, p))}
    if not lost:
        return None
    stolen = [p for p in s.released if p.name in lost]
    why_lost = {p.pinned_node: lost[p.name] for p in stolen if p.pinned_node}
    nodes_lost = sorted(why_lost)
    named = "; ".join(f"{node}: {LOST_BECAUSE[why_lost[node]]}" for node in nodes_lost[:MAX_NODES_NAMED])
    return Decision(
        GangState.REPAIR,
        f"{len(stolen)} released pods can no longer bind on the {len(nodes_lost)} node"
        f"{'s' if len(nodes_lost) != 1 else ''} they were given ({named}"
        + (f"; {len(nodes_lost) - MAX_NODES_NAMED} more" if len(nodes_lost) > MAX_NODES_NAMED else "")
        + ")"
        + ("; replacing them" if s.spec.evictable else "; bare pods: delete and recreate them"),
        evict=s.evict(stolen),
        present=s.present,
        refused_on=tuple(sorted({p.pinned_node for p in stolen if p.pinned_node and lost[p.name] == REFUSED})),
    )


# how long after its release a pinned pod's refusal by the scheduler is believed: kube-scheduler retries
# a refused pod as soon as a pod on the node goes (its queueing hints), which the controller may see first
REFUSAL_SETTLE_SECONDS = 5.0
# why a pinned pod lost its node: its room is held by others (or the node is gone), or the scheduler said no
TAKEN, REFUSED = "taken", "refused"
LOST_BECAUSE = {
    TAKEN: "what it asks for is taken by pods bound since, or the node is gone",
    REFUSED: "refused by the scheduler",
}
MAX_NODES_NAMED = 3  # in a repair's message


def _lost(s: Situation, pod: PodView) -> str | None:
    """Why the pod can no longer bind on the node it was pinned to (TAKEN, REFUSED), or None."""
    node = pod.pinned_node or ""
    free = s.free.get(node)
    if free is None:
        return TAKEN  # the node is gone
    back = dict(s.going.get(node) or {})
    if pod.preempts and pod.priority > contract.PLACEHOLDER_PRIORITY:
        for name, amount in (s.yielding.get(node) or {}).items():
            back[name] = back.get(name, 0) + amount
    # only what the pod asks for, as kube-scheduler judges it (noderesources/fit.go fitsRequest): the
    # node's devices counted for other pods' claims, no longer counted once those bound, are not its own
    wanted = {name: free.get(name, 0) for name, _ in pod.shape.requests}
    if any(back.values()):
        return TAKEN if overcommitted({name: amount + back.get(name, 0) for name, amount in wanted.items()}) else None
    if overcommitted(wanted):
        return TAKEN
    # refused at least REFUSAL_SETTLE_SECONDS after its release; with no record of the release yet (the
    # Gang's status is written after the pods' gates go: a pass can see them first), not yet: kube-scheduler
    # refuses a pod for a moment while another pod's allocation of a device they share lands, and the
    # refusal's own time says nothing (the condition was False since the pod was gated: lastTransitionTime
    # stays). The real tier's DRA differential saw a release taken back so within a second
    record = s.records.get(pod.name)
    settled = record is not None and (s.now - record.at).total_seconds() >= REFUSAL_SETTLE_SECONDS
    return REFUSED if pod.unschedulable and settled else None


def all_finished(s: Situation) -> Decision | None:
    """Rule 3a: no member left but pods that Succeeded or Failed: the gang's run is over (a Job's pods stay
    until the Job is deleted). A gang whose members failed after it ran is still recovered (`recover`)."""
    if s.live or not s.finished:
        return None
    return Decision(GangState.FINISHED, f"all {s.finished} pods finished", present=0)


def nothing_gated(s: Situation) -> Decision | None:
    """Rule 3: every member released: Running once minMember pods are bound, else Releasing."""
    if s.gated:
        return None
    if len(s.bound) >= s.spec.min_member:
        return Decision(GangState.RUNNING, f"{len(s.bound)} of {s.spec.min_member} pods scheduled", present=s.present)
    return Decision(
        GangState.RELEASING, f"{len(s.bound)} of {len(s.released)} released pods scheduled", present=s.present
    )


def members_missing(s: Situation) -> Decision | None:
    """Rule 4: fewer than minMember pods exist."""
    if s.present >= s.spec.min_member:
        return None
    return Decision(GangState.WAITING_FOR_MEMBERS, f"{s.present} of {s.spec.min_member} pods exist", present=s.present)


def gated_by_others(s: Situation) -> Decision | None:
    """Rule 4b: a gated member still carries another controller's scheduling gate. The one that lifts it
    may set where the pod goes first (Kueue's topology-aware scheduling writes each pod's nodeSelector as
    it removes kueue.x-k8s.io/topology: kueue pkg/controller/tas/topology_ungater.go); a release planned
    before that would pin the pod to a node of its own choosing, which the two constraints together may
    leave no node for. The gang waits until only gangkeeper's gate is left."""
    waiting = [p for p in s.gated if p.other_gates]
    if not waiting:
        return None
    gates = ", ".join(sorted({gate for p in waiting for gate in p.other_gates}))
    return Decision(
        GangState.WAITING_FOR_MEMBERS,
        f"{len(waiting)} of {len(s.gated)} gated pods also carry {gates}: waiting for it to lift",
        present=s.present,
    )


def backing_off(s: Situation) -> Decision | None:
    """Rule 5: within the backoff after a requeue."""
    if s.not_before is None or s.now >= s.not_before:
        return None
    return Decision(GangState.BACKOFF, f"next release attempt after {format_time(s.not_before)}", present=s.present)


def fits(s: Situation) -> Decision | None:
    """Rule 6: the gated pods fit (with those already released, at least minMember), and the members
    to come fit beside them: Release, keeping room for those to come."""
    result, phantoms = s.placed, s.phantoms
    later_fit = all(m.name in result.assignments for m in phantoms)
    phantom_names = {m.name for m in phantoms}  # not a valid pod name: no clash with a real one
    placed = {name: node for name, node in result.assignments.items() if name not in phantom_names}
    chosen = whole_groups.whole(placed, s.live, s.spec.whole_groups)  # a group of several whole, or not at all
    complete = result.complete and len(chosen) == len(placed)
    enough = complete or len(chosen) + len(s.released) >= s.spec.min_member
    enough = enough and not whole_groups.roles_short(chosen, s.live, s.spec.whole_groups)  # every role's minimum
    if not (later_fit and enough) or (placed and not chosen):
        return None
    reserve: dict[str, dict[str, int]] = {}
    for phantom in phantoms:
        node_units = reserve.setdefault(result.assignments[phantom.name], {})
        for resource, amount in phantom.shape.requests:
            node_units[resource] = node_units.get(resource, 0) + amount
    why_not = s.devices_fit(chosen) if s.devices_fit is not None and chosen else None
    if why_not is not None:
        # placement counts devices per class; their allocation, exact, says no: never a partial start
        return Decision(
            GangState.WAITING_FOR_CAPACITY,
            f"{len(chosen)} pods fit on free capacity, but not their devices: {why_not}",
            placement=result,
            present=s.present,
        )
    topology = s.spec.topology
    where = f" in {topology.key} {result.domain}" if topology is not None and result.domain else ""
    return Decision(
        GangState.RELEASE,
        f"releasing {len(chosen)} pods on {len(set(chosen.values()))} nodes{where}",
        release=dict(chosen),
        placement=result,
        present=s.present,
        unmodelled=result.unmodelled,
        reserve=reserve,
    )


def never_fits(s: Situation) -> Decision | None:
    """Rule 7: the gated pods could not fit even the empty cluster ("ever": with taints lifted and
    cordons undone, which admins do routinely): NeverFits."""
    empty = s.ever(s.members) if s.ever is not None else ever_placement(s.members, s.nodes, s.eligibility, s.domains)
    active = len(s.released)
    if empty.complete or len(empty.assignments) + active >= s.spec.min_member:
        return None
    topology = s.spec.topology
    inside = f" inside one {topology.key} domain" if topology is not None and topology.required else ""
    return Decision(
        GangState.NEVER_FITS,
        f"the gang needs {s.spec.min_member} pods and the cluster could hold "
        f"{len(empty.assignments) + active}{inside} even if empty"
        + (f" ({empty.domain_note})" if empty.domain_note else ""),
        placement=empty,
        present=s.present,
    )


def waits_for_capacity(s: Situation) -> Decision:
    """Rule 8, the last: it would fit an emptier cluster: WaitingForCapacity, saying so when it would
    fit once lower-priority pods were preempted (gated pods never trigger preemption)."""
    result, spec = s.placed, s.spec
    message = f"{len(result.assignments) + len(s.released)} of {spec.min_member} pods fit on free capacity"
    if result.domain_note and spec.topology is not None and spec.topology.required:
        message = f"{spec.topology.word} topology: {result.domain_note}"
    short = whole_groups.roles_short(
        whole_groups.whole(result.assignments, s.live, spec.whole_groups), s.live, spec.whole_groups
    )
    if short:  # the roles' minimums bind together or not at all
        message += f"; every role's minimum binds at once, in whole groups that fit: {', '.join(short)}"
    priority = gang_priority(p.priority for p in s.live)
    preempt = _preemption_nodes(s, priority)
    if preempt is not None:
        message += (
            f"; fits if pods of priority below {priority} on {len(preempt)} node{'s' if len(preempt) != 1 else ''} "
            "were preempted: "
            "gated pods never trigger preemption, so it waits for them to end"
        )
    return Decision(
        GangState.WAITING_FOR_CAPACITY, message, placement=result, present=s.present, preempt_nodes=preempt or ()
    )


def _preemption_nodes(s: Situation, priority: int) -> tuple[str, ...] | None:
    """The nodes where the gang would go if every pod below `priority` were gone and that need it to be
    (their free capacity falls short of what the gang would put there); None when it would not fit even so."""
    relaxed = s.without_lower_priority(priority) if s.without_lower_priority is not None else None
    if relaxed is None:
        return None
    hoped = placement.place(
        s.members, s.nodes, relaxed, spread=s.spec.spread, eligibility=s.eligibility, domains=s.domains
    )
    if not hoped.complete:
        return None
    wanted: dict[str, dict[str, int]] = {}
    for member in s.members:
        node_units = wanted.setdefault(hoped.assignments[member.name], {})
        for resource, amount in member.shape.requests:
            node_units[resource] = node_units.get(resource, 0) + amount
    return tuple(
        sorted(
            node
            for node, units in wanted.items()
            if any(s.free.get(node, {}).get(resource, 0) < amount for resource, amount in units.items())
        )
    )


# The start rules, in order: the first that returns a decision decides (its name goes in Decision.rule).
START_RULES: tuple[Callable[[Situation], Decision | None], ...] = (
    late_release,
    stranded_release,
    node_taken,
    all_finished,
    nothing_gated,
    members_missing,
    gated_by_others,
    backing_off,
    fits,
    never_fits,
    waits_for_capacity,
)


def start_decision(
    pods: Sequence[PodView],
    spec: GangSpec,
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    now: dt.datetime,
    not_before: dt.datetime | None = None,
    *,
    used_ports: Mapping[str, Iterable[HostPort]] | None = None,
    eligibility: Eligibility | None = None,
    without_lower_priority: Callable[[int], Mapping[str, Mapping[str, int]] | None] | None = None,
    room: Mapping[str, Mapping[str, int]] | None = None,
    ever: Callable[[Sequence[Member]], Placement] | None = None,
    records: Mapping[str, Release] = EMPTY_RECORDS,
    workload_nodes: frozenset[str] = frozenset(),
    devices_fit: Callable[[Mapping[str, str]], str | None] | None = None,
    going: Mapping[str, Mapping[str, int]] | None = None,
    yielding: Mapping[str, Mapping[str, int]] | None = None,
) -> Decision:
    """The next step for one gang, given its live pods and the nodes' free capacity: the first of
    START_RULES that applies. The controller and `gangkeeper explain` both ask this function, so they
    never disagree.

    `free` is every node's capacity left after the pods bound or promised to it, `used_ports` their host
    ports; `without_lower_priority(p)` gives the free capacity if every pod below priority p were gone;
    `room`, when given, is the part of `free` the queue lets this gang use (backfill behind a reservation).
    """
    situation = Situation(
        spec,
        nodes,
        free,
        now,
        not_before,
        used_ports,
        eligibility,
        without_lower_priority,
        room,
        ever,
        records,
        workload_nodes,
        live=[p for p in pods if not p.terminal],
        finished=sum(1 for p in pods if p.finished),
        devices_fit=devices_fit,
        going=going or {},
        yielding=yielding or {},
    )
    for rule in START_RULES:
        decision = rule(situation)
        if decision is not None:
            decision.rule = rule.__name__
            return decision
    raise AssertionError("waits_for_capacity always decides")
