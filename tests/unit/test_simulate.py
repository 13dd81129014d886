"""`gangkeeper simulate` on a one-day slice of the shipped Philly week: the properties that must hold."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.controller.decide.queue import Policy, Reservation
from webhook.simulation import DEFAULT_TRACE, Settings, engine, kube_scheduler, report, run, trace

WEEK_SHA256 = "44ce3f9a658d55b96d8f6847c5bde973775d69a96dc82a1aa7f855dfd7ca29be"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "philly_jobs_pollux.csv"
SHAPE = engine.ClusterShape()


@pytest.fixture(scope="module")
def day() -> list[trace.TraceJob]:
    _, jobs = trace.read(DEFAULT_TRACE, "2017-10-23", 1)
    return jobs


def test_the_shipped_week_is_the_named_subset_byte_for_byte() -> None:
    data = DEFAULT_TRACE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == WEEK_SHA256
    assert len(data.splitlines()) == 7748 + 1
    notice = (DEFAULT_TRACE.parent / "NOTICE").read_text()
    assert "CC BY 4.0" in notice and "subset" in notice and "Jeon et al." in notice
    if SHARED.is_file():  # the source beside the clone: header plus that week's lines, order and bytes kept
        lines = SHARED.read_bytes().splitlines(keepends=True)
        expected = lines[0] + b"".join(line for line in lines[1:] if b"2017-10-23" <= line[:10] <= b"2017-10-29")
        assert data == expected


@pytest.mark.parametrize("bound", [0, 600])
def test_a_head_that_cannot_start_holds_the_queue_back_for_the_bound_as_in_the_controller(bound: int) -> None:
    """Two nodes: an 8-GPU job of unknown length on one, then a 16-GPU gang that needs both (its
    reservation holds both), then a 4-GPU job. Unbounded, the small job waits for the long one and the
    gang; with the controller's bound it starts when the gang at the head begins to yield, a moment at
    which nothing arrives or ends (the simulator wakes for it, as the controller does)."""
    shape = engine.ClusterShape(nodes=2)
    long, gang, small = (
        trace.TraceJob(0, 0.0, 10_000.0, 8, "a"),
        trace.TraceJob(1, 1.0, 100.0, 16, "b"),
        trace.TraceJob(2, 2.0, 100.0, 4, "c"),
    )
    result = engine.run_gangkeeper(
        [long, gang, small], shape, "node", Policy.BACKFILL, estimates=False, head_of_line_seconds=bound
    )
    start = {o.job.index: o.start for o in result.outcomes}
    assert start[0] == 0.0
    if bound:
        assert start[2] == pytest.approx(1.0 + bound)  # the gang began to hold at its arrival
    else:
        assert start[2] is not None and start[2] >= 10_000.0
    assert start[1] is not None and start[1] >= 10_000.0


def test_a_reservation_with_a_known_start_is_not_bounded() -> None:
    """The same cluster with run times known: the gang's reservation starts when the long job ends, so it
    holds the 4-GPU job (which would overlap that start) back past the bound, and starts on time."""
    shape = engine.ClusterShape(nodes=2)
    jobs = [
        trace.TraceJob(0, 0.0, 10_000.0, 8, "a"),
        trace.TraceJob(1, 1.0, 100.0, 16, "b"),
        trace.TraceJob(2, 2.0, 20_000.0, 4, "c"),
    ]
    result = engine.run_gangkeeper(jobs, shape, "node", Policy.BACKFILL, estimates=True, head_of_line_seconds=600)
    start = {o.job.index: o.start for o in result.outcomes}
    assert start[1] == pytest.approx(10_000.0)
    assert start[2] == pytest.approx(10_100.0)


@pytest.mark.parametrize("policy", list(Policy))
def test_no_partial_gang_ever_holds_gpus_under_gangkeeper(day: list[trace.TraceJob], policy: Policy) -> None:
    result = engine.run_gangkeeper(day, SHAPE, "node", policy)
    assert all(o.start is not None and o.first_bind == o.start for o in result.outcomes)
    assert all(o.held_idle_gpu_seconds == 0 for o in result.outcomes)
    assert all(sample.idle_held_gpus == 0 for sample in result.samples)
    assert max(s.busy_gpus for s in result.samples) <= SHAPE.nodes * SHAPE.gpus_per_node


def test_the_default_scheduler_lets_partial_gangs_hold_gpus_on_the_same_day(day: list[trace.TraceJob]) -> None:
    result = kube_scheduler.run_default_scheduler(day, SHAPE, "gpu", seed=1)  # one GPU per pod: the stress case
    held = sum(o.held_idle_gpu_seconds for o in result.outcomes)
    assert held > 0 and any(s.idle_held_gpus > 0 for s in result.samples)


def test_backfill_never_delays_the_reservation(day: list[trace.TraceJob]) -> None:
    promised: dict[str, float] = {}

    def seen(now: float, rank: int, head: Reservation) -> None:
        if rank == 0 and head.at is not None:  # the head's reservation is exact; later ones are plans
            promised[head.gang] = min(promised.get(head.gang, head.at), head.at)

    # a quarter of the cluster, so that the day has gangs waiting at the head; no head-of-line bound (with
    # one, a head that waited past it yields, and what goes meanwhile may delay it: the next test)
    small = engine.ClusterShape(nodes=16)
    result = engine.run_gangkeeper(
        [j for j in day if j.gpus <= 128], small, "node", Policy.BACKFILL, on_reservation=seen, head_of_line_seconds=0
    )
    starts = {f"trace/job{o.job.index}": o.start for o in result.outcomes}
    assert promised, "the day never had a gang waiting at the head"
    late = {gang: (starts[gang], at) for gang, at in promised.items() if (starts[gang] or 0) > at + 1e-6}
    assert not late
    assert len(promised) > 20  # many reservations were made, every one kept
    assert out_of_order(result) > 0  # and gangs behind the heads were backfilled past them


def out_of_order(result: engine.Result) -> int:
    """Gangs that started before a gang that arrived earlier."""
    ordered = sorted(result.outcomes, key=lambda o: (o.job.arrival, o.job.index))
    latest_start, passed = -1.0, 0
    for outcome in ordered:
        assert outcome.start is not None
        if outcome.start < latest_start:
            passed += 1
        latest_start = max(latest_start, outcome.start)
    return passed


def test_strict_fifo_starts_gangs_in_arrival_order(day: list[trace.TraceJob]) -> None:
    small = engine.ClusterShape(nodes=16)
    jobs = [j for j in day if j.gpus <= 128]
    # strict up to the head-of-line bound: a head waiting past it lets the ones behind go (the test above)
    assert out_of_order(engine.run_gangkeeper(jobs, small, "node", Policy.FIFO, head_of_line_seconds=0)) == 0


def test_a_replay_is_deterministic_for_a_seed_side_by_side_or_not(day: list[trace.TraceJob]) -> None:
    settings = Settings(start="2017-10-23", days=1, orderings=2, policies=("default", "backfill"), workers=2)
    first = [[report.summarize(r, 512).row() for r in results] for _, results in run(settings)[0]]
    alone = dataclasses.replace(settings, workers=1)
    second = [[report.summarize(r, 512).row() for r in results] for _, results in run(alone)[0]]
    for rows in (first, second):
        for group in rows:
            for row in group:
                row.pop("runtime_seconds")
    assert first == second


def test_simulate_from_the_command_line_prints_the_table_and_writes_plots(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "simulate",
            "--start",
            "2017-10-23",
            "--days",
            "1",
            "--orderings",
            "2",
            "--plots",
            str(tmp_path),
            "--json",
            str(tmp_path / "figures.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "modelling switches:" in out and "GPU-h held by unstarted gangs" in out
    for name in ("waits.png", "gpus.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert set(figures["policies"]) == {
        "default scheduler",
        "gangkeeper fifo",
        "gangkeeper first-fit",
        "gangkeeper backfill",
    }
    assert all(
        row["held_idle_gpu_hours"] == 0
        for label, rows in figures["policies"].items()
        if "gangkeeper" in label
        for row in rows
    )


def test_an_unknown_policy_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "simulate", "--policies", "lifo"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "unknown policy 'lifo'" in done.stderr and "Traceback" not in done.stderr


def test_the_gpu_plot_says_what_the_table_says(day: list[trace.TraceJob]) -> None:
    """gangkeeper's panels draw no band of held GPUs (an empty one drawn with an edge line looked like
    GPUs held) and their titles carry the table's 0.0; the default scheduler's carry its own figure."""
    from webhook.simulation.report import gpu_panel, summarize

    gangkeeper_run = engine.run_gangkeeper(day, SHAPE, "node", Policy.BACKFILL)
    default_run = kube_scheduler.run_default_scheduler(day, SHAPE, "gpu", seed=1)
    title, holds = gpu_panel(gangkeeper_run)
    assert not holds and title.endswith(": 0.0 GPU-hours held by gangs not yet started")
    title, holds = gpu_panel(default_run)
    total = SHAPE.nodes * SHAPE.gpus_per_node
    assert holds and f"{summarize(default_run, total).held_idle_gpu_hours:.1f} GPU-hours" in title


def test_the_rack_model_keeps_required_gangs_in_one_rack(day: list[trace.TraceJob]) -> None:
    """Racks of 8 nodes: a required gang (at most a rack's 64 GPUs) always starts inside one rack;
    preferred keeps at least as many in one rack as the default scheduler, which knows no racks."""
    shape = dataclasses.replace(SHAPE, nodes_per_rack=8)
    fits_a_rack = [job for job in day if job.gpus <= 8 * shape.gpus_per_node]
    required = engine.run_gangkeeper(fits_a_rack, shape, "node", Policy.BACKFILL, topology="required")
    started = [o for o in required.outcomes if o.start is not None]
    assert started and all(o.racks == 1 for o in started)
    assert all(o.held_idle_gpu_seconds == 0 for o in required.outcomes)
    preferred = report.summarize(
        engine.run_gangkeeper(fits_a_rack, shape, "node", Policy.BACKFILL, topology="preferred"), 512
    )
    default = report.summarize(kube_scheduler.run_default_scheduler(fits_a_rack, shape, "node", seed=1), 512)
    assert preferred.one_rack_share >= default.one_rack_share
    assert report.summarize(required, 512).one_rack_share == 1.0


def test_the_documented_slice_is_contended_and_its_columns_are_whole() -> None:
    """docs/simulate.md's slice: the default scheduler holds GPUs in unstarted gangs, gangkeeper holds
    none; with racks every column's label is printed whole."""
    command = [sys.executable, "-m", "webhook", "simulate", "--start", "2017-10-25", "--days", "1", "--nodes", "16"]
    out = subprocess.run(
        [*command, "--rack-size", "4", "--orderings", "1"], capture_output=True, text=True, timeout=300, check=True
    ).stdout
    assert "--start 2017-10-25 --days 1 --nodes 16" in (Path(__file__).parents[2] / "docs/simulate.md").read_text()
    header = next(line for line in out.splitlines() if line.strip().startswith("default scheduler"))
    assert "gangkeeper first-fit required" in header and "gangkeeper backfill preferred" in header
    held = next(line for line in out.splitlines() if line.startswith("GPU-h held by unstarted gangs")).split()[5:]
    assert float(held[0].split("-")[0]) > 0 and all(float(cell) == 0 for cell in held[1:]), held
