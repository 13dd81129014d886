"""`gangkeeper explain`: why a gang waits, from what the cluster says."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from webhook.cli.options import Command
from webhook.controller.decide.queue import DEFAULT_POLICY, Policy


def add(command: Command) -> None:
    explain = command("explain", help="why a gang waits: members, capacity, node by node")
    explain.add_argument(
        "gang",
        help="NAMESPACE/GANG (the pods' gangkeeper.io/group label), or what you applied: NAMESPACE/KIND/NAME "
        "(Job/train, job/train) or NAMESPACE/NAME",
    )
    explain.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    explain.add_argument("--server", default=None)
    explain.add_argument(
        "--queue-policy", choices=[p.value for p in Policy], default=DEFAULT_POLICY.value, help="the controller's"
    )
    explain.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from webhook.controller.run.explain import UnknownGang, explain, explain_from_gang
    from webhook.kube import Api, ApiError, client_from

    namespace, _, reference = args.gang.partition("/")
    if not reference:
        print("gangkeeper explain: expected NAMESPACE/GANG, NAMESPACE/KIND/NAME or NAMESPACE/NAME", file=sys.stderr)
        return 2
    api = Api(client_from(args.kubeconfig, args.server))
    gang = _gang_named(api, namespace, reference)
    if gang is None:
        return 1
    try:
        try:
            print(explain(api, namespace, gang, args.queue_policy))
        except ApiError as error:
            if error.status != 403:
                raise
            # read access to one namespace only (a tenant): what the Gang object says
            print(explain_from_gang(api, namespace, gang))
    except UnknownGang as unknown:
        print(f"gangkeeper explain: {unknown}", file=sys.stderr)
        return 1
    return 0


def _gang_named(api: Any, namespace: str, reference: str) -> str | None:
    """The gang a user means by what they applied (`Job/train`, `train`) or by its name; None, with a
    line on stderr, when the reference is ambiguous."""
    from webhook.controller.act.gangobject import GANGS
    from webhook.controller.run.explain import matching_gangs
    from webhook.kube import ApiError

    try:
        gangs = api.list(GANGS.path(namespace)).get("items") or []
    except ApiError as error:
        if error.status not in (403, 404):
            raise
        return reference  # no Gang objects to read: the name as given
    found = matching_gangs(reference, gangs)
    if len(found) > 1:
        print(
            f"gangkeeper explain: {reference} names {len(found)} gangs in {namespace}: "
            + ", ".join(found)
            + f"; give one: gangkeeper explain {namespace}/{found[0]}",
            file=sys.stderr,
        )
        return None
    return found[0] if found else reference
