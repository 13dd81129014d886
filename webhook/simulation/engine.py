"""A simulated cluster replaying trace jobs: through gangkeeper's own decision and queue code, or through
a model of the default kube-scheduler placing pods one by one.

Gang policies call `state.decide` (the function the controller and `explain` use) on gated pod views,
with the queue (`queue.QueuePass`, `queue.take_turn`) deciding whose turn it is; a released gang binds
where it was pinned at once (the scheduler agrees with the pins: tests/test_placement_parity.py) and
runs for its trace duration. Nothing here re-implements placement.

The default scheduler (pkg/scheduler): pods are popped by priority then creation time
(queuesort/priority_sort.go); a pod that fits nowhere goes to the unschedulable pool with a per-pod
backoff of 1 s doubling to 10 s (podInitialBackoffSeconds, podMaxBackoffSeconds) and is tried again
when capacity is freed (a pod deleted moves unschedulable pods back, MoveAllToActiveOrBackoffQueue);
NodeResourcesFit filters; the default LeastAllocated score over cpu and memory ignores GPUs. There is
no gang timeout: a partly bound gang holds its GPUs until it completes, which it may never do.
"""

from __future__ import annotations

import bisect
import datetime as dt
import heapq
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from webhook.controller.placement import Eligibility, Member, Node, Shape
from webhook.controller.queue import DEFAULT_DEPTH, Ending, Policy, QueuePass, Reservation, take_turn
from webhook.controller.state import Decision, GangSpec, GangState, PodView, decide
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


class _Timeline:
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
) -> Result:
    """Every waiting gang is decided by `state.decide` each time the cluster changes, in queue order.
    `topology` (with a rack model): each gang required, or preferred, to keep to one rack."""
    started = time.perf_counter()
    nodes = shape.node_list()
    eligibility = Eligibility(nodes)
    free = {n.name: dict(n.allocatable) for n in nodes}
    outcomes = {job.index: JobOutcome(job, len(job.pod_gpus(split, shape.gpus_per_node))) for job in jobs}
    events: list[tuple[float, int, int]] = [(job.arrival, 1, job.index) for job in jobs]  # 0: ends, 1: arrives
    heapq.heapify(events)
    by_index = {job.index: job for job in jobs}
    pod_sizes = {job.index: sorted(job.pod_gpus(split, shape.gpus_per_node), reverse=True) for job in jobs}
    waiting: dict[int, list[PodView]] = {}  # insertion order = queue order (one priority, then arrival)
    running: dict[int, tuple[float, list[tuple[str, dict[str, int]]]]] = {}
    timeline = _Timeline(nodes, shape.gpus_per_node)
    busy = 0
    free_gpus = shape.nodes * shape.gpus_per_node
    intent = Topology(RACK, topology == "required", "simulate") if topology != "none" and shape.nodes_per_rack else None
    base = GangSpec(min_member=1, topology=intent)
    domains = base.domains()
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, index = heapq.heappop(events)
            if kind == 1:
                waiting[index] = _views(by_index[index], shape, split)
                continue
            _, holds = running.pop(index)
            for node, units in holds:
                for resource, amount in units.items():
                    free[node][resource] += amount
            busy -= by_index[index].gpus
            free_gpus += by_index[index].gpus
            outcomes[index].end = now
        queue = QueuePass(
            policy,
            nodes,
            free,
            lambda: (
                [Ending(end, node, units) for end, holds in running.values() for node, units in holds]
                if estimates
                else []
            ),
            now,
            eligibility,
            depth,
        )
        moment = EPOCH + dt.timedelta(seconds=now)
        free_by_gpus = _gpu_histogram(free, shape.gpus_per_node)
        for index in list(waiting):
            if free_gpus == 0 or (policy == Policy.FIFO and queue.blocked_by is not None):
                break  # nothing behind can be released in this pass: the rest keep their places
            job, views = by_index[index], waiting[index]
            expected = job.duration if estimates else None
            room = queue.room_for(now + expected if expected is not None else None)
            pod_gpus = pod_sizes[index]
            if not _may_fit(pod_gpus, free_gpus, free_by_gpus, shape.gpus_per_node):
                # cannot fit even by GPU count: `decide` would say WaitingForCapacity. Only the queue's
                # state needs it (fifo blocks behind it, backfill reserves for the first such gang)
                if policy == Policy.FIFO or (policy == Policy.BACKFILL and len(queue.reservations) < depth):
                    waits = Decision(GangState.WAITING_FOR_CAPACITY, "", present=len(views))
                    members = [Member(v.name, v.shape) for v in views]
                    take_turn(queue, f"trace/job{index}", waits, members, False, room is not free, expected, domains)
                continue
            members = [Member(v.name, v.shape) for v in views]
            spec = GangSpec(min_member=len(views), expected_seconds=expected, topology=intent)
            decision = decide(
                views, spec, nodes, free, moment, eligibility=eligibility, room=None if room is free else room
            )
            decision = take_turn(
                queue, f"trace/job{index}", decision, members, False, room is not free, expected, domains
            )
            if decision.state != GangState.RELEASE:
                continue
            holds = []
            for view in views:
                node = decision.release[view.name]
                units = dict(view.shape.requests)
                for resource, amount in units.items():
                    free[node][resource] -= amount
                holds.append((node, units))
            del waiting[index]
            queue.released()
            running[index] = (now + job.duration, holds)
            heapq.heappush(events, (now + job.duration, 0, index))
            outcomes[index].start = outcomes[index].first_bind = now
            if shape.nodes_per_rack:
                outcomes[index].racks = len({shape.rack_of(node) for node, _ in holds})
            busy += job.gpus
            free_gpus -= job.gpus
            free_by_gpus = _gpu_histogram(free, shape.gpus_per_node)
        if on_reservation is not None:
            for rank, reservation in enumerate(queue.reservations):
                on_reservation(now, rank, reservation)
        timeline.record(now, free, busy, 0)
    return Result(
        f"gangkeeper {policy.value}" + (f" {topology}" if intent is not None else ""),
        list(outcomes.values()),
        timeline.samples,
        timeline.samples[-1].at if timeline.samples else 0.0,
        time.perf_counter() - started,
    )


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


