"""bench/replay_check.py measures a simulated run as the replay measures the real one: waits of the gangs
that started within the replayed window, GPU utilisation over that window, what gangs not yet whole held."""

from __future__ import annotations

from bench.replay_check import measured
from webhook.simulation.engine import JobOutcome, Result, Sample
from webhook.simulation.trace import TraceJob


def test_a_simulated_run_is_cut_at_the_replayed_window() -> None:
    jobs = [TraceJob(i, arrival=10.0 * i, duration=100.0, gpus=8, cluster="vc") for i in range(3)]
    outcomes = [
        JobOutcome(jobs[0], 1, start=0.0, end=100.0),
        JobOutcome(jobs[1], 1, start=30.0, end=130.0, held_idle_gpu_seconds=3600.0),
        JobOutcome(jobs[2], 1, start=500.0, end=600.0),  # starts after the window: not counted
    ]
    samples = [
        Sample(0.0, 8, 0, 8, 0),
        Sample(30.0, 16, 0, 0, 0),
        Sample(100.0, 8, 0, 8, 0),
        Sample(400.0, 0, 0, 16, 0),
    ]
    figures = measured(Result("gate", outcomes, samples), window=200.0, gpus=16)
    assert figures["wait_mean_s"] == 10.0 and figures["wait_p95_s"] == 20.0  # waits 0 and 20
    assert figures["gangs_finished"] == 2
    assert figures["gpu_hours_held_by_incomplete_gangs"] == 1.0
    # busy GPU-seconds within [0, 200): 8 x 30 + 16 x 70 + 8 x 100
    assert figures["gpu_utilization"] == round((240 + 1120 + 800) / (200 * 16), 3)
