"""`gangkeeper release-all`: before uninstalling, every gate lifted and every suspension undone."""

from __future__ import annotations

import argparse
import os
import sys

from webhook.cli.options import Command


def add(command: Command) -> None:
    release = command(
        "release-all",
        help="before uninstalling: lift every gate gangkeeper set and resume what it suspended",
    )
    release.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    release.add_argument("--server", default=None, help="API server URL without credentials (tests)")
    release.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from webhook.controller.act.uninstall import release_all
    from webhook.kube import Api, client_from

    done = release_all(Api(client_from(args.kubeconfig, args.server)))
    print(f"gangkeeper release-all: {len(done.gates)} gates lifted, {len(done.resumed)} workloads resumed")
    for what in done.failed:
        print(f"  not released: {what}", file=sys.stderr)
    return 1 if done.failed else 0
