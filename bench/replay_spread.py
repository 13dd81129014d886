"""Several draws of one replay, side by side: the replay's waits move from run to run on the same slice
(the control plane's timing decides which of two gangs that arrive a moment apart starts first), so one
run's gate-to-anchor ratio is one draw. Given the JSONs of bench/replay.py runs with the same settings,
this prints per backend each headline figure's median [min-max] over the draws, the waits pooled over
every draw's gangs (a p95 of all of them, steadier than any one run's), and per draw the gate's ratio
to the best anchor mechanism in that run (issue 51's target: within 1.1x, mean and p95).

    python bench/replay_spread.py RUN.json RUN.json ... [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replay_check import percentile

GANGKEEPER = ("gate",)
NOT_ANCHORS = ("floor", *GANGKEEPER)  # the floor is the baseline with no gang, not a gang mechanism
WAITS = ("wait_s", "wait_in_all_s", "delay_s")  # the per-gang columns of `gangs` that are waits
FIGURES: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "wait mean": lambda r: r["wait_s"]["mean"],
    "wait p95": lambda r: r["wait_s"]["p95"],
    "wait in all mean": lambda r: r["wait_in_all_s"]["mean"],
    "wait in all p95": lambda r: r["wait_in_all_s"]["p95"],
    "delay p95": lambda r: r["delay_s"]["p95"],
    "GPU-h held partly": lambda r: r["gpu_hours_held_by_incomplete_gangs"],
    "GPU-h lost": lambda r: r["gpu_hours_lost_to_restarts"],
    "preemptions": lambda r: r["preemptions"],
}
RATIOS = ("wait mean", "wait p95", "wait in all mean", "wait in all p95")


def same_settings(runs: Sequence[Mapping[str, Any]]) -> None:
    """Draws are comparable only on the same slice, cluster shape and speedup."""
    first = runs[0]["settings"]
    for run in runs[1:]:
        differing = sorted(k for k in {*first, *run["settings"]} if first.get(k) != run["settings"].get(k))
        if differing:
            raise SystemExit(f"the runs differ in settings {differing}: not draws of one replay")


def reported(figure: str, results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every run reports the figure (runs before a figure was added lack it)."""
    try:
        for result in results:
            FIGURES[figure](result)
    except KeyError:
        return False
    return True


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 2), "min": min(values), "max": max(values)}


def pooled(runs: Sequence[Mapping[str, Any]], backend: str, column: str) -> dict[str, float | None]:
    """One wait column of every draw's gangs together (only the gangs that started: a wait is null else)."""
    values: list[float] = []
    for run in runs:
        gangs = run["backends"][backend]["gangs"]
        at = gangs["columns"].index(column)
        values += [row[at] for row in gangs["rows"] if row[at] is not None]
    return {"mean": round(statistics.fmean(values), 1), "p95": percentile(values, 0.95), "gangs": len(values)}


def best_anchor(backends: Mapping[str, Mapping[str, Any]], figure: str) -> tuple[str, float] | None:
    anchors = [(FIGURES[figure](r), name) for name, r in backends.items() if name not in NOT_ANCHORS]
    if not anchors:
        return None
    value, name = min(anchors)
    return name, value


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    same_settings(runs)
    names = [n for n in runs[0]["backends"] if all(n in run["backends"] for run in runs)]
    results = [run["backends"][name] for run in runs for name in names]
    shown = [figure for figure in FIGURES if reported(figure, results)]
    figures = {
        name: {figure: spread([FIGURES[figure](run["backends"][name]) for run in runs]) for figure in shown}
        for name in names
    }
    columns = [c for c in WAITS if all(c in r["gangs"]["columns"] for r in results)]
    waits = {name: {column: pooled(runs, name, column) for column in columns} for name in names}
    ratios: dict[str, dict[str, Any]] = {}
    for mine in (n for n in names if n in GANGKEEPER):
        for figure in (f for f in RATIOS if f in shown):
            draws = []
            for run in runs:
                anchor = best_anchor(run["backends"], figure)
                if anchor is not None and anchor[1] > 0:
                    draws.append((round(FIGURES[figure](run["backends"][mine]) / anchor[1], 2), anchor[0]))
            if draws:
                ratios.setdefault(mine, {})[figure] = {
                    "draws": [{"ratio": r, "anchor": a} for r, a in draws],
                    **spread([r for r, _ in draws]),
                }
    return {"draws": len(runs), "settings": runs[0]["settings"], "figures": figures, "pooled": waits, "ratios": ratios}


def show(summary: Mapping[str, Any]) -> str:
    lines = [f"{summary['draws']} draws: {json.dumps(summary['settings'])}", "median [min-max] over the draws:"]
    for name, figures in summary["figures"].items():
        cells = ", ".join(f"{f} {s['median']:g} [{s['min']:g}-{s['max']:g}]" for f, s in figures.items())
        lines.append(f"  {name}: {cells}")
    lines.append("every draw's gangs pooled (trace s):")
    for name, columns in summary["pooled"].items():
        cells = ", ".join(f"{c} mean {w['mean']:g} p95 {w['p95']:g}" for c, w in columns.items())
        lines.append(f"  {name} ({next(iter(columns.values()))['gangs']} gangs): {cells}")
    lines.append("gangkeeper / the best anchor of each draw:")
    for name, figures in summary["ratios"].items():
        for figure, r in figures.items():
            each = ", ".join(f"{d['ratio']:g}x ({d['anchor']})" for d in r["draws"])
            lines.append(f"  {name} {figure}: median {r['median']:g}x [{r['min']:g}-{r['max']:g}]: {each}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="bench/replay.py --json outputs, same settings")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    summary = summarize([json.loads(path.read_text()) for path in args.runs])
    print(show(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
