"""What the controller knows of a gang's pods, and what to do next: pure functions, no API calls.

A release is a two-phase commit. Phase one decides nodes for the whole gang at once and records them,
with the release time, in the gang's Gang object; phase two pins each pod to its node (a required node affinity
term on metadata.name, `pin_terms`) and lifts its gate in one PATCH per pod. A controller that dies between two
PATCHes loses nothing: pods already released are recognised by their record, their capacity counts as
taken, and the rest of the gang is placed around them on the next pass.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType
from typing import Any

from webhook import contract
from webhook.controller import interning, placement
from webhook.controller.placement import Eligibility, HostPort, Member, Node, Placement, Shape
from webhook.gangs.model import Topology
from webhook.gangs.pod import member_group

HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_TIMEOUT_SECONDS = 300  # what the native gang scheduler waits at Permit
# how long a gang that ran whole may run short of minMember before it is requeued whole (the role of
# Kueue's waitForPodsReady.recoveryTimeout, apis/config/v1beta1/configuration_types.go)
DEFAULT_RECOVERY_SECONDS = 120
# Release PATCHes in flight at once: each waits on the API server, not on the controller. On the real
# one (bench/cluster.py, 5,000 KWOK nodes, 1.36.3, 3 rounds each) 64 lifted a 1,000-pod gang's gates
# over 8.7-11.1 s against 11.1-12.9 s at 16, and ran 50 gangs of 20 in 19.7-20.5 s against 21.1-21.5 s.
RELEASE_CONCURRENCY = 64


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    # a time without a zone (written by hand) cannot be compared with the clock's: unreadable
    return moment if moment.tzinfo is not None else None


def format_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_EMPTY: Mapping[str, str] = MappingProxyType({})
_EMPTY_RECORDS: Mapping[str, Release] = MappingProxyType({})
# (id of canonical containers (interning), the other fields placement reads) -> their shape
_SHAPES: dict[tuple[int, str], Shape] = {}
# besides the containers, what Shape.from_pod_spec reads: two pods with the same containers and
# different affinity, selectors or tolerations have different shapes
_CONSTRAINT_FIELDS = (
    "affinity",
    "nodeSelector",
    "tolerations",
    "topologySpreadConstraints",
    "hostNetwork",
    "volumes",
    "resourceClaims",
)


def shape_of(spec: Mapping[str, Any]) -> Shape:
    """The pod's scheduling shape, computed once per distinct canonical container list and constraints."""
    containers = spec.get("containers")
    plain = not (spec.get("initContainers") or spec.get("overhead") or spec.get("resources"))
    if plain and containers is not None and interning.is_canonical(containers):
        constraints = {f: spec[f] for f in _CONSTRAINT_FIELDS if spec.get(f)}
        key = (id(containers), json.dumps(constraints, sort_keys=True) if constraints else "")
        shape = _SHAPES.get(key)
        if shape is None:
            shape = _SHAPES[key] = Shape.from_pod_spec(spec)
        return shape
    return Shape.from_pod_spec(spec)


@dataclass(frozen=True, slots=True)
class Release:
    """The controller's record of one released pod (its Gang's status): where its capacity is held, since when."""

    uid: str
    node: str
    at: dt.datetime


def _gated(spec: Mapping[str, Any]) -> bool:
    return any(g.get("name") == contract.GATE for g in spec.get("schedulingGates") or [])


def _controller_ref(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None)


def _copied(strings: Mapping[str, str] | None) -> Mapping[str, str]:
    return dict(strings) if strings else _EMPTY


def _shape_or_one_pod(spec: Mapping[str, Any]) -> Shape:
    try:
        return shape_of(spec)
    except ValueError:  # requests that do not parse: the pod counts as one pod, nothing more
        return Shape(requests=(("pods", 1),))


