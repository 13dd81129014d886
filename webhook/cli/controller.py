"""`gangkeeper controller`: group objects for every backend and gang release for the gate."""

from __future__ import annotations

import argparse
import os

from webhook.cli import options
from webhook.cli.options import Command
from webhook.controller.decide.headofline import DEFAULT_BOUND_SECONDS
from webhook.controller.decide.pods import DEFAULT_RECOVERY_SECONDS, RELEASE_CONCURRENCY
from webhook.controller.decide.preemption import DEFAULT_MIN_RUNTIME_SECONDS
from webhook.controller.decide.queue import DEFAULT_DEPTH, DEFAULT_POLICY, Policy
from webhook.controller.decide.state import DEFAULT_BACKOFF_BASE_SECONDS, MAX_BACKOFF_SECONDS
from webhook.controller.observe.autoscaler import AUTOSCALERS, DEFAULT_MAX_PLACEHOLDER_PODS, PAUSE_IMAGE


def add(command: Command) -> None:
    controller = command("controller", help="run the controller: group objects and gang release")
    controller.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    controller.add_argument("--server", default=None, help="API server URL without credentials (tests)")
    controller.add_argument("--namespace", default="gangkeeper-system", help="where the leader Lease lives")
    controller.add_argument(
        "--interval",
        type=float,
        default=10.0,
        help="longest wait between passes when nothing changes and no gang's deadline falls due (seconds)",
    )
    controller.add_argument(
        "--native-version",
        choices=("auto", *options.KUBERNETES_VERSIONS),
        default="auto",
        help="scheduling.k8s.io generation of native gangs; auto: the newest the API server serves (%(default)s)",
    )
    controller.add_argument("--metrics-port", type=int, default=8080)
    controller.add_argument(
        "--release-concurrency",
        type=int,
        default=RELEASE_CONCURRENCY,
        help="release PATCHes sent side by side (%(default)s; the API client's pool holds 96 connections)",
    )
    controller.add_argument(
        "--volcano-scheduler",
        default="volcano",
        help="the schedulerName the webhook gives Volcano's pods (schedulerNames.volcano): a LeaderWorkerSet "
        "whose templates carry it gets its PodGroups ahead of its pods",
    )
    controller.add_argument(
        "--max-attempts", type=int, default=5, help="times a timed-out gang is requeued before it gives up"
    )
    controller.add_argument(
        "--recovery-timeout",
        type=options.recovery_seconds,
        default=DEFAULT_RECOVERY_SECONDS,
        help="seconds a gang that ran whole may run short of a member before it is requeued whole "
        "(a gang's gangkeeper.io/recovery-timeout-seconds wins; %(default)s)",
    )
    controller.add_argument(
        "--queue-policy",
        choices=[p.value for p in Policy],
        default=DEFAULT_POLICY.value,
        help="how waiting gate gangs take turns: backfill (the head's reservation is never delayed), fifo, "
        "or first-fit (see `gangkeeper simulate`)",
    )
    controller.add_argument(
        "--queue-depth", type=int, default=DEFAULT_DEPTH, help="backfill: gangs at the front that hold a reservation"
    )
    controller.add_argument(
        "--head-of-line-seconds",
        type=float,
        default=DEFAULT_BOUND_SECONDS,
        help="a waiting gang holds the gangs behind it back for at most this long at a time, then yields for as "
        "long (0: no bound)",
    )
    controller.add_argument(
        "--min-runtime-seconds",
        type=float,
        default=DEFAULT_MIN_RUNTIME_SECONDS,
        help="a gate gang released less than this long ago is no preemptor's victim (KAI's preemptMinRuntime): "
        "no thrash between two gangs taking turns (%(default)s)",
    )
    controller.add_argument(
        "--backoff-base-seconds",
        type=float,
        default=DEFAULT_BACKOFF_BASE_SECONDS,
        help="a requeued gang waits this long before its next release, doubled on each attempt up to "
        f"{MAX_BACKOFF_SECONDS} s (Kueue's requeuingStrategy.backoffBaseSeconds; %(default)s)",
    )
    controller.add_argument(
        "--autoscaler",
        choices=AUTOSCALERS,
        default="auto",
        help="what adds nodes for Unschedulable pods: a gate gang that waits on capacity gets placeholder pods "
        "it can see; auto: Karpenter when its NodePools exist",
    )
    controller.add_argument(
        "--placeholder-image", default=PAUSE_IMAGE, help="the image of placeholder pods (they only hold room)"
    )
    controller.add_argument(
        "--max-placeholder-pods",
        type=int,
        default=DEFAULT_MAX_PLACEHOLDER_PODS,
        help="placeholder pods in the cluster at once; a gang whose placeholders would pass it gets none and "
        "says so (%(default)s)",
    )
    controller.add_argument(
        "--max-placeholder-pods-per-namespace",
        type=int,
        default=None,
        help="of those, the placeholder pods of one namespace's gangs, so no team takes them all "
        "(default: half of --max-placeholder-pods)",
    )
    controller.add_argument("--log-level", default="info")
    options.add_gang_limit(controller)
    options.add_config(controller)
    controller.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from webhook import logs
    from webhook.controller.run import process
    from webhook.controller.run.bootstrap import ControllerSettings
    from webhook.kube import client_from

    logs.setup(args.log_level)
    process.run(
        client_from(args.kubeconfig, args.server),
        args.namespace,
        args.interval,
        args.native_version,
        args.metrics_port,
        settings=ControllerSettings.from_args(args),
    )
    return 0
