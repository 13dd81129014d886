"""The controller built from its settings: the one place its collaborators are made and wired to each
other. `gangkeeper controller` builds its settings from the flags and the Configuration file
(`ControllerSettings.from_args`); tests and benchmarks take the defaults and change what they test."""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

from webhook.backends import DEFAULT_KUBERNETES_VERSION, Mechanisms, Settings, Volcano
from webhook.controller.act.claim_holders import ClaimHolders
from webhook.controller.act.events import EventRecorder, Recorder
from webhook.controller.act.gangobject import GANGS, GangObjects
from webhook.controller.act.groups import GroupObjects
from webhook.controller.act.placeholders import Placeholders
from webhook.controller.act.preemptor import Preemptor
from webhook.controller.act.provisioning import PROVISIONING_REQUESTS, ProvisioningRequests
from webhook.controller.act.release import Releaser
from webhook.controller.act.report import Reporter
from webhook.controller.act.requeue import DEFAULT_MAX_ATTEMPTS, Requeuer
from webhook.controller.decide.headofline import DEFAULT_BOUND_SECONDS, HeadOfLine
from webhook.controller.decide.pods import DEFAULT_RECOVERY_SECONDS, RELEASE_CONCURRENCY
from webhook.controller.decide.preemption import DEFAULT_MIN_RUNTIME_SECONDS
from webhook.controller.decide.queue import DEFAULT_DEPTH, DEFAULT_POLICY, Policy
from webhook.controller.decide.state import DEFAULT_BACKOFF_BASE_SECONDS
from webhook.controller.observe.autoscaler import DEFAULT_MAX_PLACEHOLDER_PODS, FRESH_SECONDS, PAUSE_IMAGE, Autoscaler
from webhook.controller.observe.cluster import ClusterIndex
from webhook.controller.observe.resolve import Workloads
from webhook.controller.observe.store import GangStore
from webhook.controller.run.cycle import ReleaseCycle
from webhook.informer import Informer
from webhook.kube import Api


@dataclass(frozen=True)
class ControllerSettings:
    """What an operator tunes: each field is a `gangkeeper controller` flag (and a Configuration field)
    of the same name, except the test-only ones marked."""

    native_version: str = DEFAULT_KUBERNETES_VERSION  # scheduling.k8s.io generation of native gangs
    native_composite: bool = False  # whether CompositePodGroups are served (discovered, not a flag)
    volcano_scheduler: str = "volcano"
    release_concurrency: int = RELEASE_CONCURRENCY
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    recovery_seconds: int = DEFAULT_RECOVERY_SECONDS
    queue_policy: Policy = DEFAULT_POLICY
    queue_depth: int = DEFAULT_DEPTH
    head_of_line_seconds: float = DEFAULT_BOUND_SECONDS
    min_runtime_seconds: float = DEFAULT_MIN_RUNTIME_SECONDS
    backoff_base_seconds: float = DEFAULT_BACKOFF_BASE_SECONDS
    autoscaler: str = "auto"
    placeholder_image: str = PAUSE_IMAGE
    max_placeholder_pods: int = DEFAULT_MAX_PLACEHOLDER_PODS
    max_placeholder_pods_per_namespace: int | None = None  # half of max_placeholder_pods when not given
    component: str = "gangkeeper-controller"  # the Events' reporting component
    orphan_seconds: float = 30.0  # test-only: how often stray group objects are looked for
    resync_seconds: float = 10.0  # test-only: how long a gang's workload read is trusted without a change
    visit_settled: bool = False  # test-only: a turn for every gang every pass (the benchmark's baseline)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ControllerSettings:
        """The settings the parsed command line names (the Configuration file is already merged in)."""
        given = {f.name: getattr(args, f.name) for f in fields(cls) if getattr(args, f.name, None) is not None}
        if "queue_policy" in given:
            given["queue_policy"] = Policy(given["queue_policy"])
        if given.get("native_version") == "auto":
            del given["native_version"]  # discovered by the process before the first pass
        if getattr(args, "recovery_timeout", None) is not None:
            given["recovery_seconds"] = args.recovery_timeout
        return cls(**given)


@dataclass
class Collaborators:
    """The controller's parts, each made once and handed the others it needs."""

    recorder: Recorder
    gang_objects: GangObjects
    workloads: Workloads
    reporter: Reporter
    releaser: Releaser
    requeuer: Requeuer
    mechanisms: Mechanisms
    groups: GroupObjects
    index: ClusterIndex
    cycle: ReleaseCycle
    store: GangStore
    claim_holders: ClaimHolders


def wire(
    api: Api,
    settings: ControllerSettings,
    informers: Mapping[tuple[str, str], Informer],
    may_write: Callable[[], bool],
    clock: Callable[[], dt.datetime],
    recorder: Recorder | None = None,
) -> Collaborators:
    """Every collaborator of one controller. `informers` is the controller's own map (watches started
    later join it); `may_write` is asked before each batch of writes (leadership)."""
    # Events by the API unless told otherwise (tests pass a list: tests/recorder.py ListRecorder)
    recorder = recorder or EventRecorder(api, settings.component, clock)
    # the Gang objects: what people see of each gang, and the controller's books (attempts, backoff,
    # suspensions), read back from there and never from an annotation a tenant could write
    store = GangStore()  # the one memory of each gang between passes (observe/store.py)
    gang_objects = GangObjects(api, lambda: informers.get((GANGS.group_version, GANGS.plural)), may_write, store=store)
    workloads = Workloads(api, informers, settings.recovery_seconds)
    autoscaler = Autoscaler(api, settings.autoscaler)
    reporter = Reporter(recorder, gang_objects, may_write, autoscaler.present, store)
    releaser = Releaser(api, reporter, may_write, settings.release_concurrency)
    requeuer = Requeuer(
        api, workloads, reporter, gang_objects, settings.max_attempts, may_write, settings.backoff_base_seconds
    )
    # the mechanisms as configured: a gang's is the object that stamped its pods, never a name rebuilt
    mechanisms = Mechanisms(
        Settings(scheduler_names={Volcano.name: settings.volcano_scheduler}),
        settings.native_version,
        settings.native_composite,
    )
    index = ClusterIndex(gang_objects.releases, lambda pod: mechanisms.of_pod(pod).name)
    placeholders = Placeholders(
        api,
        index,
        gang_objects.get,
        autoscaler.present,
        may_write,
        settings.placeholder_image,
        autoscaler.pools,
        settings.max_placeholder_pods,
        lambda: autoscaler.pools(FRESH_SECONDS),
        # Cluster Autoscaler, where it serves the API: one ProvisioningRequest per gang, not placeholder pods
        ProvisioningRequests(
            api,
            lambda: informers.get((PROVISIONING_REQUESTS.group_version, PROVISIONING_REQUESTS.plural)),
            gang_objects.get,
            may_write,
            clock,
        )
        if settings.autoscaler == "cluster-autoscaler"
        else None,
        settings.max_placeholder_pods_per_namespace,
        store=store,
    )
    cycle = ReleaseCycle(
        store,
        index,
        gang_objects,
        reporter,
        releaser,
        requeuer,
        HeadOfLine(settings.head_of_line_seconds, store.namespaces),
        Preemptor(api, requeuer, may_write, mechanisms, settings.min_runtime_seconds),
        placeholders,
    )
    groups = GroupObjects(api, workloads, reporter, mechanisms)
    return Collaborators(
        recorder,
        gang_objects,
        workloads,
        reporter,
        releaser,
        requeuer,
        mechanisms,
        groups,
        index,
        cycle,
        store,
        ClaimHolders(api, gang_objects.get, settings.placeholder_image),
    )
