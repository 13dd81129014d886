"""A simulated cluster replaying trace jobs: through gangkeeper's own decision and queue code, or through
a model of the default kube-scheduler placing pods one by one.

Gang policies call `state.decide` (the function the controller and `explain` use) on gated pod views,
with the queue (`queue.QueuePass`, `queue.take_turn`) deciding whose turn it is; a released gang binds
where it was pinned at once (the scheduler agrees with the pins: tests/fake/test_placement_parity.py) and
runs for its trace duration. Nothing here re-implements placement.

The default scheduler (pkg/scheduler): pods are popped by priority then creation time
(queuesort/priority_sort.go); a pod that fits nowhere goes to the unschedulable pool with a per-pod
backoff of 1 s doubling to 10 s (podInitialBackoffSeconds, podMaxBackoffSeconds) and is tried again
when capacity is freed (a pod deleted moves unschedulable pods back, MoveAllToActiveOrBackoffQueue);
NodeResourcesFit filters; the default LeastAllocated score over cpu and memory ignores GPUs. There is
no gang timeout: a partly bound gang holds its GPUs until it completes, which it may never do.
"""

from __future__ import annotations

import datetime as dt
import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from webhook.controller.decide.eligibility import Eligibility
from webhook.controller.decide.headofline import DEFAULT_BOUND_SECONDS, HeadOfLine
from webhook.controller.decide.placement import Member
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.queue import DEFAULT_DEPTH, Ending, Policy, QueuePass, Reservation, take_turn
from webhook.controller.decide.shapes import Node, Shape
from webhook.controller.decide.situation import Decision, GangSpec, GangState
from webhook.controller.decide.state import decide
from webhook.gangs.model import Topology
from webhook.simulation.trace import TraceJob

GPU = "nvidia.com/gpu"


RACK = "topology.gangkeeper.io/rack"  # the simulated racks' node label


