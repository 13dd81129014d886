"""`gangkeeper controller`: informers, leader election, probes and the reconcile loop."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from webhook import contract
from webhook.backends import DEFAULT_KUBERNETES_VERSION
from webhook.controller import metrics
from webhook.controller.act.gangobject import GANGS
from webhook.controller.act.kueue_checks import KUEUE_RESOURCES
from webhook.controller.act.kueue_checks import WORKLOADS as KUEUE_WORKLOADS
from webhook.controller.act.provisioning import PROVISIONING_REQUESTS, trim_request
from webhook.controller.observe.cel_budget import TenantBudget
from webhook.controller.observe.devices import RESOURCE_SLICES
from webhook.controller.observe.devices import RESOURCES as DRA_RESOURCES
from webhook.controller.observe.informer import (
    InformerSource,
    controller_informer,
    trim_kueue_workload,
    trim_node,
    trim_pod,
    trim_slice,
)
from webhook.controller.observe.workloads import all_workload_resources
from webhook.controller.run import garbage
from webhook.controller.run.bootstrap import ControllerSettings
from webhook.controller.run.leader import LeaderElector
from webhook.controller.run.reconciler import Controller
from webhook.informer import Informer, identity
from webhook.kube import NAMESPACES, NODES, PODS, Api, ApiError, Resource

log = logging.getLogger("gangkeeper.controller")

REDISCOVER_SECONDS = 60.0  # how soon a CRD installed after start (JobSet, Volcano, ...) is watched
MAX_PACING_SECONDS = 0.25  # the most a pass waits after the last one (see `run`)
PACING_FACTOR = 6.0  # a pass waits this many times as long as the last one took, up to MAX_PACING_SECONDS
STUCK_SECONDS = 120.0  # /healthz fails when the loop has not come round for this long
FAILING_PASSES = 5  # /healthz fails after this many passes in a row raised: a restart may clear it


class Probes:
    """What the kubelet asks: is the loop alive (/healthz), are the caches synced (/readyz)."""

    def __init__(self, synced: Callable[[], bool]) -> None:
        self.synced = synced
        self.last_loop = time.monotonic()
        self.failed_in_a_row = 0

    def alive(self) -> bool:
        return time.monotonic() - self.last_loop < STUCK_SECONDS and self.failed_in_a_row < FAILING_PASSES

    def serve(self, port: int) -> ThreadingHTTPServer:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        probes = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    code, body, kind = 200, generate_latest(), CONTENT_TYPE_LATEST
                elif self.path == "/healthz":
                    ok = probes.alive()
                    code, body, kind = (
                        (200 if ok else 500),
                        b"ok" if ok else b"reconcile loop stuck or failing",
                        "text/plain",
                    )
                elif self.path == "/readyz":
                    ok = probes.synced()
                    code, body, kind = (200 if ok else 503), b"ok" if ok else b"caches not synced", "text/plain"
                else:
                    code, body, kind = 404, b"not found", "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("", port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="probes", daemon=True).start()
        return server


def run(
    api_client: Any,
    namespace: str,
    interval: float = 10.0,
    native_version: str = "auto",
    metrics_port: int = 8080,
    stop: threading.Event | None = None,
    settings: ControllerSettings | None = None,
) -> None:
    """The controller process: `settings` as the command line gives them; with `native_version` "auto"
    the native generation is what the API server serves, discovered again every REDISCOVER_SECONDS."""
    stop = stop or threading.Event()
    collector: garbage.Collector | None = None
    # set by any watch event, leadership and the stop: the loop's sleep ends on each
    changed = threading.Event()
    if threading.current_thread() is threading.main_thread():  # the process; tests run it in a thread

        def on_sigterm(*_: object) -> None:
            stop.set()
            changed.set()  # stop now, not after the sleep: the Lease is handed over sooner

        signal.signal(signal.SIGTERM, on_sigterm)
        collector = garbage.start()  # the process's collector policy, not a test session's
    api = Api(api_client)
    # every pod counts against node capacity, so all of them are watched, not only gangkeeper's
    pods = controller_informer(api, PODS, transform=trim_pod, changed=changed)
    nodes = controller_informer(api, NODES, transform=trim_node, changed=changed)
    namespaces = controller_informer(api, NAMESPACES, transform=trim_namespace, changed=changed)
    identity = f"{socket.gethostname()}_{os.getpid()}"
    elector = LeaderElector(api, namespace, "gangkeeper-controller", identity, changed=changed)
    # the newest native generation the API server serves (the default where none, or no answer yet:
    # re-discovered every REDISCOVER_SECONDS below)
    native_now = native_served(api) or (DEFAULT_KUBERNETES_VERSION, False)
    settings = replace(
        settings or ControllerSettings(),
        native_version=native_version if native_version != "auto" else native_now[0],
        native_composite=native_now[1],
    )
    controller = Controller(
        api,
        InformerSource(pods, nodes),
        settings,
        may_write=elector.leading,
        opted_out=lambda name: left_gangkeeper(namespaces, name),
        monotonic=time.monotonic,
    )
    ledger = controller.device_watch.memo.ledger
    if isinstance(ledger, TenantBudget):  # what tenants' objects cost, remembered across leaders on the Lease
        elector.remembered, elector.recall = (lambda: ledger.remembered), ledger.recall
    probes = Probes(lambda: pods.synced.is_set() and nodes.synced.is_set())
    if metrics_port:
        probes.serve(metrics_port)
    watched = [pods, nodes, namespaces]
    for informer in watched:
        informer.start()
    elector.start()  # renews on its own period, whatever the loop is doing
    discovered_at = float("-inf")
    while not stop.is_set():
        probes.last_loop = time.monotonic()
        if time.monotonic() - discovered_at > REDISCOVER_SECONDS:
            served_now = native_served(api) if native_version == "auto" else None
            if served_now is not None:  # an upgraded API server may serve another generation now
                controller.serve_native(*served_now)
            # workloads and group objects too, for the kinds this cluster serves; checked again later,
            # so a CRD installed after the controller started is watched without a restart
            watched += watch_new(api, controller, changed)
            discovered_at = time.monotonic()
        metrics.LEADER.set(1 if elector.leading() else 0)
        spent = 0.0
        if elector.leading() and pods.synced.is_set() and nodes.synced.is_set():
            started = time.monotonic()
            try:
                controller.reconcile_once()
                probes.failed_in_a_row = 0
            except Exception:  # one bad pass must not stop the controller
                log.exception("reconcile pass failed")
                metrics.PASS_FAILURES.inc()
                probes.failed_in_a_row += 1
            spent = time.monotonic() - started
        if collector is not None:
            collector.between_passes()
        # a pause six times as long as the last pass: a burst of changes (a 1,000-pod gang's pods
        # arriving, its gates lifted, its pods bound) is taken in passes over many of them, not one pass
        # per change each over the whole gang, and passes take at most about a seventh of the
        # controller's time. With a pause as long as the pass, the leader passed 886 times in the
        # 1,000-pod autoscale run, back to back (bench/cluster.py controller_passes); three times, 750 to
        # 850; six times, 680 to 710. A small cluster's passes take milliseconds, and so do its pauses
        stop.wait(min(PACING_FACTOR * spent, MAX_PACING_SECONDS))
        # until something changes (a watch event, leadership) or the earliest deadline of any gang;
        # `interval` bounds the sleep, a safety net for a deadline nothing announced
        changed.wait(seconds_to_sleep(controller, interval))
        changed.clear()
    elector.stop(release=True)  # after the last pass: a standby or the next pod takes over at once
    for informer in watched:
        informer.stop()


def seconds_to_sleep(controller: Controller, interval: float) -> float:
    if controller.next_wake is None:
        return interval
    return min(interval, max(0.0, controller.next_wake - controller.clock().timestamp()))


def trim_namespace(namespace: dict[str, Any]) -> dict[str, Any]:
    meta = namespace.get("metadata") or {}
    return {"metadata": {"name": meta.get("name", ""), "labels": dict(meta.get("labels") or {})}}


def left_gangkeeper(namespaces: Informer, name: str) -> bool:
    """The namespace exists and no longer carries the opt-in label (unknown until the cache syncs)."""
    if not namespaces.synced.is_set():
        return False
    found = namespaces.get(None, name)
    return found is not None and found["metadata"]["labels"].get(contract.NAMESPACE_ENABLED_LABEL) != "true"


# what the cache keeps of each kind that trims (the others: as the API gives them)
TRIMS: dict[Resource, Callable[[dict[str, Any]], dict[str, Any]]] = {
    KUEUE_WORKLOADS: trim_kueue_workload,  # what the check reads of each (a cluster's worth of pod templates)
    PROVISIONING_REQUESTS: trim_request,
    RESOURCE_SLICES: trim_slice,  # a cluster's devices, one copy per model
}


def watch_new(api: Api, controller: Controller, changed: threading.Event) -> list[Informer]:
    """Start informers for the workload and group resources served now and not watched yet."""
    started = []
    wanted = [*all_workload_resources(), *controller.groups.resources(), GANGS, *DRA_RESOURCES, *KUEUE_RESOURCES]
    if controller.settings.autoscaler == "cluster-autoscaler":
        wanted.append(PROVISIONING_REQUESTS)
    for resource in served([r for r in wanted if (r.group_version, r.plural) not in controller.informers], api):
        informer = controller_informer(api, resource, transform=TRIMS.get(resource, identity), changed=changed)
        controller.informers[(resource.group_version, resource.plural)] = informer
        informer.start()
        started.append(informer)
        log.info("watching", extra={"resource": f"{resource.group_version}/{resource.plural}"})
    return started


def native_served(api: Api) -> tuple[str, bool] | None:
    """(the Kubernetes minor of the newest scheduling.k8s.io Workload API served, whether CompositePodGroups
    are), or None when discovery could not tell (an outage is not a downgrade: nothing changes then)."""
    try:
        return _native_served(api)
    except Exception:  # unreachable, refused, timed out: no answer, so no change
        log.warning("native API discovery failed; keeping the generation in use", exc_info=True)
        return None


def _native_served(api: Api) -> tuple[str, bool] | None:
    from webhook.backends import Native, Settings
    from webhook.backends.discovery import fetch_from_cluster

    found = Native.discover(fetch_from_cluster(api), Settings())
    return (found.kubernetes_version, found.composite_groups) if found is not None else None


def served(resources: list[Resource], api: Api) -> list[Resource]:
    """The resources among these that the API server serves (CRDs may not be installed)."""
    found = []
    for group_version in sorted({r.group_version for r in resources}):
        try:
            names = {r["name"] for r in api.get(f"/apis/{group_version}").get("resources") or []}
        except ApiError:
            continue
        found += [r for r in resources if r.group_version == group_version and r.plural in names]
    return found
