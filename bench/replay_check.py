"""The simulator checked against the replay: `gangkeeper simulate`'s models (webhook/simulation) run on the
slice and cluster shape a replay used (bench/replay.py's JSON: its start, hours, nodes, racks, split and
job-length cap), measured the way the replay measures (waits of the gangs that started whole, GPU
utilisation over the replayed window, GPU-hours held by gangs not yet whole), side by side with what the
real control plane reported, and each figure's error. The floor is the model of kube-scheduler with no
gang; the gate is gangkeeper's rules (backfill, gangs preferring one rack when there are racks), given
what the replay's Jobs give the real controller: no run-time estimates.

    python bench/replay_check.py [--replay bench/results/replay-2026-11-27.json] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from webhook.controller.decide.queue import Policy
from webhook.simulation import trace
from webhook.simulation.engine import ClusterShape, Result, run_gangkeeper
from webhook.simulation.kube_scheduler import run_default_scheduler

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "philly-2017-10-23-week.csv"
RESULTS = ROOT / "bench" / "results" / "replay-2026-11-27.json"


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def measured(result: Result, window: float, gpus: int) -> dict[str, Any]:
    """The replay's figures, taken from a simulated run cut at the replayed window's end."""
    waits = [o.wait for o in result.outcomes if o.start is not None and o.start <= window and o.wait is not None]
    busy = 0.0
    for sample, following in zip(result.samples, result.samples[1:], strict=False):
        if sample.at >= window:
            break
        busy += sample.busy_gpus * (min(following.at, window) - sample.at)
    return {
        "wait_mean_s": round(statistics.fmean(waits), 1) if waits else None,
        "wait_p50_s": rounded(percentile(waits, 0.5)),
        "wait_p95_s": rounded(percentile(waits, 0.95)),
        "gpu_utilization": round(busy / (window * gpus), 3),
        "gangs_finished": sum(1 for o in result.outcomes if o.end is not None and o.end <= window),
        "gpu_hours_held_by_incomplete_gangs": round(sum(o.held_idle_gpu_seconds for o in result.outcomes) / 3600, 2),
    }


def of_replay(backend: dict[str, Any]) -> dict[str, Any]:
    return {
        "wait_mean_s": backend["wait_s"]["mean"],
        "wait_p50_s": backend["wait_s"]["p50"],
        "wait_p95_s": backend["wait_s"]["p95"],
        "gpu_utilization": backend["gpu_utilization"],
        "gangs_finished": backend["gangs_finished"],
        "gpu_hours_held_by_incomplete_gangs": backend["gpu_hours_held_by_incomplete_gangs"],
    }


def error(simulated: float | None, real: float | None) -> str:
    if simulated is None or real is None:
        return "-"
    if real == 0:
        return "exact" if simulated == 0 else f"+{simulated:g} (replay 0)"
    return f"{100 * (simulated - real) / real:+.0f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replay", type=Path, default=RESULTS)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    replay = json.loads(args.replay.read_text())
    settings = replay["settings"]
    _, sliced = trace.read(TRACE, settings["start"], settings["hours"] / 24)
    cap = settings["max_job_hours"] * 3600
    jobs = [dataclasses.replace(job, duration=min(job.duration, cap)) if cap else job for job in sliced]
    shape = ClusterShape(nodes=settings["nodes"], nodes_per_rack=settings["rack_size"])
    gpus = shape.nodes * shape.gpus_per_node
    runs = {
        "floor": run_default_scheduler(jobs, shape, settings["split"], seed=1),
        # the replay's Jobs say nothing of their run time (no activeDeadlineSeconds, no
        # gangkeeper.io/expected-seconds: bench/replay.py job_manifest), so the real controller plans its
        # backfill reservations with no ending known; simulate's default, perfect estimates, held small
        # gangs back for the head's reservation and put the gate's p95 at 2.6x the replay's
        "gate": run_gangkeeper(
            jobs,
            shape,
            settings["split"],
            Policy.BACKFILL,
            estimates=False,
            topology="preferred" if shape.nodes_per_rack else "none",
        ),
    }
    rows: dict[str, dict[str, Any]] = {}
    print(f"{len(jobs)} jobs, {settings['hours']} trace hours from {settings['start']}, {shape.nodes} nodes")
    print(f"{'backend':<6} {'figure':<36} {'replay':>10} {'simulate':>10} {'error':>14}")
    for backend, result in runs.items():
        real = replay["backends"][backend]
        simulated = measured(result, real["trace_seconds_replayed"], gpus)
        expected = of_replay(real)
        rows[backend] = {"replay": expected, "simulate": simulated}
        for figure, value in simulated.items():
            shown = f"{expected[figure]!s:>10} {value!s:>10} {error(value, expected[figure]):>14}"
            print(f"{backend:<6} {figure:<36} {shown}")
        fastest = real["wait_s"].get("by_gang_size", {}).get("1 pod", {}).get("p50")
        print(
            f"{backend:<6} the replay's wait includes the control plane's own latency times the speedup "
            f"({settings['speedup']:g}x): 1 real second is {settings['speedup']:g} trace seconds"
            + (f"; its 1-pod p50 {fastest} s" if fastest is not None else "")
        )
    if args.json:
        args.json.write_text(json.dumps({"settings": settings, "backends": rows}, indent=2))


if __name__ == "__main__":
    main()