EPOCH = dt.datetime(2017, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class ClusterShape:
    nodes: int = 64
    gpus_per_node: int = 8
    cpus_per_node: int = 64
    memory_gib_per_node: int = 512
    cpus_per_gpu: int = 6  # a pod asks for this much cpu and memory per GPU (the trace gives GPUs only)
    memory_gib_per_gpu: int = 48
    nodes_per_rack: int = 0  # 0: no racks; else nodes labelled RACK in runs of this many

    def rack_of(self, node: str) -> str:
        return f"rack-{int(node.rpartition('-')[2]) // self.nodes_per_rack:03d}" if self.nodes_per_rack else ""

    def node_list(self) -> list[Node]:
        allocatable = {
            "cpu": self.cpus_per_node * 1000,
            "memory": self.memory_gib_per_node * 2**30,
            GPU: self.gpus_per_node,
            "pods": 110,
        }
        names = [f"node-{i:03d}" for i in range(self.nodes)]
        return [
            Node(
                name=name,
                allocatable=dict(allocatable),
                labels={RACK: self.rack_of(name)} if self.nodes_per_rack else {},
            )
            for name in names
        ]

    def pod_units(self, gpus: int) -> dict[str, int]:
        return {
            "cpu": gpus * self.cpus_per_gpu * 1000,
            "memory": gpus * self.memory_gib_per_gpu * 2**30,
            GPU: gpus,
            "pods": 1,
        }


@dataclass
class JobOutcome:
    job: TraceJob
    pods: int
    start: float | None = None
    end: float | None = None
    first_bind: float | None = None
    held_idle_gpu_seconds: float = 0.0  # GPUs bound to its pods before the whole gang ran
    racks: int | None = None  # racks its pods ran on (with a rack model)

    @property
    def wait(self) -> float | None:
        return None if self.start is None else self.start - self.job.arrival


@dataclass
class Sample:
    at: float
    busy_gpus: int  # held by gangs that run
    idle_held_gpus: int  # held by pods of gangs that have not started
    free_gpus: int
    stranded_free_gpus: int  # free GPUs on nodes that are partly used: no whole-node pod fits there


@dataclass
class Result:
    label: str
    outcomes: list[JobOutcome]
    samples: list[Sample] = field(default_factory=list)
    end_time: float = 0.0
    runtime_seconds: float = 0.0


class Timeline:
    """Samples of GPU use after every event, for utilisation, fragmentation and the plots."""

    def __init__(self, nodes: Sequence[Node], gpus_per_node: int) -> None:
        self.samples: list[Sample] = []
        self.gpus_per_node = gpus_per_node
        self.names = [n.name for n in nodes]

    def record(self, at: float, free: dict[str, dict[str, int]], busy: int, idle_held: int) -> None:
        free_gpus = stranded = 0
        for name in self.names:
            gpus = free[name].get(GPU, 0)
            free_gpus += gpus
            if 0 < gpus < self.gpus_per_node:
                stranded += gpus
        sample = Sample(at, busy, idle_held, free_gpus, stranded)
        if self.samples and self.samples[-1].at == at:
            self.samples[-1] = sample
        else:
            self.samples.append(sample)


def _views(job: TraceJob, shape: ClusterShape, split: str) -> list[PodView]:
    views = []
    for k, gpus in enumerate(job.pod_gpus(split, shape.gpus_per_node)):
        units = shape.pod_units(gpus)
        views.append(
            PodView(
                namespace="trace",
                name=f"job{job.index}-{k}",
                uid="",
                group=f"job{job.index}",
                gated=True,
                node_name=None,
                pinned_node=None,
                released_at=None,
                created_at=EPOCH + dt.timedelta(seconds=job.arrival),
                terminal=False,
                finished=False,
                shape=Shape(requests=tuple(sorted(units.items()))),
                owner=None,
                resource_version="1",
            )
        )
    return views


def run_gangkeeper(
    jobs: Sequence[TraceJob],
    shape: ClusterShape,
    split: str,
    policy: Policy,
    estimates: bool = True,
    on_reservation: Callable[[float, int, Reservation], None] | None = None,
    depth: int = DEFAULT_DEPTH,
    topology: str = "none",
    head_of_line_seconds: float = DEFAULT_BOUND_SECONDS,
) -> Result:
    """Every waiting gang is decided by `state.decide` each time the cluster changes, in queue order.
    `topology` (with a rack model): each gang required, or preferred, to keep to one rack."""
    started = time.perf_counter()
    run = _GangkeeperRun(jobs, shape, split, policy, estimates, depth, topology, HeadOfLine(head_of_line_seconds))
    while run.events:
        now = run.events[0][0]
        run.arrive_and_end(now)
        queue = run.pass_at(now)
        if on_reservation is not None:
            for rank, reservation in enumerate(queue.reservations):
                on_reservation(now, rank, reservation)
        run.timeline.record(now, run.free, run.busy, 0)
    samples = run.timeline.samples
    return Result(
        f"gangkeeper {policy.value}" + (f" {topology}" if run.intent is not None else ""),
        list(run.outcomes.values()),
        samples,
        samples[-1].at if samples else 0.0,
        time.perf_counter() - started,
    )


class _GangkeeperRun:
    """The simulated cluster under gangkeeper: free capacity, the waiting gangs in queue order (one
    priority, then arrival), the running ones and what they hold, the events to come."""

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        shape: ClusterShape,
        split: str,
        policy: Policy,
        estimates: bool,
        depth: int,
        topology: str,
        head_of_line: HeadOfLine,
    ) -> None:
        self.shape, self.split, self.policy, self.estimates, self.depth = shape, split, policy, estimates, depth
        self.head_of_line = head_of_line
        self.nodes = shape.node_list()
        self.eligibility = Eligibility(self.nodes)
        self.free = {n.name: dict(n.allocatable) for n in self.nodes}
        self.outcomes = {job.index: JobOutcome(job, len(job.pod_gpus(split, shape.gpus_per_node))) for job in jobs}
        # (when, kind, job): kind 0 a job ends, 1 one arrives, 2 the head-of-line bound turns (no job)
        self.events: list[tuple[float, int, int]] = [(job.arrival, 1, job.index) for job in jobs]
        self.arrivals_left = len(jobs)
        self.wake_at: float | None = None
        heapq.heapify(self.events)
        self.by_index = {job.index: job for job in jobs}
        self.pod_sizes = {job.index: sorted(job.pod_gpus(split, shape.gpus_per_node), reverse=True) for job in jobs}
        self.waiting: dict[int, list[PodView]] = {}
        self.running: dict[int, tuple[float, list[tuple[str, dict[str, int]]]]] = {}
        self.timeline = Timeline(self.nodes, shape.gpus_per_node)
        self.busy = 0
        self.free_gpus = shape.nodes * shape.gpus_per_node
        on_racks = topology != "none" and shape.nodes_per_rack
        self.intent = Topology(RACK, topology == "required", "simulate") if on_racks else None
        self.domains = GangSpec(min_member=1, topology=self.intent).domains()

    def arrive_and_end(self, now: float) -> None:
        """Every event at `now`: a job arrives (its gang waits) or ends (its capacity returns)."""
        while self.events and self.events[0][0] == now:
            _, kind, index = heapq.heappop(self.events)
            if kind == 2:
                continue
            if kind == 1:
                self.arrivals_left -= 1
                self.waiting[index] = _views(self.by_index[index], self.shape, self.split)
                continue
            _, holds = self.running.pop(index)
            for node, units in holds:
                for resource, amount in units.items():
                    self.free[node][resource] += amount
            self.busy -= self.by_index[index].gpus
            self.free_gpus += self.by_index[index].gpus
            self.outcomes[index].end = now

    def pass_at(self, now: float) -> QueuePass:
        """One controller pass: each waiting gang's turn, in queue order."""
        queue = QueuePass(
            self.policy,
            self.nodes,
            self.free,
            lambda: (
                [Ending(end, node, units) for end, holds in self.running.values() for node, units in holds]
                if self.estimates
                else []
            ),
            now,
            self.eligibility,
            self.depth,
            may_hold=lambda gang: self.head_of_line.may_hold(gang, EPOCH + dt.timedelta(seconds=now)),
        )
        free_by_gpus = _gpu_histogram(self.free, self.shape.gpus_per_node)
        for index in list(self.waiting):
            if self.free_gpus == 0 or (self.policy == Policy.FIFO and queue.blocked_by is not None):
                break  # nothing behind can be released in this pass: the rest keep their places
            if self._turn(index, queue, now, free_by_gpus):
                free_by_gpus = _gpu_histogram(self.free, self.shape.gpus_per_node)
        self._wake_when_the_bound_turns(now)
        return queue

    def _wake_when_the_bound_turns(self, now: float) -> None:
        """A pass when a gang holding others back starts to yield (or holds again), as the controller wakes
        for it; none once nothing runs or arrives any more (nothing could start that does not now)."""
        turns = self.head_of_line.next_change(EPOCH + dt.timedelta(seconds=now))
        if turns is None or not (self.running or self.arrivals_left):
            return
        at = (turns - EPOCH).total_seconds()
        if self.wake_at is None or self.wake_at <= now or at < self.wake_at:
            self.wake_at = at
            heapq.heappush(self.events, (at, 2, -1))

    def _turn(self, index: int, queue: QueuePass, now: float, free_by_gpus: Sequence[int]) -> bool:
        """One gang's turn; whether it was released."""
        job, views = self.by_index[index], self.waiting[index]
        expected = job.duration if self.estimates else None
        room = queue.room_for(now + expected if expected is not None else None)
        backfill = room is not self.free
        members = [Member(v.name, v.shape) for v in views]
        if not _may_fit(self.pod_sizes[index], self.free_gpus, free_by_gpus, self.shape.gpus_per_node):
            # cannot fit even by GPU count: `decide` would say WaitingForCapacity. Only the queue's
            # state needs it (fifo blocks behind it, backfill reserves for the first such gang)
            if self.policy == Policy.FIFO or (self.policy == Policy.BACKFILL and len(queue.reservations) < self.depth):
                waits = Decision(GangState.WAITING_FOR_CAPACITY, "", present=len(views))
                waits = take_turn(queue, f"trace/job{index}", waits, members, False, backfill, expected, self.domains)
                self._bound_head_of_line(index, waits, queue, now)
            return False
        spec = GangSpec(min_member=len(views), expected_seconds=expected, topology=self.intent)
        moment = EPOCH + dt.timedelta(seconds=now)
        decision = decide(
            views, spec, self.nodes, self.free, moment, eligibility=self.eligibility, room=room if backfill else None
        )
        decision = take_turn(queue, f"trace/job{index}", decision, members, False, backfill, expected, self.domains)
        self._bound_head_of_line(index, decision, queue, now)
        if decision.state != GangState.RELEASE:
            return False
        self._start(index, decision, now)
        queue.released()
        return True

    def _bound_head_of_line(self, index: int, decision: Decision, queue: QueuePass, now: float) -> None:
        key = f"trace/job{index}"
        self.head_of_line.after_turn(
            key,
            decision.state == GangState.WAITING_FOR_CAPACITY,
            decision.state == GangState.QUEUED,
            queue.holds_open_ended(key),
            EPOCH + dt.timedelta(seconds=now),
        )

    def _start(self, index: int, decision: Decision, now: float) -> None:
        """The released gang binds where it was placed at once and runs for its trace duration."""
        job = self.by_index[index]
        holds = []
        for view in self.waiting.pop(index):
            node = decision.release[view.name]
            units = dict(view.shape.requests)
            for resource, amount in units.items():
                self.free[node][resource] -= amount
            holds.append((node, units))
        self.running[index] = (now + job.duration, holds)
        heapq.heappush(self.events, (now + job.duration, 0, index))
        outcome = self.outcomes[index]
        outcome.start = outcome.first_bind = now
        if self.shape.nodes_per_rack:
            outcome.racks = len({self.shape.rack_of(node) for node, _ in holds})
        self.busy += job.gpus
        self.free_gpus -= job.gpus


def _gpu_histogram(free: dict[str, dict[str, int]], gpus_per_node: int) -> list[int]:
    """at[s]: how many nodes have at least s GPUs free."""
    at = [0] * (gpus_per_node + 2)
    for node_free in free.values():
        at[max(0, min(gpus_per_node, node_free.get(GPU, 0)))] += 1
    for size in range(gpus_per_node - 1, -1, -1):
        at[size] += at[size + 1]
    return at


def _may_fit(pod_gpus: Sequence[int], free_gpus: int, at_least: Sequence[int], gpus_per_node: int) -> bool:
    """Necessary for the gang to fit, counting GPUs only: enough GPUs in all, and each pod of more than
    half a node on a node of its own with that many free."""
    if sum(pod_gpus) > free_gpus:
        return False
    big = [g for g in pod_gpus if g * 2 > gpus_per_node]
    return all(at_least[size] >= sum(1 for g in big if g >= size) for size in set(big))
