"""The kubelet of the node that runs gangkeeper itself (KWOK fakes every other node's).

gangkeeper's webhook and controller pods are created by the real Deployment and ReplicaSet controllers
and bound by the real kube-scheduler; this node then runs each one as the kubelet would: a pod sandbox
(tests/deployed.py) with the container's exact args, env and mounts, a service-account token from the
TokenRequest API bound to the pod, the readiness probe of its spec, and the status the EndpointSlice
controller reads. The node renews its Lease so the node lifecycle controller keeps it Ready.
Follows k8s.io/kubernetes pkg/kubelet (status manager, prober, token manager), much reduced.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.deployed import Container, Sandbox
from tests.realcluster.controlplane import ControlPlane

log = logging.getLogger(__name__)
# the system nodes' addresses: two, so the webhook's required anti-affinity places both replicas
SYSTEM_NODES = {"gk-system-1": "10.252.255.1", "gk-system-2": "10.252.255.2"}


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SystemNode:
    def __init__(self, plane: ControlPlane, name: str = "gk-system-1", image: Path | None = None) -> None:
        self.plane, self.name, self.ip = plane, name, SYSTEM_NODES[name]
        self.image = image  # an unpacked gangkeeper image: its pods run from it under runc
        self.api = client.ApiClient(config.new_client_from_config(str(plane.kubeconfig)).configuration)
        self.core = client.CoreV1Api(self.api)
        self.coordination = client.CoordinationV1Api(self.api)
        self.sandboxes: dict[str, Sandbox] = {}  # pod uid -> its sandbox
        self.ready: dict[str, bool] = {}
        # pods whose name starts with a key reach the API server at its address instead (a fault proxy)
        self.api_routes: dict[str, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"kubelet-{name}")

    def __enter__(self) -> SystemNode:
        self.register()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for sandbox in self.sandboxes.values():
            sandbox.close()
        self.sandboxes.clear()

    def register(self) -> None:
        self.core.create_node(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": self.name,
                    "labels": {
                        "kubernetes.io/hostname": self.name,
                        "kubernetes.io/os": "linux",
                        "node-role.gangkeeper.test/system": "",
                    },
                },
            }
        )
        self._node_status()

    def _node_status(self) -> None:
        stamp = now()
        self.core.patch_node_status(
            self.name,
            {
                "status": {
                    "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                    "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                    "addresses": [
                        {"type": "InternalIP", "address": self.ip},
                        {"type": "Hostname", "address": self.name},
                    ],
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "gangkeeper test kubelet",
                            "lastHeartbeatTime": stamp,
                            "lastTransitionTime": stamp,
                        }
                    ],
                    "nodeInfo": {
                        "kubeletVersion": f"v{self.plane.kubernetes_version}",
                        "architecture": "amd64",
                        "operatingSystem": "linux",
                        "containerRuntimeVersion": "sandbox://0",
                        "kernelVersion": "",
                        "osImage": "",
                        "kubeProxyVersion": "",
                        "machineID": "",
                        "systemUUID": "",
                        "bootID": "",
                    },
                }
            },
        )

    def _renew_lease(self) -> None:
        body = {
            "metadata": {"name": self.name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": 40,
                "renewTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
        try:
            self.coordination.patch_namespaced_lease(self.name, "kube-node-lease", body)
        except client.ApiException as error:
            if error.status != 404:
                raise
            self.coordination.create_namespaced_lease("kube-node-lease", body)

    def _run(self) -> None:
        ticks = 0
        while not self._stop.wait(0.5):
            try:
                if ticks % 20 == 0:
                    self._renew_lease()
                ticks += 1
                self.sync()
            except Exception:  # a failed sync is retried on the next tick, as the kubelet's loop does
                log.exception("kubelet %s: sync failed", self.name)

    def sync(self) -> None:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.name}").items
        seen = set()
        for pod in pods:
            uid = pod.metadata.uid
            seen.add(uid)
            if pod.metadata.deletion_timestamp is not None:
                self._kill(pod)
                continue
            if uid not in self.sandboxes:
                self._start(pod)
            self._report(pod)
        for uid in set(self.sandboxes) - seen:
            self.sandboxes.pop(uid).close()

    def _start(self, pod: Any) -> None:
        raw = self.api.sanitize_for_serialization(pod)
        namespace, name = raw["metadata"]["namespace"], raw["metadata"]["name"]
        holder = {"metadata": {"namespace": namespace}, "spec": {"template": {"spec": raw["spec"]}}}
        container = Container(holder, raw["spec"]["containers"][0])
        secrets = Path(tempfile.mkdtemp(prefix="gangkeeper-sa-", dir="/var/tmp"))
        token = self.core.create_namespaced_service_account_token(
            raw["spec"].get("serviceAccountName", "default"),
            namespace,
            {
                "spec": {
                    "audiences": ["https://kubernetes.default.svc.cluster.local"],
                    "expirationSeconds": 3600,
                    "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": name, "uid": pod.metadata.uid},
                }
            },
        )
        (secrets / "token").write_text(token.status.token)
        shutil.copy(self.plane.pki.ca, secrets / "ca.crt")
        (secrets / "namespace").write_text(namespace)
        for entry in (secrets, *secrets.iterdir()):
            entry.chmod(0o755 if entry.is_dir() else 0o644)
        config_maps = {
            source: dict(self.core.read_namespaced_config_map(source, namespace).data or {})
            for source, _ in container.config_map_mounts()
        }
        sandbox = Sandbox(
            name,
            container,
            0,
            service_account=secrets,
            api_address=next(
                (a for prefix, a in self.api_routes.items() if name.startswith(prefix)),
                (self.plane.advertise_address, self.plane.api_port),
            ),
            config_maps=config_maps,
            image=self.image,
        )
        self.sandboxes[pod.metadata.uid] = sandbox.start()
        self.ready[pod.metadata.uid] = False
        log.info("kubelet %s: started %s/%s at %s", self.name, namespace, name, sandbox.pod_ip)

    def _probe(self, sandbox: Sandbox) -> bool:
        probe = sandbox.container.spec.get("readinessProbe")
        alive = sandbox.process is not None and sandbox.process.poll() is None
        if not alive or not probe or "httpGet" not in probe:
            return alive
        http = probe["httpGet"]
        port = http["port"] if isinstance(http["port"], int) else sandbox.container.port(http["port"])
        return sandbox.get(port, http.get("path", "/"), tls=http.get("scheme", "HTTP") == "HTTPS") == 200

    def _report(self, pod: Any) -> None:
        if pod.status.phase in ("Succeeded", "Failed"):
            return  # terminal: nothing changes any more
        sandbox = self.sandboxes[pod.metadata.uid]
        ready = self._probe(sandbox)
        exited = sandbox.process is not None and sandbox.process.poll() is not None
        if pod.status.pod_ip == sandbox.pod_ip and self.ready.get(pod.metadata.uid) == ready and not exited:
            return
        self.ready[pod.metadata.uid] = ready
        stamp, flag = now(), "True" if ready else "False"
        name = sandbox.container.spec["name"]
        state = (
            {"terminated": {"exitCode": sandbox.process.returncode, "finishedAt": stamp}}  # type: ignore[union-attr]
            if exited
            else {"running": {"startedAt": stamp}}
        )
        self.core.patch_namespaced_pod_status(
            pod.metadata.name,
            pod.metadata.namespace,
            {
                "status": {
                    "phase": _phase(pod, sandbox, exited),
                    "hostIP": self.ip,
                    "podIP": sandbox.pod_ip,
                    "podIPs": [{"ip": sandbox.pod_ip}],
                    "startTime": pod.status.start_time.strftime("%Y-%m-%dT%H:%M:%SZ")
                    if pod.status.start_time
                    else stamp,
                    "conditions": [
                        {"type": t, "status": s, "lastTransitionTime": stamp}
                        for t, s in (
                            ("Initialized", "True"),
                            ("PodScheduled", "True"),
                            ("ContainersReady", flag),
                            ("Ready", flag),
                        )
                    ],
                    "containerStatuses": [
                        {
                            "name": name,
                            "image": sandbox.container.spec.get("image", ""),
                            "imageID": "",
                            "ready": ready,
                            "started": not exited,
                            "restartCount": 0,
                            "state": state,
                        }
                    ],
                }
            },
        )

    def _kill(self, pod: Any) -> None:
        sandbox = self.sandboxes.pop(pod.metadata.uid, None)
        if sandbox is not None:
            sandbox.close()  # SIGTERM, then up to 30 s to drain, as terminationGracePeriodSeconds
        try:
            self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        except client.ApiException as error:
            if error.status != 404:  # gone already: force-deleted while it drained
                raise

    def logs(self) -> str:
        return "\n".join(f"--- {s.name}\n{s.logs()[-4000:]}" for s in self.sandboxes.values())


def _phase(pod: Any, sandbox: Sandbox, exited: bool) -> str:
    """A pod that never restarts ends Succeeded or Failed with its container's exit code (a Job's pod,
    the chart's uninstall hook); others stay Running, as this kubelet restarts nothing."""
    if not exited or pod.spec.restart_policy != "Never":
        return "Running"
    return "Succeeded" if sandbox.process is not None and sandbox.process.returncode == 0 else "Failed"
