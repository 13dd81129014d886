"""What a replay measured, per policy: as a table, as JSON, and as plots."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.simulation.engine import JobOutcome, Result, Sample
from webhook.simulation.trace import SIZE_CLASSES, size_class

STUCK_SECONDS = 300  # a gang holding GPUs this long while incomplete counts as stuck


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class Summary:
    label: str
    jobs: int
    never_started: int
    held_idle_gpu_hours: float  # GPU time held by gangs that had not started
    stuck_jobs: int  # held GPUs for more than 5 minutes while incomplete, or never started after binding some
    waits_hours: dict[str, tuple[int, float, float, float, float]]  # class -> (n, mean, p50, p95, p99)
    largest_gpus: int
    largest_worst_wait_hours: float
    makespan_hours: float
    utilisation: float  # GPU-seconds of running gangs / (GPUs x makespan)
    stranded_free_share: float  # time-averaged share of free GPUs on partly used nodes
    runtime_seconds: float
    one_rack_share: float = math.nan  # started gangs of 2+ pods whose pods share one rack (rack model)

    def row(self) -> dict[str, object]:
        def num(value: float, digits: int) -> float | None:
            return None if math.isnan(value) else round(value, digits)

        return {
            "policy": self.label,
            "jobs": self.jobs,
            "never_started": self.never_started,
            "held_idle_gpu_hours": round(self.held_idle_gpu_hours, 1),
            "stuck_jobs": self.stuck_jobs,
            "waits_hours": {
                k: {"n": n, "mean": num(m, 3), "p50": num(a, 3), "p95": num(b, 3), "p99": num(c, 3)}
                for k, (n, m, a, b, c) in self.waits_hours.items()
            },
            "largest_gpus": self.largest_gpus,
            "largest_worst_wait_hours": num(self.largest_worst_wait_hours, 2),
            "makespan_hours": round(self.makespan_hours, 2),
            "utilisation": round(self.utilisation, 4),
            "stranded_free_share": round(self.stranded_free_share, 4),
            "runtime_seconds": round(self.runtime_seconds, 2),
            "one_rack_share": num(self.one_rack_share, 4),
        }


def summarize(result: Result, total_gpus: int) -> Summary:
    outcomes = result.outcomes
    largest = max((o.job.gpus for o in outcomes), default=0)
    largest_waits = [
        (o.wait if o.wait is not None else result.end_time - o.job.arrival) / 3600
        for o in outcomes
        if o.job.gpus == largest
    ]
    first = min((o.job.arrival for o in outcomes), default=0.0)
    last = max((o.end for o in outcomes if o.end is not None), default=first)
    makespan = max(last - first, 1e-9)
    busy = sum(o.job.gpus * o.job.duration for o in outcomes if o.end is not None)
    return Summary(
        label=result.label,
        jobs=len(outcomes),
        never_started=sum(1 for o in outcomes if o.start is None),
        held_idle_gpu_hours=sum(o.held_idle_gpu_seconds for o in outcomes) / 3600,
        stuck_jobs=_stuck(result),
        waits_hours=_wait_table(outcomes),
        largest_gpus=largest,
        largest_worst_wait_hours=max(largest_waits, default=math.nan),
        makespan_hours=makespan / 3600,
        utilisation=busy / (total_gpus * makespan),
        stranded_free_share=_stranded_share(result.samples),
        runtime_seconds=result.runtime_seconds,
        one_rack_share=_one_rack_share(outcomes),
    )


def _wait_table(outcomes: Sequence[JobOutcome]) -> dict[str, tuple[int, float, float, float, float]]:
    """Per size class (and all): how many started, their mean, p50, p95 and p99 wait in hours."""
    waits: dict[str, list[float]] = {k: [] for k in ("all", *SIZE_CLASSES)}
    for outcome in outcomes:
        if outcome.wait is not None:
            waits["all"].append(outcome.wait / 3600)
            waits[size_class(outcome.job.gpus)].append(outcome.wait / 3600)
    return {
        k: (len(v), sum(v) / len(v) if v else math.nan, percentile(v, 0.5), percentile(v, 0.95), percentile(v, 0.99))
        for k, v in waits.items()
    }


def _stuck(result: Result) -> int:
    """Gangs partly bound for longer than STUCK_SECONDS (to the end, if they never started)."""
    return sum(
        1
        for o in result.outcomes
        if o.first_bind is not None
        and ((o.start if o.start is not None else result.end_time) - o.first_bind) > STUCK_SECONDS
    )


def _stranded_share(samples: Sequence[Sample]) -> float:
    """Of the free GPU time, the share on partly used nodes (where no whole-node pod fits)."""
    stranded_time = free_time = 0.0
    for current, following in itertools.pairwise(samples):
        span = following.at - current.at
        stranded_time += current.stranded_free_gpus * span
        free_time += current.free_gpus * span
    return stranded_time / free_time if free_time else 0.0


def _one_rack_share(outcomes: Sequence[JobOutcome]) -> float:
    spanned = [o for o in outcomes if o.racks and o.pods > 1]
    return sum(1 for o in spanned if o.racks == 1) / len(spanned) if spanned else math.nan


def _span(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}" if math.isclose(low, high, rel_tol=1e-9, abs_tol=1e-9) else f"{low:.2f}-{high:.2f}"


def table(groups: Sequence[tuple[str, Sequence[Summary]]]) -> str:
    """One block per policy; a policy replayed under several pod orderings shows the range."""
    lines = []
    # each column as wide as its label (whole: "gangkeeper first-fit required" is not cut), at least 14
    widths = [max(len(label), 12) + 2 for label, _ in groups]
    header = f"{'':30}" + "".join(f"{label:>{width}}" for (label, _), width in zip(groups, widths, strict=True))
    lines.append(header)

    def line(name: str, pick: object) -> None:
        cells = []
        for (_, summaries), width in zip(groups, widths, strict=True):
            values = [pick(s) for s in summaries]  # type: ignore[operator]
            cells.append(f"{_span(values):>{width}}")
        lines.append(f"{name:30}" + "".join(cells))

    line("GPU-h held by unstarted gangs", lambda s: s.held_idle_gpu_hours)
    line(f"gangs stuck > {STUCK_SECONDS // 60} min incomplete", lambda s: s.stuck_jobs)
    line("jobs never started", lambda s: s.never_started)
    for size in ("all", *SIZE_CLASSES):
        if all(s.waits_hours[size][0] == 0 for _, group in groups for s in group):
            continue
        label = "all gangs" if size == "all" else f"{size} GPU{'s' if size != '1' else ''}"
        for index, stat in ((1, "mean"), (2, "p50"), (3, "p95"), (4, "p99")):
            line(f"wait h, {label}, {stat}", lambda s, size=size, index=index: s.waits_hours[size][index])
    line("largest gang's worst wait h", lambda s: s.largest_worst_wait_hours)
    line("makespan h", lambda s: s.makespan_hours)
    line("GPU utilisation %", lambda s: 100 * s.utilisation)
    line("free GPUs stranded %", lambda s: 100 * s.stranded_free_share)
    if any(not math.isnan(s.one_rack_share) for _, group in groups for s in group):
        line("multi-pod gangs in one rack %", lambda s: 100 * s.one_rack_share)
    line("replay s", lambda s: s.runtime_seconds)
    return "\n".join(lines)


def gpu_panel(result: Result) -> tuple[str, bool]:
    """A replay's panel in gpus.png: its title, with the GPU-hours the table reports, and whether it has
    a band of GPUs held by partial gangs to draw at all."""
    held = sum(o.held_idle_gpu_seconds for o in result.outcomes) / 3600
    return f"{result.label}: {held:.1f} GPU-hours held by gangs not yet started", any(
        s.idle_held_gpus for s in result.samples
    )


def plot(results: Sequence[Result], total_gpus: int, directory: Path) -> list[Path]:
    """Two PNGs: the distribution of waits, and GPUs running vs held idle by partial gangs over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    figure, axes = plt.subplots(figsize=(8, 5))
    for result in results:
        waits = sorted(max(o.wait, 1.0) / 3600 for o in result.outcomes if o.wait is not None)
        if waits:
            axes.plot(waits, [(i + 1) / len(waits) for i in range(len(waits))], label=result.label)
    axes.set_xscale("log")
    axes.set_xlabel("queueing delay (hours, log)")
    axes.set_ylabel("share of started gangs")
    axes.set_title("Queueing delay by policy")
    axes.legend(fontsize=8)
    axes.grid(True, alpha=0.3)
    path = directory / "waits.png"
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    written.append(path)

    figure, grid = plt.subplots(len(results), 1, figsize=(9, 2.2 * len(results)), sharex=True, squeeze=False)
    rows: Any = grid[:, 0]
    for row, result in zip(rows, results, strict=True):
        title, holds = gpu_panel(result)
        times = [s.at / 3600 for s in result.samples]
        row.fill_between(
            times, [s.busy_gpus for s in result.samples], step="post", alpha=0.6, linewidth=0, label="running"
        )
        if holds:
            # no edge line: an empty band drawn with one looked like GPUs held where the table says none
            row.fill_between(
                times,
                [s.busy_gpus for s in result.samples],
                [s.busy_gpus + s.idle_held_gpus for s in result.samples],
                step="post",
                color="tab:red",
                alpha=0.6,
                linewidth=0,
                label="held by partial gangs",
            )
        row.set_ylim(0, total_gpus)
        row.set_ylabel("GPUs")
        row.set_title(title, fontsize=9)
        row.legend(fontsize=7, loc="lower right")
    rows[-1].set_xlabel("hours since the first arrival")
    path = directory / "gpus.png"
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    written.append(path)
    return written
