"""bench/replay_spread.py sets draws of one replay side by side: the spread of each figure, every draw's
gangs pooled, and per draw the gate against the best gang mechanism of that same run."""

from __future__ import annotations

from typing import Any

import pytest

from bench.replay_spread import summarize

COLUMNS = ["arrival_s", "pods", "gpus_per_pod", "high_priority", "wait_s", "delay_s", "wait_in_all_s"]


def backend(waits: list[float | None]) -> dict[str, Any]:
    started = [w for w in waits if w is not None]
    mean, p95 = sum(started) / len(started), max(started)
    return {
        "wait_s": {"mean": mean, "p95": p95},
        "wait_in_all_s": {"mean": mean, "p95": p95},
        "delay_s": {"p95": p95},
        "gpu_hours_held_by_incomplete_gangs": 0.0,
        "gpu_hours_lost_to_restarts": 0.0,
        "preemptions": 0,
        "gangs": {"columns": COLUMNS, "rows": [[0, 1, 1, False, w, w, w] for w in waits]},
    }


def run(**waits: list[float | None]) -> dict[str, Any]:
    return {"settings": {"split": "gpu", "speedup": 180}, "backends": {n: backend(w) for n, w in waits.items()}}


def test_each_draw_is_set_against_its_own_best_anchor_and_the_gangs_are_pooled() -> None:
    first = run(gate=[10, 30], native=[20, 40], volcano=[10, 10], floor=[1, 1])
    second = run(gate=[30, 50], native=[10, 30], volcano=[40, 40], floor=[1, 1])
    summary = summarize([first, second])
    means = summary["ratios"]["gate"]["wait mean"]
    # draw 1: volcano is the best anchor (10), not the floor; draw 2: native (20)
    assert [(d["ratio"], d["anchor"]) for d in means["draws"]] == [(2.0, "volcano"), (2.0, "native")]
    assert summary["figures"]["gate"]["wait mean"] == {"median": 30.0, "min": 20.0, "max": 40.0}
    assert summary["pooled"]["gate"]["wait_s"] == {"mean": 30.0, "p95": 50, "gangs": 4}


def test_a_gang_that_never_started_is_left_out_of_the_pooled_waits() -> None:
    summary = summarize([run(gate=[10, None], native=[10, 10])])
    assert summary["pooled"]["gate"]["wait_s"]["gangs"] == 1


def test_runs_of_different_settings_are_not_draws_of_one_replay() -> None:
    other = run(gate=[1], native=[1])
    other["settings"]["speedup"] = 60
    with pytest.raises(SystemExit, match="speedup"):
        summarize([run(gate=[1], native=[1]), other])
