"""bench/replay.py's figures over trace time, from what the watches saw: running GPUs and waiting gangs
every 5 trace minutes, and the plots a user looks at (the timeline, the waits by gang size)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from bench.replay import (
    PodSeen,
    Recorder,
    ReplayJob,
    Settings,
    measure,
    plot,
    run_times,
    stages_of,
    timeline,
    waited_in_all,
)


def test_the_timeline_counts_running_gpus_and_gangs_not_yet_whole() -> None:
    recorder = Recorder(frozenset({"vc"}))
    # speedup 300: one real second is 5 trace minutes, one sample
    recorder.pods = {
        "vc/a-0": PodSeen("vc/a", 8, created=0.0, bound=0.0, ended=3.0),
        "vc/b-0": PodSeen("vc/b", 8, created=1.0, bound=2.0, ended=4.0),
        "vc/b-1": PodSeen("vc/b", 8, created=1.0, bound=2.5, ended=4.0),
        "vc/c-0": PodSeen("vc/c", 4, created=1.0),  # never bound
    }
    recorder.submitted = {"vc/a": 0.0, "vc/b": 1.0, "vc/c": 1.0}
    recorder.completed = {"vc/a": 3.0, "vc/b": 4.0}
    line = timeline(recorder, {"vc/a": 0.0, "vc/b": 2.5, "vc/c": None}, started=0.0, ended=5.0, speedup=300.0)
    assert line["trace_hours"] == [0.0, 0.083, 0.167, 0.25, 0.333, 0.417]
    assert line["running_gpus"] == [8, 8, 16, 16, 0, 0]  # b's second pod bound at 2.5: counted from 3
    assert line["waiting_gangs"] == [0, 2, 2, 1, 1, 1]  # b whole at 2.5; c never


def test_a_gangs_wait_is_split_where_the_cluster_showed_it_go() -> None:
    """Submitted -> last pod created -> last gate lifted -> gang whole, for each gang that was whole."""
    by_job = {
        "vc/a": [
            PodSeen("vc/a", 1, created=1.0, bound=4.5, ungated=4.0),
            PodSeen("vc/a", 1, created=2.0, bound=4.25, ungated=3.5),
        ],
        "vc/b": [PodSeen("vc/b", 1, created=1.0, ungated=1.0)],  # never bound: not counted
        "vc/c": [PodSeen("vc/c", 1, created=1.0, bound=1.5, ungated=1.0)],  # never gated (the floor)
    }
    stages = stages_of(by_job, {"vc/a": 0.5, "vc/b": 0.0, "vc/c": 1.0}, {"vc/a": 2, "vc/b": 1, "vc/c": 1})
    assert stages == {
        "submitted_to_created": [1.5, 0.0],
        "created_to_ungated": [2.0, 0.0],
        "ungated_to_whole": [0.5, 0.5],
        "first_bound_to_whole": [0.25],  # a's pods bound at 4.25 and 4.5; c is one pod
    }


def test_the_plots_are_written(tmp_path: Path) -> None:
    result = {
        "gangs_finished": 2,
        "gpu_hours_held_by_incomplete_gangs": 0.0,
        "gangs_stuck_partial_over_5min": 0,
        "wait_s": {"p50": 10.0, "p95": 20.0},
        "jct_s": {"mean": 100.0},
        "gpu_utilization": 0.5,
        "multi_node_gangs_in_one_rack_pct": 100.0,
        "timeline": {"trace_hours": [0.0, 0.1], "running_gpus": [8, 16], "waiting_gangs": [1, 0]},
        "wait_s_by_gang_size_all": {"1 pod": [0, 10, 30], "2-4 pods": [20, 400]},
    }
    plot({"floor": result, "gate": result}, tmp_path)
    for name in ("replay.png", "replay-timeline.png", "replay-waits.png"):
        assert (tmp_path / name).stat().st_size > 10_000, name


def test_each_gang_is_listed_in_arrival_order_with_its_wait_in_trace_time() -> None:
    """The rows a reader uses to see where in the run the tail came from (a burst, a fault)."""
    recorder = Recorder(frozenset({"vc"}))
    recorder.pods = {
        "vc/a-0": PodSeen("vc/a", 2, created=1.0, bound=2.0, ended=4.0),
        "vc/a-1": PodSeen("vc/a", 2, created=1.0, bound=3.0, ended=4.0),
        "vc/b-0": PodSeen("vc/b", 1, created=2.0),  # never bound: no wait
    }
    recorder.submitted = {"vc/a": 1.0, "vc/b": 2.0}
    recorder.completed = {"vc/a": 4.5}  # done 3.5 s after it was submitted, for a run of 2 s
    jobs = [ReplayJob("a", "vc", 1.0, 2.0, 2, 2, True), ReplayJob("b", "vc", 2.0, 2.0, 1, 1, False)]
    settings = Settings(nodes=1, rack_size=0, speedup=100.0, faults=False, drain_limit=0.0)
    figures = measure(recorder, jobs, {"a": "vc/a", "b": "vc/b"}, settings, 0.0, 5.0, {})
    columns = ["arrival_s", "pods", "gpus_per_pod", "high_priority", "wait_s", "delay_s", "wait_in_all_s"]
    assert figures["gangs"]["columns"] == columns
    assert figures["gangs"]["rows"] == [[100, 2, 2, True, 200, 150, 200], [200, 1, 1, False, None, None, None]]
    assert figures["delay_s"]["mean"] == 150.0 and figures["delay_s"]["count"] == 1


def test_a_pods_run_is_set_against_its_duration_and_work_cut_short_is_counted_as_lost() -> None:
    """A pod that finished: how long past its duration it held its GPUs; one that ended unfinished
    (preempted, evicted, requeued whole): the GPU-hours it ran for nothing."""
    by_job = {
        "vc/a": [
            PodSeen("vc/a", 2, created=0.0, bound=1.0, ended=4.0, succeeded=True),  # 1 s past its 2 s
            PodSeen("vc/a", 2, created=0.0, bound=1.0, ended=2.5),  # deleted after 1.5 s: 3 GPU-s lost
        ],
        "vc/b": [PodSeen("vc/b", 4, created=0.0, bound=2.0)],  # still running: neither
    }
    figures = run_times(by_job, {"vc/a": 2.0, "vc/b": 9.0}, speedup=3600.0)
    assert figures["pod_overrun_s"]["count"] == 1
    assert figures["pod_overrun_s"]["mean"] == 3600.0
    assert figures["gpu_hours_lost_to_restarts"] == 3.0
    assert figures["cut_short"]["rows"] == [[9000, "vc/a", 2, 5400]]  # ended 2.5 s in, after 1.5 s


def _pod(phase: str, node: str = "n1", deleting: bool = False) -> SimpleNamespace:
    meta = SimpleNamespace(namespace="vc", name="a-0", labels={"replay.gangkeeper.io/job": "a"})
    meta.deletion_timestamp = "now" if deleting else None
    container = SimpleNamespace(resources=SimpleNamespace(requests={"nvidia.com/gpu": "1"}))
    spec = SimpleNamespace(containers=[container], node_name=node, scheduling_gates=None, resource_claims=None)
    return SimpleNamespace(metadata=meta, spec=spec, status=SimpleNamespace(phase=phase, container_statuses=None))


def test_updates_of_a_running_pod_are_counted_but_not_its_deletion() -> None:
    """What touches running pods shows in the figures (on KWOK it once restarted their run)."""
    recorder = Recorder(frozenset({"vc"}))
    for moment, (kind, pod) in enumerate(
        [
            ("ADDED", _pod("Pending", node="")),
            ("MODIFIED", _pod("Pending")),  # bound
            ("MODIFIED", _pod("Running")),  # started
            ("MODIFIED", _pod("Running")),  # touched
            ("MODIFIED", _pod("Running")),  # touched
            ("MODIFIED", _pod("Running", deleting=True)),  # preempted: its end, not a touch
        ]
    ):
        recorder.see_pod(kind, pod, float(moment))
    seen = recorder.pods["vc/a-0"]
    assert (seen.updates_while_running, seen.bound, seen.ended, seen.succeeded) == (2, 1.0, 5.0, False)


def test_a_gang_preempted_after_it_started_waits_again_in_all() -> None:
    """Its first wait is until it was first whole; in all, every stretch short of whole before its last
    start: here 1 s, then 2 s after its first run was cut short (the stretch its pods ended one by one
    after the run is not a wait)."""
    pods = [
        PodSeen("vc/a", 1, created=0.0, bound=1.0, ended=3.0),
        PodSeen("vc/a", 1, created=0.0, bound=1.0, ended=3.0),
        PodSeen("vc/a", 1, created=3.0, bound=4.0, ended=9.0, succeeded=True),
        PodSeen("vc/a", 1, created=3.0, bound=5.0, ended=9.5, succeeded=True),
    ]
    assert waited_in_all(pods, 2, submitted=0.0) == 3.0
    assert waited_in_all(pods[:2], 2, submitted=0.0) == 1.0
    assert waited_in_all(pods[:1], 2, submitted=0.0) is None


def test_the_replay_with_gpus_as_dra_claims_each_pods_gpus_from_a_template_of_that_count() -> None:
    """--gpus-as dra: the Job asks no `nvidia.com/gpu`; its pods claim `gpus-N` (N devices), which
    the namespace's templates define; both valid for the API; the recorder counts the claimed GPUs."""
    from kubernetes import client

    from bench.replay import job_manifest
    from tests.realcluster import dra
    from tests.schemas import validate

    job = ReplayJob("j00001", "vc", arrival=0.0, duration=10.0, pods=2, gpus_per_pod=4, high=False)
    manifest = job_manifest(job, "dra")
    validate(manifest)
    validate(dra.claim_template("vc", "gpus-4", count=4))
    spec = manifest["spec"]["template"]["spec"]
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "gpus-4"}]
    assert "nvidia.com/gpu" not in str(manifest)
    assert "nvidia.com/gpu" in str(job_manifest(job))
    pod = client.ApiClient()._ApiClient__deserialize(  # type: ignore[attr-defined]
        {"metadata": {"name": "j00001-0", "namespace": "vc"}, "spec": spec, "status": {"phase": "Pending"}}, "V1Pod"
    )
    recorder = Recorder(frozenset({"vc"}))
    recorder.see_pod("ADDED", pod, 1.0)
    assert recorder.pods["vc/j00001-0"].gpus == 4
