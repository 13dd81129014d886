"""What several commands share: their option types, the configuration file and the gang limit."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.backends import NAMES
from webhook.backends.native import GENERATIONS
from webhook.gangs.common import MAX_TIMEOUT_SECONDS
from webhook.gangs.topology import DEFAULT_LEVELS, label_key_problem

BACKEND_CHOICES = ("auto", *NAMES)
KUBERNETES_VERSIONS = tuple(GENERATIONS)
# how a subcommand module makes its parser: `command(name, help=...)`, the --help formatter given
Command = Callable[..., argparse.ArgumentParser]


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def add_config(parser: argparse.ArgumentParser) -> None:
    from webhook import config

    parser.add_argument(
        config.FLAG,
        default=None,
        metavar="FILE",
        help=f"a {config.KIND} ({config.API_VERSION}) file; flags given on the command line win over it",
    )


def add_gang_limit(parser: argparse.ArgumentParser) -> None:
    from webhook.gangs import limits

    def gang_limit(text: str) -> int:
        value = positive_int(text)
        if value > limits.CEILING:
            raise argparse.ArgumentTypeError(
                f"must be at most {limits.CEILING}, not {value} (a Gang object records each released pod)"
            )
        return value

    parser.add_argument(
        limits.FLAG,
        type=gang_limit,
        default=limits.DEFAULT_MAX_GANG_PODS,
        help="pods a workload may have; larger ones are refused at admission and left by the controller "
        "(default: %(default)s)",
    )


def topology_levels(text: str) -> str:
    """Comma-separated node label keys, each valid and named once."""
    levels = [level.strip() for level in text.split(",") if level.strip()]
    if not levels or len(levels) > 16:
        raise argparse.ArgumentTypeError("expected 1 to 16 node label keys, comma-separated")
    for level in levels:
        problem = label_key_problem(level)
        if problem is not None:
            raise argparse.ArgumentTypeError(f"{level!r} is not a node label key: {problem}")
    if len(set(levels)) != len(levels):
        raise argparse.ArgumentTypeError("each level once")
    return ",".join(levels)


def levels_of(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(str(getattr(args, "topology_levels", None) or ",".join(DEFAULT_LEVELS)).split(","))


def recovery_seconds(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_TIMEOUT_SECONDS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_TIMEOUT_SECONDS} seconds")
    return value


def api_client(kubeconfig: str | None) -> Any:
    """A client for the cluster in-cluster or from a kubeconfig; None when there is no cluster."""
    from kubernetes import client, config

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
        config.load_incluster_config()
        return client.ApiClient()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path and Path(path).exists():
        return config.new_client_from_config(config_file=path)
    return None
