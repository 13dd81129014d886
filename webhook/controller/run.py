"""`gangkeeper controller`: informers, leader election and the reconcile loop."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from typing import Any

from webhook.controller.informer import Informer, InformerSource, trim_node, trim_pod
from webhook.controller.kube import NODES, PODS, Api, ApiError, Resource
from webhook.controller.leader import LeaderElector
from webhook.controller.reconciler import Controller
from webhook.controller.workloads import WORKLOAD_RESOURCES

log = logging.getLogger("gangkeeper.controller")


def run(
    api_client: Any,
    namespace: str,
    interval: float = 1.0,
    native_version: str = "1.37",
    metrics_port: int = 8080,
    stop: threading.Event | None = None,
) -> None:
    from prometheus_client import start_http_server

    stop = stop or threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    api = Api(api_client)
    if metrics_port:
        start_http_server(metrics_port)
    # every pod counts against node capacity, so all of them are watched, not only gangkeeper's
    changed = threading.Event()
    pods = Informer(api, PODS, transform=trim_pod, changed=changed)
    nodes = Informer(api, NODES, transform=trim_node, changed=changed)
    controller = Controller(api, InformerSource(pods, nodes), native_version=native_version)
    # workloads and group objects too, for the kinds this cluster serves
    watched = [pods, nodes]
    for resource in served([*WORKLOAD_RESOURCES.values(), *controller.group_resources()], api):
        informer = Informer(api, resource, changed=changed)
        controller.informers[(resource.group_version, resource.plural)] = informer
        watched.append(informer)
    for informer in watched:
        informer.start()
    identity = f"{socket.gethostname()}_{os.getpid()}"
    elector = LeaderElector(api, namespace, "gangkeeper-controller", identity)
    leading = False
    while not stop.is_set():
        now_leading = elector.try_acquire_or_renew()
        if now_leading != leading:
            log.info("leadership changed", extra={"leader": now_leading, "identity": identity})
            leading = now_leading
        if leading and pods.synced.is_set() and nodes.synced.is_set():
            try:
                controller.reconcile_once()
            except Exception:  # one bad pass must not stop the controller
                log.exception("reconcile pass failed")
        changed.wait(interval)
        changed.clear()
    for informer in watched:
        informer.stop()


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
