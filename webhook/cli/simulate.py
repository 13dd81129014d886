"""`gangkeeper simulate`: a GPU-cluster trace replayed against the default scheduler and the queue policies."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from webhook.cli.options import Command
from webhook.controller.decide.headofline import DEFAULT_BOUND_SECONDS
from webhook.controller.decide.queue import DEFAULT_DEPTH


def add(command: Command) -> None:
    simulate = command(
        "simulate",
        help="replay a GPU-cluster trace: the default scheduler vs gangkeeper's queue policies",
    )
    simulate.add_argument("--trace", default=str(_default_trace()), help="CSV: timestamp,duration,num_gpus,...")
    simulate.add_argument("--start", default=None, help="first day of a slice, YYYY-MM-DD (default: all)")
    simulate.add_argument("--days", type=float, default=None, help="length of the slice in days")
    simulate.add_argument("--nodes", type=int, default=64)
    simulate.add_argument("--gpus-per-node", type=int, default=8)
    simulate.add_argument(
        "--split", choices=("node", "gpu"), default="node", help="node: ceil(g/8) workers (headline); gpu: 1 per pod"
    )
    simulate.add_argument("--policies", default="default,fifo,first-fit,backfill")
    simulate.add_argument("--orderings", type=int, default=3, help="pod orderings tried for the default scheduler")
    simulate.add_argument("--seed", type=int, default=1)
    simulate.add_argument(
        "--estimates", choices=("trace", "none"), default="trace", help="what backfill knows of run times"
    )
    simulate.add_argument("--queue-depth", type=int, default=DEFAULT_DEPTH, help="backfill reservations")
    simulate.add_argument(
        "--head-of-line-seconds",
        type=float,
        default=DEFAULT_BOUND_SECONDS,
        help="how long a waiting gang may hold others back at a time, as the controller's flag (0: no bound)",
    )
    simulate.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="replays run side by side (default: one per CPU)"
    )
    simulate.add_argument("--rack-size", type=int, default=0, help="nodes per rack (0: no racks)")
    simulate.add_argument(
        "--topology",
        default="none,required,preferred",
        help="with racks, gang policies run as listed: none, required or preferred to keep each gang in one rack",
    )
    simulate.add_argument("--plots", default=None, help="directory for PNG plots")
    simulate.add_argument("--json", default=None, help="write the figures as JSON here")
    simulate.set_defaults(func=run)


def _default_trace() -> Path:
    return Path(__file__).resolve().parents[2] / "data" / "traces" / "philly-2017-10-23-week.csv"


def run(args: argparse.Namespace) -> int:
    from webhook import simulation
    from webhook.simulation.engine import ClusterShape

    try:
        policies = simulation.parse_policies(args.policies)
    except ValueError as error:
        print(f"gangkeeper simulate: {error}", file=sys.stderr)
        return 2
    if not Path(args.trace).is_file():
        print(f"gangkeeper simulate: no trace at {args.trace}", file=sys.stderr)
        return 2
    topologies = tuple(t.strip() for t in args.topology.split(",") if t.strip())
    if not topologies or any(t not in ("none", "required", "preferred") for t in topologies):
        print("gangkeeper simulate: --topology: a list of none, required, preferred", file=sys.stderr)
        return 2
    settings = simulation.Settings(
        trace=Path(args.trace),
        start=args.start,
        days=args.days,
        shape=ClusterShape(nodes=args.nodes, gpus_per_node=args.gpus_per_node, nodes_per_rack=max(0, args.rack_size)),
        topologies=topologies,
        split=args.split,
        policies=policies,
        orderings=args.orderings,
        seed=args.seed,
        estimates=args.estimates == "trace",
        depth=args.queue_depth,
        head_of_line_seconds=args.head_of_line_seconds,
        workers=args.workers,
    )
    print(simulation.main(settings, Path(args.plots) if args.plots else None, Path(args.json) if args.json else None))
    return 0