def _refused_by_scheduler(status: Mapping[str, Any]) -> bool:
    """PodScheduled=False with reason Unschedulable."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in status.get("conditions") or []
    )


def gang_priority(priorities: Iterable[int]) -> int:
    """A gang's priority is its least important member's: it may preempt only what each of its pods could
    (one pod in a rationed PriorityClass lends the gang nothing), and it is preempted, and queued, at
    that priority too. kube-scheduler preempts each pod at its own priority; a gang goes whole, so its
    one priority is the one every member has at least."""
    return min(priorities, default=0)


@dataclass(frozen=True, slots=True)
class PodView:
    """The parts of a pod the controller acts on."""

    namespace: str
    name: str
    uid: str
    group: str
    gated: bool  # still behind gangkeeper's gate
    node_name: str | None  # bound to this node
    pinned_node: str | None  # the node its release pinned it to (`pinned_to`)
    released_at: dt.datetime | None
    created_at: dt.datetime | None
    terminal: bool  # Succeeded, Failed, or being deleted: no longer a member of its gang
    finished: bool  # Succeeded or Failed: no longer holds its node
    shape: Shape
    owner: Mapping[str, Any] | None
    resource_version: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0  # spec.priority, resolved from priorityClassName at admission
    unschedulable: bool = False  # PodScheduled=False, reason Unschedulable: the scheduler refused it
    planned_node: str | None = None  # where its release promised it capacity (the Gang's record)
    succeeded: bool = False  # phase Succeeded: its work is done (a Job's wave ends), not lost
    preempts: bool = True  # spec.preemptionPolicy (from its PriorityClass) is not Never

    @staticmethod
    def from_api(pod: Mapping[str, Any], release: Release | None = None, group: str | None = None) -> PodView:
        """The pod as the controller sees it. Released or not, and where, is the controller's own record
        (its Gang's status), matched by uid: nothing the pod's owner writes on it can say so. Its gang is
        the one it is a member of by identity (`member_group`, given when already worked out), never
        the one its labels name alone."""
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        gated = _gated(spec)
        # a record of an earlier pod of the same name (a StatefulSet's), or of a pod gated again, is not this one's
        mine = release if release is not None and release.uid == meta.get("uid") and not gated else None
        phase = status.get("phase")
        return PodView(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            group=member_group(dict(pod)) if group is None else group,
            gated=gated,
            node_name=spec.get("nodeName") or None,
            pinned_node=pinned_to(spec),
            released_at=mine.at if mine is not None else None,
            created_at=parse_time(meta.get("creationTimestamp")),
            terminal=phase in ("Succeeded", "Failed") or bool(meta.get("deletionTimestamp")),
            finished=phase in ("Succeeded", "Failed"),
            shape=_shape_or_one_pod(spec),
            owner=_controller_ref(meta),
            resource_version=meta.get("resourceVersion", ""),
            annotations=_copied(meta.get("annotations")),
            labels=_copied(meta.get("labels")),
            priority=int(spec.get("priority") or 0),
            unschedulable=_refused_by_scheduler(status),
            planned_node=mine.node if mine is not None else None,
            succeeded=phase == "Succeeded",
            preempts=spec.get("preemptionPolicy") != "Never",
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def units(self) -> dict[str, int]:
        return dict(self.shape.requests)

    @property
    def holds_node(self) -> str | None:
        """The node whose capacity this pod takes: where it is bound, or where it was promised. A pod being
        deleted still holds its node until it is gone, as in kube-scheduler's cache."""
        if self.finished:
            return None
        if self.terminal and not self.node_name:
            return None
        if self.node_name:
            return self.node_name
        if not self.gated and self.released_at is not None:
            # promised: where placement planned it (pinned there, or its capacity reserved there)
            return self.planned_node or self.pinned_node
        return None


@dataclass(frozen=True)
class GangSpec:
    min_member: int
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    evictable: bool = True  # False for bare pods: nobody would recreate them
    later: tuple[Shape, ...] = ()  # members created once the first run (Spark executors): must fit too
    spread: bool = False  # serving replicas: one pod per node in turn rather than packed
    expected_seconds: float | None = None  # how long it runs once started, when the workload says
    recovery_seconds: int = DEFAULT_RECOVERY_SECONDS  # how long it may run short after it ran whole
    topology: Topology | None = None  # all its pods in one domain of a node label (required or preferred)
    workload_topology: Topology | None = None  # all its workload's gangs in one domain of a broader label

    def domains(self, near: Iterable[str] = (), workload_near: Iterable[str] = ()) -> placement.Domains | None:
        """The topology for a placement of this gang, with the nodes its running members hold and those
        its workload's other gangs hold."""
        outer = self.workload_topology
        within = (
            placement.Domains(outer.key, outer.required, frozenset(near) | frozenset(workload_near))
            if outer is not None
            else None
        )
        if self.topology is None:
            return within
        return placement.Domains(self.topology.key, self.topology.required, frozenset(near), within)


@dataclass(frozen=True)
class History:
    """What the gang's Gang object remembers of its run: how many members ran when it last ran whole
    (0: not since it was last requeued), and since when fewer have been running (a member lost)."""

    ran_with: int = 0
    short_since: dt.datetime | None = None


class GangState(StrEnum):
    """Where a gate gang stands; `decide` returns exactly one, by the first of its rules that applies."""

    UNKNOWN = "Unknown"  # the gang cannot be sized (its workload is gone or unreadable)
    TIMED_OUT = "TimedOut"  # released pods did not bind within the timeout
    RUNNING = "Running"  # at least minMember pods bound
    RELEASING = "Releasing"  # released, binding under way
    REPAIR = "Repair"  # pinned pods lost their node to pods bound after the release: replace them now
    WAITING_FOR_MEMBERS = "WaitingForMembers"  # fewer than minMember pods exist
    BACKOFF = "Backoff"  # requeued after a timeout; waiting out the backoff
    RELEASE = "Release"  # the whole gang fits now: release it
    NEVER_FITS = "NeverFits"  # could not fit even on the empty cluster
    WAITING_FOR_CAPACITY = "WaitingForCapacity"  # would fit an emptier cluster
    QUEUED = "Queued"  # fits, but the queue policy keeps it behind a gang that waits longer
    GAVE_UP = "GaveUp"  # requeued the most times allowed; the workload stays suspended


@dataclass
class Decision:
    state: GangState
    message: str
    release: dict[str, str] = field(default_factory=dict)  # pod name -> node
    evict: list[str] = field(default_factory=list)
    placement: Placement | None = None
    present: int = 0
    unmodelled: tuple[str, ...] = ()
    whole_gang: bool = False  # a timeout of the gang itself (requeue the workload), not of late newcomers
    reserve: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> units kept for members to come
    preempt_nodes: tuple[str, ...] = ()  # where lower-priority pods would have to go for the gang to fit
    position: int = 0  # place among the gangs waiting in the queue (1: the head), 0 when not waiting
    reservation: str = ""  # the head of the queue: where and from when it is expected to fit
    short: bool = False  # the gang ran whole and has fewer than minMember members running now
    timed: bool = False  # it changes with time alone (a recovery or stranded clock runs): never reused
    # released by backfill on its expected-seconds: it promised to be done by then (None: not backfilled)
    claim_until: dt.datetime | None = None
    claim_broken: bool = False  # requeued for running past that promise: its claims are no longer believed
    rule: str = ""  # the start rule that decided (state.START_RULES), for explain and the table tests


def _overcommitted(free: Mapping[str, int] | None) -> bool:
    return free is None or any(amount < 0 for amount in free.values())


def decide(
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
    history: History = History(),
    records: Mapping[str, Release] = _EMPTY_RECORDS,
    workload_nodes: frozenset[str] = frozenset(),
) -> Decision:
    """The next step for one gang: the start rules (`start_decision`), then recovery (`recover`)."""
    decision = start_decision(
        pods,
        spec,
        nodes,
        free,
        now,
        not_before,
        used_ports=used_ports,
        eligibility=eligibility,
        without_lower_priority=without_lower_priority,
        room=room,
        ever=ever,
        records=records,
        workload_nodes=workload_nodes,
    )
    if stranded_since([p for p in pods if not p.terminal], spec, records) is not None:
        decision.timed = True
    return recover(decision, pods, spec, history, now)


# decisions that already act on a short gang (its replacement released, bound or thrown back): the
# recovery clock keeps running under them, but they are not overruled
_ACTING = frozenset({GangState.RELEASE, GangState.RELEASING, GangState.TIMED_OUT, GangState.REPAIR})


def recover(
    decision: Decision, pods: Sequence[PodView], spec: GangSpec, history: History, now: dt.datetime
) -> Decision:
    """A gang that ran whole and now has fewer than minMember members running (one preempted, its node
    lost, OOM-killed) is short. A replacement that fits is released as any gated member; a gang still
    short `recovery_seconds` after it first was is requeued whole (`whole_gang`), never left partly
    running: the failure gangs exist to prevent (Kueue's waitForPodsReady.recoveryTimeout, Volcano's
    PodEvicted -> RestartJob)."""
    live = [p for p in pods if not p.terminal]
    running = sum(1 for p in live if p.node_name)
    # members that ran and never left keep it whole: a scale-up's newcomers that wait are not a loss
    # (they go back alone at their timeout), nor is a Job's next wave once members succeeded
    whole = min(spec.min_member, history.ran_with)
    if running >= whole or any(p.succeeded for p in pods) or decision.state in (GangState.RUNNING, GangState.GAVE_UP):
        return decision
    decision.short = decision.timed = True
    since = history.short_since or now
    elapsed = max(0.0, (now - since).total_seconds())
    lost = f"lost a member: {running} of {whole} running"
    if elapsed < spec.recovery_seconds:
        if decision.state != GangState.RELEASE:
            left = spec.recovery_seconds - elapsed
            decision.message = f"{lost}, requeued whole in {left:.0f}s unless it is whole again; {decision.message}"
        return decision
    if decision.state == GangState.TIMED_OUT and decision.whole_gang:
        return decision
    return Decision(
        GangState.TIMED_OUT,
        f"{lost} for {elapsed:.0f}s (recovery timeout {spec.recovery_seconds}s): the whole gang is requeued",
        evict=[p.name for p in live] if spec.evictable else [],
        present=len(live),
        whole_gang=True,
        short=True,
        timed=True,
    )


@dataclass(frozen=True)
class Situation:
    """What the start rules read about one gang, computed once per decision (the rules are pure)."""

    spec: GangSpec
    nodes: Sequence[Node]
    free: Mapping[str, Mapping[str, int]]
    now: dt.datetime
    not_before: dt.datetime | None
    used_ports: Mapping[str, Iterable[HostPort]] | None
    eligibility: Eligibility | None
    without_lower_priority: Callable[[int], Mapping[str, Mapping[str, int]] | None] | None
    room: Mapping[str, Mapping[str, int]] | None
    ever: Callable[[Sequence[Member]], Placement] | None
    records: Mapping[str, Release]
    workload_nodes: frozenset[str]
    live: list[PodView]

    @cached_property
    def gated(self) -> list[PodView]:
        return [p for p in self.live if p.gated]

    @cached_property
    def released(self) -> list[PodView]:
        return [p for p in self.live if not p.gated]

    @cached_property
    def bound(self) -> list[PodView]:
        return [p for p in self.released if p.node_name]

    @property
    def present(self) -> int:
        return len(self.live)

    def evict(self, pods: Iterable[PodView]) -> list[str]:
        """Whom to delete: nobody recreates bare pods, so they are only reported."""
        return [p.name for p in pods] if self.spec.evictable else []

    @cached_property
    def members(self) -> list[Member]:
        return [Member(p.name, p.shape) for p in self.gated]

    @cached_property
    def phantoms(self) -> list[Member]:
        """Members still to come, placed alongside but never released (they do not exist yet), so the
        driver of a Spark application starts only where its executors will fit too."""
        if self.released:
            return []
        return [Member(f"(later {i})", shape) for i, shape in enumerate(self.spec.later)]

    @cached_property
    def domains(self) -> placement.Domains | None:
        near = (node for p in self.released if (node := p.holds_node) is not None)
        return self.spec.domains(near, self.workload_nodes)

    @cached_property
    def placed(self) -> Placement:
        """Where the gated members (and those to come) go on the capacity the queue lets this gang use."""
        return placement.place(
            self.members + self.phantoms,
            self.nodes,
            self.free if self.room is None else self.room,
            used_ports=self.used_ports,
            spread=self.spec.spread,
            eligibility=self.eligibility,
            domains=self.domains,
        )


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
    gone), or that the scheduler marked Unschedulable, will never bind there: those pods alone are replaced."""
    stolen = [
        p
        for p in s.released
        if not p.node_name and p.pinned_node and (p.unschedulable or _overcommitted(s.free.get(p.pinned_node)))
    ]
    if not stolen:
        return None
    nodes_lost = sorted({p.pinned_node for p in stolen if p.pinned_node})
    return Decision(
        GangState.REPAIR,
        f"{len(stolen)} released pods can no longer bind on the {len(nodes_lost)} node"
        f"{'s' if len(nodes_lost) != 1 else ''} they were given "
        "(taken by pods bound since, or refused by the scheduler)"
        + ("; replacing them" if s.spec.evictable else "; bare pods: delete and recreate them"),
        evict=s.evict(stolen),
        present=s.present,
    )


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
    enough = result.complete or len(result.assignments) - len(phantoms) + len(s.released) >= s.spec.min_member
    if not (later_fit and enough):
        return None
    phantom_names = {m.name for m in phantoms}  # not a valid pod name: no clash with a real one
    chosen = {name: node for name, node in result.assignments.items() if name not in phantom_names}
    reserve: dict[str, dict[str, int]] = {}
    for phantom in phantoms:
        node_units = reserve.setdefault(result.assignments[phantom.name], {})
        for resource, amount in phantom.shape.requests:
            node_units[resource] = node_units.get(resource, 0) + amount
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
    nothing_gated,
    members_missing,
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
    records: Mapping[str, Release] = _EMPTY_RECORDS,
    workload_nodes: frozenset[str] = frozenset(),
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
    )
    for rule in START_RULES:
        decision = rule(situation)
        if decision is not None:
            decision.rule = rule.__name__
            return decision
    raise AssertionError("waits_for_capacity always decides")


# how long past its expected-seconds a backfilled gang may run before the gang it overtook is owed its
# capacity (a run time is an estimate; Slurm's OverTimeLimit plays this part)
CLAIM_GRACE_SECONDS = 60


def overran_claim(
    decision: Decision,
    claim_until: dt.datetime | None,
    now: dt.datetime,
    overtaken: str | None,
    evictable: bool,
    live: Sequence[str],
) -> Decision:
    """A gang backfilled ahead of the queue's head on the strength of its gangkeeper.io/expected-seconds,
    still running past that claim (and a grace) while the head waits on a reservation: requeued whole,
    so a claim that proves false costs the gang that made it, not the gang it overtook; its later claims
    are not believed (it is never backfilled again)."""
    if decision.state != GangState.RUNNING or claim_until is None or overtaken is None:
        return decision
    late = (now - claim_until).total_seconds()
    if late <= CLAIM_GRACE_SECONDS:
        return decision
    return Decision(
        GangState.TIMED_OUT,
        f"ran {late:.0f}s past its gangkeeper.io/expected-seconds claim (backfilled ahead of {overtaken}, "
        f"which waits for the capacity it holds): requeued whole; its run-time claims are no longer believed",
        evict=list(live) if evictable else [],
        present=decision.present,
        whole_gang=True,
        claim_broken=True,
    )


def stranded_since(live: Sequence[PodView], spec: GangSpec, records: Mapping[str, Release]) -> dt.datetime | None:
    """When a release left members behind: pods whose release was recorded (`records`, the Gang's; the
    record comes before the PATCH) are still gated, that PATCH answered 500, 429 or never answered and
    the node perhaps taken since, while the gang cannot run without them. None when no release stranded
    anyone; pods never released (a scale-up's, a lost member's replacement) are not stranded."""
    stranded = [
        record.at for p in live if p.gated and (record := records.get(p.name)) is not None and record.uid == p.uid
    ]
    if not stranded or sum(1 for p in live if not p.gated) >= spec.min_member:
        return None
    return min(stranded)


def ever_placement(
    members: Sequence[Member],
    nodes: Sequence[Node],
    eligibility: Eligibility | None = None,
    domains: placement.Domains | None = None,
) -> Placement:
    """Where the gang would go on the empty cluster, with taints lifted and cordons undone (which admins
    do routinely): if it does not fit even there, it never will. A running gang's domain counts as
    free of it: on the emptied cluster the whole gang could move."""
    if any(n.taints or n.unschedulable for n in nodes):
        nodes, eligibility = [replace(n, taints=(), unschedulable=False) for n in nodes], None
    if domains is not None:  # on the emptied cluster the whole gang, and its workload, could move
        within = replace(domains.within, near=frozenset()) if domains.within is not None else None
        domains = replace(domains, near=frozenset(), within=within)
    empty = {n.name: n.allocatable for n in nodes}
    return placement.place(members, nodes, empty, eligibility=eligibility, domains=domains)


# the pin: node affinity on the node's name. kube-scheduler's NodeAffinity PreFilter narrows the nodes it
# filters to the names every required term lists this way, and for nothing else (a nodeSelector on
# kubernetes.io/hostname is checked on every node: 5,000 Filter calls per pinned pod on 5,000 nodes);
# k8s.io/kubernetes pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go, PreFilter
NODE_NAME_FIELD = "metadata.name"


def _pins(requirement: Mapping[str, Any]) -> str | None:
    values = requirement.get("values") or []
    if requirement.get("key") == NODE_NAME_FIELD and requirement.get("operator") == "In" and len(values) == 1:
        return str(values[0])
    return None


def _required_terms(spec: Mapping[str, Any]) -> list[Any]:
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    return list((affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])


def pin_terms(terms: Sequence[Mapping[str, Any]], node: str) -> list[dict[str, Any]]:
    """The pod's required node terms with the pin added. A gated pod's terms may only grow (KEP-3838,
    pkg/apis/core/validation/validation.go validateNodeAffinityMutation): none become one term of the
    pin alone; each term gets the pin ANDed in; a term with no requirement (it matches no node, and may
    gain none) stays as it is."""
    pin = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    if not terms:
        return [{"matchFields": [pin]}]
    pinned = []
    for term in terms:
        term = dict(term)
        if term.get("matchExpressions") or term.get("matchFields"):
            term["matchFields"] = [*(term.get("matchFields") or []), pin]
        pinned.append(term)
    return pinned


def pinned_to(spec: Mapping[str, Any]) -> str | None:
    """The node a release pinned the pod to: the one node every required term with a requirement names
    by its last metadata.name requirement (what `pin_terms` appends); a pod pinned by an earlier version
    carries nodeSelector kubernetes.io/hostname instead."""
    named = {
        _pins((term.get("matchFields") or [{}])[-1])
        for term in _required_terms(spec)
        if term.get("matchExpressions") or term.get("matchFields")
    }
    if len(named) == 1 and None not in named:
        return named.pop()
    return (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL)


def release_patch(pod: PodView, node: str | None, spec: Mapping[str, Any]) -> dict[str, Any]:
    """One merge patch: pin to the node (None: no pin, the capacity held where the Gang's record says),
    lift gangkeeper's gate; guarded by resourceVersion so a pod changed since it was read is left for the
    next pass (the terms it extends are the ones it read). The release itself is recorded in the Gang's
    status before this is sent."""
    remaining = [dict(g) for g in spec.get("schedulingGates") or [] if g.get("name") != contract.GATE]
    patch: dict[str, Any] = {"schedulingGates": remaining or None}
    if node is not None:
        terms = pin_terms(_required_terms(spec), node)
        # a merge patch replaces the list and merges the maps around it: the rest of the affinity stays
        required = {"nodeSelectorTerms": terms}
        patch["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    return {"metadata": {"resourceVersion": pod.resource_version}, "spec": patch}


def backoff_seconds(attempts: int, base: int = 30, cap: int = 900) -> int:
    return int(min(cap, base * 2 ** max(attempts - 1, 0)))
