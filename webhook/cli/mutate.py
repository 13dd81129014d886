"""`gangkeeper mutate`: what admission does to a YAML stream, offline."""

from __future__ import annotations

import argparse
import sys

from webhook.backends import DEFAULT_KUBERNETES_VERSION
from webhook.cli import options
from webhook.cli.options import Command


def add(command: Command) -> None:
    mutate = command("mutate", help="show what admission does to a YAML stream, offline")
    mutate.add_argument(
        "-f",
        "--file",
        required=True,
        action="append",
        help="as kubectl's: a YAML or JSON file, a directory of them, or - for standard input (repeatable)",
    )
    mutate.add_argument(
        "--backend",
        choices=options.BACKEND_CHOICES,
        default="auto",
        help="as the webhook's --backend; offline, auto means gate. A Namespace in the stream labelled "
        "gangkeeper.io/backend decides for its objects",
    )
    mutate.add_argument(
        "--kubernetes-version",
        choices=options.KUBERNETES_VERSIONS,
        default=DEFAULT_KUBERNETES_VERSION,
        help="native backend: which scheduling.k8s.io generation to produce",
    )
    mutate.add_argument("--namespace", default="default", help="namespace of objects that name none")
    mutate.add_argument("--scheduler-name", default=None, help="schedulerName the backend injects")
    mutate.add_argument("--diff", action="store_true", help="print a unified diff instead of the objects")
    mutate.add_argument(
        "--topology-levels",
        type=options.topology_levels,
        default=None,
        help="the cluster's topology levels, broadest first (its Configuration's topologyLevels)",
    )
    mutate.add_argument(
        "--volcano-hypernodes",
        action="store_true",
        help="volcano backend: preview for a Volcano that serves HyperNodes (topology.volcano.sh, 1.11+)",
    )
    options.add_config(mutate)
    options.add_gang_limit(mutate)
    mutate.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from webhook import manifests
    from webhook.offline import diff, dump, mutate_stream

    try:
        documents = [d.obj for d in manifests.read(args.file, sys.stdin)]
    except manifests.ManifestError as error:
        print(f"gangkeeper mutate: {error}", file=sys.stderr)
        return 2
    result = mutate_stream(
        documents,
        args.backend,
        args.kubernetes_version,
        args.namespace,
        args.scheduler_name,
        options.levels_of(args),
        args.volcano_hypernodes,
    )
    for line in result.summary:
        print(line, file=sys.stderr)
    for warning in result.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    for note in result.notes:
        print(f"Note: {note}", file=sys.stderr)
    for denial in result.denials:
        print(
            f'Error from server: admission webhook "mutate.gangkeeper.io" denied the request: {denial}', file=sys.stderr
        )
    sys.stdout.write(diff(result) if args.diff else dump(result.objects))
    return 1 if result.denials else 0
