"""Jobs from a GPU-cluster trace, and how each becomes a gang of pods.

The Philly-derived job list (data/traces/, see its NOTICE) has one row per job: arrival timestamp,
duration in seconds once running, and GPU count. It does not say how the GPUs were split into pods, so
the split is a modelling switch: `node` (ceil(g/8) workers of at most 8 GPUs, the headline) or `gpu`
(one GPU per pod, the stress case).
"""

from __future__ import annotations

import csv
import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TIMESTAMP = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class TraceJob:
    index: int
    arrival: float  # seconds since the trace's first arrival
    duration: float
    gpus: int
    cluster: str

    def pod_gpus(self, split: str, gpus_per_node: int) -> list[int]:
        """GPUs of each pod of the job's gang."""
        if split == "gpu":
            return [1] * self.gpus
        pods = math.ceil(self.gpus / gpus_per_node)
        return [min(gpus_per_node, self.gpus - i * gpus_per_node) for i in range(pods)]


def read(path: Path, start: str | None = None, days: float | None = None) -> tuple[dt.datetime, list[TraceJob]]:
    """Jobs in arrival order (ties in file order); `start`/`days` select a slice (YYYY-MM-DD)."""
    rows = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            rows.append((dt.datetime.strptime(row["timestamp"], TIMESTAMP), row))
    if start is not None:
        begin = dt.datetime.strptime(start, "%Y-%m-%d")
        end = begin + dt.timedelta(days=days) if days is not None else None
        rows = [(t, r) for t, r in rows if t >= begin and (end is None or t < end)]
    rows.sort(key=lambda item: item[0])  # stable: file order among equal timestamps
    if not rows:
        return dt.datetime(1970, 1, 1), []
    origin = rows[0][0]
    jobs = [
        TraceJob(
            index=i,
            arrival=(moment - origin).total_seconds(),
            duration=float(row["duration"]),
            gpus=int(row["num_gpus"]),
            cluster=row["cluster"],
        )
        for i, (moment, row) in enumerate(rows)
    ]
    return origin, jobs


def size_class(gpus: int) -> str:
    if gpus <= 1:
        return "1"
    if gpus <= 8:
        return "2-8"
    if gpus <= 32:
        return "9-32"
    return ">32"


SIZE_CLASSES = ("1", "2-8", "9-32", ">32")


def total_gpu_seconds(jobs: Iterable[TraceJob]) -> float:
    return sum(job.gpus * job.duration for job in jobs)
