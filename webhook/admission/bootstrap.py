"""One bootstrap for the webhook, as `controller/run/bootstrap.py` is the controller's: the settings an
operator tunes (each a `gangkeeper serve` flag and a Configuration field of the same name), and the one
function that builds the webhook's collaborators from them. The CLI and the tests both build through it;
tests replace the cluster-facing parts (a fixed namespace list, a discovery answer) by name."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, fields
from typing import Any

from webhook import contract
from webhook.admission.ahead import VolcanoGroupsAhead
from webhook.admission.checks import protection
from webhook.admission.controller_lease import LeaseWatch
from webhook.admission.resolve import (
    BackendResolver,
    WatchedNamespaces,
    WatchedPriorityClasses,
    WatchedQueues,
)
from webhook.admission.workloads import WorkloadUids
from webhook.backends.discovery import DiscoveryCache, fetch_from_cluster
from webhook.gangs.topology import DEFAULT_LEVELS
from webhook.kube import Api


@dataclass(frozen=True)
class WebhookSettings:
    """What an operator tunes of admission: each field is the `gangkeeper serve` flag of its name."""

    backend: str = "auto"  # the cluster-wide default; a namespace's gangkeeper.io/backend label wins
    volcano_scheduler: str = "volcano"
    coscheduling_scheduler: str = "scheduler-plugins-scheduler"
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS
    volcano_queues: frozenset[str] = frozenset()  # queues every namespace may name ("*": any)
    protect_from_disruption: str = "true"  # karpenter.sh/do-not-disrupt on gang pods: "true", "false", a bound
    volcano_allocates_devices: bool = False  # Volcano allocates DRA claims (v1.12+ with its DRA predicate on)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WebhookSettings:
        """The settings the parsed command line names (the Configuration file is already merged in)."""
        given: dict[str, Any] = {
            f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None
        }
        if "topology_levels" in given:
            given["topology_levels"] = tuple(str(given["topology_levels"]).split(","))
        if "volcano_queues" in given:
            given["volcano_queues"] = frozenset(q.strip() for q in str(given["volcano_queues"]).split(",") if q.strip())
        if "protect_from_disruption" in given:
            given["protect_from_disruption"] = protection(given["protect_from_disruption"])
        if "volcano_allocates_devices" in given:
            given["volcano_allocates_devices"] = given["volcano_allocates_devices"] in (True, "true")
        return cls(**given)


def build_resolver(
    settings: WebhookSettings,
    api: Api | None = None,
    namespace: str = contract.SYSTEM_NAMESPACE,
    wait: bool = False,
    **parts: Any,
) -> BackendResolver:
    """The webhook's collaborators. With an API: its watches started (namespace labels, API discovery,
    the controller's Lease in `namespace`, Volcano's queues, PriorityClasses; a gang pod's workload uid
    read when asked), and with `wait` only once the
    first three are known, so a worker never answers from an empty cache. Without one: the offline
    answers (`gangkeeper mutate`, tests). `parts` replaces any of BackendResolver's by name."""
    watched: dict[str, Any] = {}
    if api is not None:
        namespaces = WatchedNamespaces(api)
        namespaces.start()
        discovery = DiscoveryCache(lambda: fetch_from_cluster(api))
        discovery.start()
        lease = LeaseWatch(api, namespace)
        lease.start()
        queues = WatchedQueues(api, lambda: discovery.served)
        priority_classes = WatchedPriorityClasses(api)
        priority_classes.start()
        while wait and not (namespaces.synced.wait(10) and discovery.wait(10) and lease.tried.wait(10)):
            print(
                "gangkeeper: waiting for the namespace list, API discovery and the controller's Lease", file=sys.stderr
            )
        watched = {
            "namespaces": namespaces,
            "served": lambda: discovery.served,
            "controller": lease.health,
            "queues": queues.states,
            "priority_classes": priority_classes.names,
            "workload_uids": WorkloadUids(api),
            "groups_ahead": VolcanoGroupsAhead(api),
        }
    return BackendResolver(
        default=settings.backend,
        volcano_scheduler=settings.volcano_scheduler,
        coscheduling_scheduler=settings.coscheduling_scheduler,
        topology_levels=settings.topology_levels,
        volcano_queues=settings.volcano_queues,
        protect_from_disruption=settings.protect_from_disruption,
        volcano_devices=settings.volcano_allocates_devices,
        **{**watched, **parts},
    )
