"""The baseline of `gangkeeper simulate`: the default kube-scheduler placing pods one by one, as they
arrive, with no gang: a gang's pods that fit bind at once and hold their GPUs while the rest wait.
Run over several pod orderings (kube-scheduler's queue order among pods of equal priority is not
fixed), on the same simulated cluster and clock as the gang policies (engine.py)."""

from __future__ import annotations

import bisect
import heapq
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from webhook.simulation.engine import GPU, ClusterShape, JobOutcome, Result, Timeline
from webhook.simulation.trace import TraceJob


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
    run = _DefaultSchedulerRun(jobs, shape, split, random.Random(seed), creation_spread)
    while run.events:
        now = run.events[0][0]
        if run.take_events(now):  # a pod deleted: the unschedulable ones go back, or to backoff
            run.retry_unschedulable(now)
        run.schedule(now)
        run.timeline.record(now, run.free, run.busy, run.idle_held)
    end_time = run.timeline.samples[-1].at if run.timeline.samples else 0.0
    run.count_idle_held(end_time)
    return Result(
        f"default scheduler (ordering {seed})",
        list(run.outcomes.values()),
        run.timeline.samples,
        end_time,
        time.perf_counter() - started,
    )


class _DefaultSchedulerRun:
    """The simulated cluster under kube-scheduler alone: its activeQ (in pop order), its unschedulable
    pool, free capacity, the events to come (0: a job ends, 1: a pod is created, 2: a pod's backoff ends)."""

    def __init__(
        self, jobs: Sequence[TraceJob], shape: ClusterShape, split: str, rng: random.Random, creation_spread: float
    ) -> None:
        self.shape, self.rng = shape, rng
        nodes = shape.node_list()
        self.names = [n.name for n in nodes]
        self.allocatable = {n.name: n.allocatable for n in nodes}
        self.free = {n.name: dict(n.allocatable) for n in nodes}
        self.outcomes = {job.index: JobOutcome(job, len(job.pod_gpus(split, shape.gpus_per_node))) for job in jobs}
        self.by_index = {job.index: job for job in jobs}
        self.events: list[tuple[float, int, int, int]] = []
        self.pods: dict[tuple[int, int], _Pod] = {}
        for job in jobs:
            for k, gpus in enumerate(job.pod_gpus(split, shape.gpus_per_node)):
                created = job.arrival + rng.uniform(0, creation_spread)
                self.pods[(job.index, k)] = _Pod(job.index, k, gpus, shape.pod_units(gpus), created)
                self.events.append((created, 1, job.index, k))
        heapq.heapify(self.events)
        self.unbound: dict[int, int] = {job.index: self.outcomes[job.index].pods for job in jobs}
        self.active: list[tuple[tuple[float, int, int], _Pod]] = []
        self.unschedulable: dict[tuple[int, int], _Pod] = {}
        self.timeline = Timeline(nodes, shape.gpus_per_node)
        self.busy = self.idle_held = 0

    def take_events(self, now: float) -> bool:
        """Every event at `now`; whether capacity was freed (a job ended)."""
        capacity_freed = False
        while self.events and self.events[0][0] == now:
            _, kind, index, number = heapq.heappop(self.events)
            if kind == 1:
                pod = self.pods[(index, number)]
                bisect.insort(self.active, (pod.order, pod))
            elif kind == 2:
                pod = self.pods[(index, number)]
                if pod.node is None and self.unschedulable.pop((index, number), None) is not None:
                    bisect.insort(self.active, (pod.order, pod))
            else:
                self._end(index, now)
                capacity_freed = True
        return capacity_freed

    def _end(self, index: int, now: float) -> None:
        for k in range(self.outcomes[index].pods):
            pod = self.pods[(index, k)]
            for resource, amount in pod.units.items():
                self.free[pod.node or ""][resource] += amount
        self.busy -= self.by_index[index].gpus
        self.outcomes[index].end = now

    def retry_unschedulable(self, now: float) -> None:
        for key, pod in list(self.unschedulable.items()):
            if pod.retry_at <= now:
                del self.unschedulable[key]
                bisect.insort(self.active, (pod.order, pod))
            else:
                heapq.heappush(self.events, (pod.retry_at, 2, pod.job, pod.number))

    def schedule(self, now: float) -> None:
        """Every pod of the activeQ tried in turn: bound, or to the unschedulable pool with its backoff."""
        max_free_gpus = max(self.free[name].get(GPU, 0) for name in self.names)
        queue, self.active = self.active, []
        for _, pod in queue:
            if pod.gpus <= max_free_gpus and self._try_bind(pod, now):
                self._bound(pod, now)
                max_free_gpus = max(self.free[name].get(GPU, 0) for name in self.names)
                continue
            pod.attempts += 1
            pod.retry_at = now + min(10.0, 2.0 ** min(pod.attempts - 1, 4))
            self.unschedulable[(pod.job, pod.number)] = pod

    def _try_bind(self, pod: _Pod, now: float) -> bool:
        best: tuple[float, float, str] | None = None
        for name in self.names:
            node_free = self.free[name]
            if any(node_free.get(r, 0) < a for r, a in pod.units.items()):
                continue  # NodeResourcesFit
            # LeastAllocated over cpu and memory: the share left free after the pod, GPUs ignored
            allocatable = self.allocatable[name]
            score = sum((node_free[r] - pod.units[r]) / allocatable[r] for r in ("cpu", "memory") if allocatable[r])
            candidate = (-score, self.rng.random(), name)
            if best is None or candidate < best:
                best = candidate
        if best is None:
            return False
        pod.node, pod.bound_at = best[2], now
        for resource, amount in pod.units.items():
            self.free[pod.node][resource] -= amount
        return True

    def _bound(self, pod: _Pod, now: float) -> None:
        outcome = self.outcomes[pod.job]
        if outcome.first_bind is None:
            outcome.first_bind = now
        self.unbound[pod.job] -= 1
        self.idle_held += pod.gpus
        if self.unbound[pod.job] > 0:
            return
        # the whole gang runs now
        outcome.start = now
        if self.shape.nodes_per_rack:
            on = (self.pods[(pod.job, k)].node or "" for k in range(outcome.pods))
            outcome.racks = len({self.shape.rack_of(node) for node in on})
        trace_job = self.by_index[pod.job]
        heapq.heappush(self.events, (now + trace_job.duration, 0, pod.job, 0))
        self.idle_held -= trace_job.gpus
        self.busy += trace_job.gpus

    def count_idle_held(self, end_time: float) -> None:
        """GPU-seconds bound before the whole gang ran (to the end if never)."""
        for outcome in self.outcomes.values():
            until = outcome.start if outcome.start is not None else end_time
            outcome.held_idle_gpu_seconds = sum(
                pod.gpus * max(0.0, until - pod.bound_at)
                for pod in (self.pods[(outcome.job.index, k)] for k in range(outcome.pods))
                if pod.node is not None
            )