@dataclass
class _Pod:
    job: int
    number: int
    gpus: int
    units: dict[str, int]
    created: float
    attempts: int = 0
    retry_at: float = 0.0
    node: str | None = None
    bound_at: float = 0.0

    @property
    def order(self) -> tuple[float, int, int]:
        return (self.created, self.job, self.number)


def run_default_scheduler(
    jobs: Sequence[TraceJob], shape: ClusterShape, split: str, seed: int, creation_spread: float = 2.0
) -> Result:
    """kube-scheduler without gangs. `seed` varies the pod ordering: each pod is created within
    `creation_spread` seconds of its job's arrival (a controller's burst), and equal scores break ties
    at random, so jobs arriving close together interleave differently."""
    started = time.perf_counter()
    rng = random.Random(seed)
    nodes = shape.node_list()
    names = [n.name for n in nodes]
    allocatable = {n.name: n.allocatable for n in nodes}
    free = {n.name: dict(n.allocatable) for n in nodes}
    outcomes = {job.index: JobOutcome(job, len(job.pod_gpus(split, shape.gpus_per_node))) for job in jobs}
    by_index = {job.index: job for job in jobs}
    events: list[tuple[float, int, int, int]] = []  # (time, kind 0 end / 1 pod created / 2 retry, job, pod)
    pods: dict[tuple[int, int], _Pod] = {}
    for job in jobs:
        for k, gpus in enumerate(job.pod_gpus(split, shape.gpus_per_node)):
            created = job.arrival + rng.uniform(0, creation_spread)
            pods[(job.index, k)] = _Pod(job.index, k, gpus, shape.pod_units(gpus), created)
            events.append((created, 1, job.index, k))
    heapq.heapify(events)
    unbound: dict[int, int] = {job.index: outcomes[job.index].pods for job in jobs}
    active: list[tuple[tuple[float, int, int], _Pod]] = []  # the activeQ, in pop order
    unschedulable: dict[tuple[int, int], _Pod] = {}
    timeline = _Timeline(nodes, shape.gpus_per_node)
    busy = idle_held = 0

    def try_bind(pod: _Pod, now: float) -> bool:
        best: tuple[float, float, str] | None = None
        for name in names:
            node_free = free[name]
            if any(node_free.get(r, 0) < a for r, a in pod.units.items()):
                continue  # NodeResourcesFit
            # LeastAllocated over cpu and memory: the share left free after the pod, GPUs ignored
            score = sum(
                (node_free[r] - pod.units[r]) / allocatable[name][r] for r in ("cpu", "memory") if allocatable[name][r]
            )
            candidate = (-score, rng.random(), name)
            if best is None or candidate < best:
                best = candidate
        if best is None:
            return False
        pod.node, pod.bound_at = best[2], now
        for resource, amount in pod.units.items():
            free[pod.node][resource] -= amount
        return True

    while events:
        now = events[0][0]
        capacity_freed = False
        while events and events[0][0] == now:
            _, kind, index, number = heapq.heappop(events)
            if kind == 1:
                pod = pods[(index, number)]
                bisect.insort(active, (pod.order, pod))
            elif kind == 2:
                pod = pods[(index, number)]
                if pod.node is None and unschedulable.pop((index, number), None) is not None:
                    bisect.insort(active, (pod.order, pod))
            else:
                for k in range(outcomes[index].pods):
                    pod = pods[(index, k)]
                    for resource, amount in pod.units.items():
                        free[pod.node or ""][resource] += amount
                busy -= by_index[index].gpus
                outcomes[index].end = now
                capacity_freed = True
        if capacity_freed:  # a pod deleted: the unschedulable ones go back, or to backoff
            for key, pod in list(unschedulable.items()):
                if pod.retry_at <= now:
                    del unschedulable[key]
                    bisect.insort(active, (pod.order, pod))
                else:
                    heapq.heappush(events, (pod.retry_at, 2, pod.job, pod.number))
        max_free_gpus = max(free[name].get(GPU, 0) for name in names)
        queue, active = active, []
        for _, pod in queue:
            if pod.gpus <= max_free_gpus and try_bind(pod, now):
                outcome = outcomes[pod.job]
                if outcome.first_bind is None:
                    outcome.first_bind = now
                unbound[pod.job] -= 1
                idle_held += pod.gpus
                if unbound[pod.job] == 0:  # the whole gang runs now
                    outcome.start = now
                    if shape.nodes_per_rack:
                        on = (pods[(pod.job, k)].node or "" for k in range(outcome.pods))
                        outcome.racks = len({shape.rack_of(node) for node in on})
                    trace_job = by_index[pod.job]
                    heapq.heappush(events, (now + trace_job.duration, 0, pod.job, 0))
                    idle_held -= trace_job.gpus
                    busy += trace_job.gpus
                max_free_gpus = max(free[name].get(GPU, 0) for name in names)
                continue
            pod.attempts += 1
            pod.retry_at = now + min(10.0, 2.0 ** min(pod.attempts - 1, 4))
            unschedulable[(pod.job, pod.number)] = pod
        timeline.record(now, free, busy, idle_held)
    end_time = timeline.samples[-1].at if timeline.samples else 0.0
    for outcome in outcomes.values():  # GPU-seconds bound before the whole gang ran (to the end if never)
        until = outcome.start if outcome.start is not None else end_time
        outcome.held_idle_gpu_seconds = sum(
            pod.gpus * max(0.0, until - pod.bound_at)
            for pod in (pods[(outcome.job.index, k)] for k in range(outcome.pods))
            if pod.node is not None
        )
    return Result(
        f"default scheduler (ordering {seed})",
        list(outcomes.values()),
        timeline.samples,
        end_time,
        time.perf_counter() - started,
    )
