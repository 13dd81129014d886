"""The trace replay (bench/replay.py), CI's short cut of it: the first traced hour of the Philly week, one
pod per GPU, at 120x on two nodes of 8 GPUs in two racks, the floor then the gate, with every fault of
the full replay while the gate runs (a node drained, another tainted, the controller restarted, a webhook
pod killed). Every figure is what the cluster reported; the full replay runs every backend for hours:
`python bench/replay.py` (docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.replay import TRACE, Settings, plot, print_table, replay_jobs, replay_on
from tests.realcluster.stack import Stack
from webhook.simulation import trace

pytestmark = pytest.mark.cluster

FIGURES = {
    "gpu_hours_held_by_incomplete_gangs",
    "gangs_stuck_partial_over_5min",
    "gangs_finished",
    "gangs_total",
    "wait_s",
    "jct_s",
    "gpu_utilization",
    "multi_node_gangs_in_one_rack_pct",
    "preemptions",
    "requeues",
    "pods_gated_at_end",
    "gangkeeper_cpu_ms_per_pod",
    "gangkeeper_peak_rss_mib",
    "faults",
}


def test_a_traced_hour_replayed_starts_every_gang_whole_and_ends_with_nothing_held(
    stack: Stack, tmp_path: Path
) -> None:
    _, sliced = trace.read(TRACE, "2017-10-23", 1 / 24)
    jobs = replay_jobs(sliced, speedup=120, high_every=5, split="gpu", max_job_hours=0.5)
    settings = Settings(nodes=2, rack_size=1, speedup=120, faults=True, drain_limit=60 + max(j.duration for j in jobs))
    results = replay_on(stack, ["floor", "gate"], jobs, settings)
    print()
    print_table(results)
    assert plot(results, tmp_path).read_bytes().startswith(b"\x89PNG")
    floor, gate = results["floor"], results["gate"]
    for backend in (floor, gate):
        assert set(backend) >= FIGURES, FIGURES - set(backend)
        assert backend["gangs_total"] == len(jobs) and backend["pods_created"] >= sum(j.pods for j in jobs)
    # every gang finished through the faults, none held partly, nothing left behind the gate
    assert gate["gangs_finished"] == len(jobs), gate
    assert (gate["gangs_stuck_partial_over_5min"], gate["gangs_partly_bound_at_end"]) == (0, 0), gate
    assert gate["pods_gated_at_end"] == 0, gate
    assert [f["kind"] for f in gate["faults"]] == [
        "drain",
        "taint",
        "uncordon",
        "controller restart",
        "untaint",
        "webhook pod killed",
    ]
    assert not [f for f in gate["faults"] if "error" in f], gate["faults"]
    # the gate's only partial holding is a released gang's bindings landing one by one: under the floor's
    assert gate["gpu_hours_held_by_incomplete_gangs"] <= max(0.1, floor["gpu_hours_held_by_incomplete_gangs"])
