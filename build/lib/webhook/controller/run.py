"""`gangkeeper controller`: informers, leader election and the reconcile loop."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from typing import Any

from webhook.controller.informer import Informer, InformerSource, trim_node, trim_pod
from webhook.controller.kube import NODES, PODS, Api
from webhook.controller.leader import LeaderElector
from webhook.controller.reconciler import Controller

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
    pods, nodes = Informer(api, PODS, transform=trim_pod), Informer(api, NODES, transform=trim_node)
    pods.start()
    nodes.start()
    identity = f"{socket.gethostname()}_{os.getpid()}"
    elector = LeaderElector(api, namespace, "gangkeeper-controller", identity)
    controller = Controller(api, InformerSource(pods, nodes), native_version=native_version)
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
        pods.changed.wait(interval)
        pods.changed.clear()
    pods.stop()
    nodes.stop()
