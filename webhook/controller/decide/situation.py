"""One gang as the rules see it: its spec (from its workload), its history (from its Gang object's
books), the states it can be in, the decision the rules make, and the situation they judge."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from webhook.controller.decide import placement, whole_groups
from webhook.controller.decide.eligibility import Domains, Eligibility
from webhook.controller.decide.placement import Member, Placement
from webhook.controller.decide.pods import DEFAULT_RECOVERY_SECONDS, DEFAULT_TIMEOUT_SECONDS, PodView, Release
from webhook.controller.decide.shapes import HostPort, Node, Shape
from webhook.gangs.model import Topology, WholeGroups


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
    restarts_whole: str = ""  # its workload's own policy that recreates it whole (gangs/model.py Gang), said
    whole_groups: WholeGroups | None = None  # pods released only together, group by group (whole_groups.py)

    def domains(self, near: Iterable[str] = (), workload_near: Iterable[str] = ()) -> Domains | None:
        """The topology for a placement of this gang, with the nodes its running members hold and those
        its workload's other gangs hold."""
        outer = self.workload_topology
        within = (
            Domains(outer.key, outer.required, frozenset(near) | frozenset(workload_near))
            if outer is not None
            else None
        )
        if self.topology is None:
            return within
        return Domains(self.topology.key, self.topology.required, frozenset(near), within)


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
    FINISHED = "Finished"  # every pod Succeeded or Failed (a Job's pods stay until the Job goes)
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
    whole: int = 0  # a short gang: the members it was whole with (its books' ranWith, or its release's)
    timed: bool = False  # it changes with time alone (a recovery or stranded clock runs): never reused
    # released by backfill on its expected-seconds: it promised to be done by then (None: not backfilled)
    claim_until: dt.datetime | None = None
    claim_broken: bool = False  # requeued for running past that promise: its claims are no longer believed
    rule: str = ""  # the start rule that decided (state.START_RULES), for explain and the table tests
    refused_on: tuple[str, ...] = ()  # nodes the scheduler refused pinned pods on: not planned again for a while


def overcommitted(free: Mapping[str, int] | None) -> bool:
    return free is None or any(amount < 0 for amount in free.values())


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
    finished: int = 0  # pods that Succeeded or Failed
    # the devices the chosen pods claim, allocated on the chosen nodes (pod name -> node): None, or why
    # not (observe/devices.py DevicesCheck); None when no pod of the gang claims devices
    devices_fit: Callable[[Mapping[str, str]], str | None] | None = None
    # node -> what pods being deleted there still hold (ClusterIndex.going): room on its way back
    going: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # node -> what placeholders bound there hold (ClusterIndex.yielding): room a pod that may preempt takes
    yielding: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

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
        return self._as_members(self.gated)

    def _as_members(self, pods: Sequence[PodView]) -> list[Member]:
        return [Member(p.name, p.shape) for p in whole_groups.grouped(pods, self.spec.whole_groups)]

    @cached_property
    def phantoms(self) -> list[Member]:
        """Members still to come, placed alongside but never released (they do not exist yet), so the
        driver of a Spark application starts only where its executors will fit too."""
        if self.released:
            return []
        return [Member(f"(later {i})", shape) for i, shape in enumerate(self.spec.later)]

    @cached_property
    def domains(self) -> Domains | None:
        near = (node for p in self.released if (node := p.holds_node) is not None)
        return self.spec.domains(near, self.workload_nodes)

    @cached_property
    def placed(self) -> Placement:
        """Where the gated members (and those to come) go on the capacity the queue lets this gang use:
        with roles, every role's minimum first and alone, then the groups above it (whole_groups.py)."""
        first, then = whole_groups.minimum_first(self.live, self.spec.whole_groups)
        return placement.place(
            [*self._as_members(first), *self.phantoms],
            self.nodes,
            self.free if self.room is None else self.room,
            used_ports=self.used_ports,
            spread=self.spec.spread,
            eligibility=self.eligibility,
            domains=self.domains,
            then=self._as_members(then),
        )
