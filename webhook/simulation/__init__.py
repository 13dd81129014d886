"""`gangkeeper simulate`: replay a GPU-cluster trace through gangkeeper's decision and queue code, next to
the default kube-scheduler placing pods one by one, on a simulated cluster."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.controller.decide.headofline import DEFAULT_BOUND_SECONDS
from webhook.controller.decide.queue import DEFAULT_DEPTH, Policy
from webhook.simulation import engine, kube_scheduler, report, trace

DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "data" / "traces" / "philly-2017-10-23-week.csv"
GANG_POLICIES = tuple(p.value for p in Policy)


@dataclass(frozen=True)
class Settings:
    trace: Path = DEFAULT_TRACE
    start: str | None = None
    days: float | None = None
    shape: engine.ClusterShape = field(default_factory=engine.ClusterShape)
    split: str = "node"
    policies: tuple[str, ...] = ("default", *GANG_POLICIES)
    orderings: int = 3
    seed: int = 1
    estimates: bool = True
    depth: int = DEFAULT_DEPTH
    head_of_line_seconds: float = DEFAULT_BOUND_SECONDS  # as the controller's --head-of-line-seconds
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)  # replays side by side
    topologies: tuple[str, ...] = ("none",)  # with racks: each gang policy also with required, preferred

    def switches(self) -> list[str]:
        s = self.shape
        pods = (
            "node-sized workers, ceil(g/8) pods of at most 8 GPUs"
            if self.split == "node"
            else "one GPU per pod (stress case)"
        )
        return [
            f"trace: {self.trace.name}" + (f", from {self.start} for {self.days} days" if self.start else ""),
            f"cluster: {s.nodes} nodes x {s.gpus_per_node} GPUs, {s.cpus_per_node} cpus, {s.memory_gib_per_node} GiB"
            + (f", racks of {s.nodes_per_rack} nodes" if s.nodes_per_rack else ""),
            f"pods: {pods}; each asks {s.cpus_per_gpu} cpus and {s.memory_gib_per_gpu} GiB per GPU",
            "arrival: the trace's timestamp; service: its duration, counted once the whole gang runs; "
            "a partly placed gang makes no progress",
            "jobs larger than the cluster: left out (they could never run)",
            "gangkeeper: state.decide and the queue code of the controller; released pods bind where pinned",
            f"backfill: reservations for the first {self.depth} waiting gangs; estimates: "
            + ("each job's trace duration (perfect estimates)" if self.estimates else "none (never expected to end)")
            + f"; a gang holds others back for at most {self.head_of_line_seconds:g} s at a time (head-of-line bound)",
            *(
                [
                    "topology: gang policies also with the whole gang "
                    + ", ".join(t for t in self.topologies if t != "none")
                    + " to keep to one rack (gangkeeper.io/topology-*)"
                ]
                if self.shape.nodes_per_rack and any(t != "none" for t in self.topologies)
                else []
            ),
            "default scheduler: priority then creation order, pods created within 2 s of their job's arrival, "
            "per-pod backoff 1 s doubling to 10 s, retried when capacity frees, LeastAllocated cpu/memory "
            f"score (GPU-agnostic), no gang timeout; {self.orderings} pod orderings (seeds {self.seed}.."
            f"{self.seed + self.orderings - 1}), ranges shown",
        ]


def run(settings: Settings) -> tuple[list[tuple[str, list[engine.Result]]], list[trace.TraceJob]]:
    """Every policy replays the same jobs on its own copy of the cluster: independent replays, so they
    run side by side, one process per core (results do not depend on how many)."""
    _, jobs = trace.read(settings.trace, settings.start, settings.days)
    capacity = settings.shape.nodes * settings.shape.gpus_per_node
    jobs = [job for job in jobs if job.gpus <= capacity]
    replays: list[tuple[str, Callable[..., engine.Result], tuple[Any, ...]]] = []
    for policy in settings.policies:
        if policy == "default":
            for i in range(settings.orderings):
                args: tuple[Any, ...] = (jobs, settings.shape, settings.split, settings.seed + i)
                replays.append(("default scheduler", kube_scheduler.run_default_scheduler, args))
        else:
            for topology in settings.topologies if settings.shape.nodes_per_rack else ("none",):
                args = (
                    jobs,
                    settings.shape,
                    settings.split,
                    Policy(policy),
                    settings.estimates,
                    None,
                    settings.depth,
                    topology,
                    settings.head_of_line_seconds,
                )
                label = f"gangkeeper {policy}" + (f" {topology}" if topology != "none" else "")
                replays.append((label, engine.run_gangkeeper, args))
    workers = max(1, min(settings.workers, len(replays)))
    if workers == 1:
        results = [replay(*args) for _, replay, args in replays]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            # backfill, the slowest replay, is submitted first so the others fill the remaining cores
            slowest = f"gangkeeper {Policy.BACKFILL.value}"
            order = sorted(range(len(replays)), key=lambda i: replays[i][0] != slowest)
            futures = {i: pool.submit(replays[i][1], *replays[i][2]) for i in order}
            results = [futures[i].result() for i in range(len(replays))]
    groups: list[tuple[str, list[engine.Result]]] = []
    for (label, _, _), result in zip(replays, results, strict=True):
        if groups and groups[-1][0] == label:
            groups[-1][1].append(result)
        else:
            groups.append((label, [result]))
    return groups, jobs


def main(settings: Settings, plots: Path | None, json_path: Path | None) -> str:
    started = time.perf_counter()
    groups, jobs = run(settings)
    elapsed = time.perf_counter() - started
    total = settings.shape.nodes * settings.shape.gpus_per_node
    summaries = [(label, [report.summarize(r, total) for r in results]) for label, results in groups]
    offered = trace.total_gpu_seconds(jobs)
    span = max((j.arrival for j in jobs), default=0.0) or 1.0
    out = ["modelling switches:", *(f"  - {line}" for line in settings.switches())]
    out.append(
        f"jobs: {len(jobs)}; offered load {offered / (total * span):.2f} of the cluster's GPUs over the arrival span"
    )
    out += ["", report.table(summaries), ""]
    replays = sum(len(results) for _, results in groups)
    workers = max(1, min(settings.workers, replays))
    out.append(f"{replays} replays in {elapsed:.1f} s wall, {workers} side by side ('replay s': each one's own time)")
    if plots is not None:
        written = report.plot([results[0] for _, results in groups], total, plots)
        out.append("")
        out += [f"plot: {path}" for path in written]
    if json_path is not None:
        json_path.write_text(
            json.dumps(
                {
                    "switches": settings.switches(),
                    "policies": {label: [s.row() for s in group] for label, group in summaries},
                },
                indent=2,
            )
        )
        out.append(f"json: {json_path}")
    return "\n".join(out)


def parse_policies(text: str) -> tuple[str, ...]:
    chosen = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [p for p in chosen if p not in ("default", *GANG_POLICIES)]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}: choose from default, {', '.join(GANG_POLICIES)}")
    return chosen


__all__: Sequence[str] = ("Settings", "main", "parse_policies", "run")
