"""What `kubectl apply -k` deploys, run here as processes: the deployed-configuration test tier.

Each container of a rendered Deployment runs with its exact `args`, `env` (with `$(VAR)` expanded as
the kubelet does, fieldRefs resolved) and mounts, in a pod sandbox of its own:
- a network namespace with a pod IP on a veth pair, so the port in the args is the pod's own, and the
  API server reaches it by that IP, as a Service's endpoints do;
- a private mount namespace where `/tmp` is a tmpfs of the emptyDir's sizeLimit and the root file
  system is read-only (`readOnlyRootFilesystem: true`);
- the manifest's `runAsUser`/`runAsGroup`.
The one addition is KUBECONFIG, pointing at the test API server: it stands in for the service account
token the kubelet mounts. The API server is tests/apiserver.py with tests/admission_chain.py installed,
which calls the webhook through the rendered webhook configurations and Service.

Needs root (network and mount namespaces), `ip` (iproute2), `unshare` and `setpriv` (util-linux).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.admission_chain import AdmissionChain
from tests.apiserver import TestApiServer
from tests.workers import worker_number

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
PLURALS = {  # kinds the tests apply to the API server: kind -> (group/version, plural)
    "Namespace": ("v1", "namespaces"),
    "Service": ("v1", "services"),
    "ServiceAccount": ("v1", "serviceaccounts"),
    "MutatingWebhookConfiguration": ("admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations"),
    "ValidatingWebhookConfiguration": ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations"),
}
# the image's ENV (Dockerfile): what every container process starts with besides the manifest's env
IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
IMAGE_ENTRYPOINT = ("python3", "-m", "webhook")  # the Dockerfile's ENTRYPOINT


def missing_tools() -> str | None:
    """Why this machine cannot run the tier, or None."""
    if os.geteuid() != 0:
        return "the deployed-configuration tier needs root for network and mount namespaces"
    for tool in ("ip", "unshare", "setpriv", "kubectl"):
        if shutil.which(tool) is None:
            return f"the deployed-configuration tier needs {tool}"
    return None


def render(kustomization: str) -> list[dict[str, Any]]:
    output = subprocess.run(
        ["kubectl", "kustomize", str(MANIFESTS / kustomization)], capture_output=True, text=True, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(output) if d]


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: dict[str, str]) -> str:
    """The kubelet's `$(VAR)` expansion: defined names are replaced, `$$` is a literal `$`, anything else
    stays as written (k8s.io/kubernetes third_party/forked/golang/expansion/expand.go)."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(replace, value)


@dataclass
class Container:
    deployment: dict[str, Any]
    spec: dict[str, Any]

    @property
    def pod_spec(self) -> dict[str, Any]:
        return self.deployment["spec"]["template"]["spec"]  # type: ignore[no-any-return]

    def env(self, pod_name: str) -> dict[str, str]:
        """The container's environment in order, each value expanded against those before it."""
        resolved: dict[str, str] = {}
        meta = self.deployment["metadata"]
        fields = {"metadata.namespace": meta["namespace"], "metadata.name": pod_name}
        for entry in self.spec.get("env") or []:
            if "value" in entry:
                resolved[entry["name"]] = expand(entry["value"], resolved)
            else:
                resolved[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        return resolved

    def args(self, env: dict[str, str]) -> list[str]:
        return [expand(a, env) for a in self.spec.get("args") or []]

    def has_tmp_volume(self) -> bool:
        return any(m["mountPath"] == "/tmp" for m in self.spec.get("volumeMounts") or [])

    def tmp_mount_options(self) -> str:
        """/tmp as the container has it: the emptyDir mounted there, with its sizeLimit; without one,
        the image's empty /tmp under a read-only root."""
        mount = next((m for m in self.spec.get("volumeMounts") or [] if m["mountPath"] == "/tmp"), None)
        if mount is None:
            return "size=1m"
        volume = next(v for v in self.pod_spec["volumes"] if v["name"] == mount["name"])
        size = volume["emptyDir"].get("sizeLimit", "64Mi")
        return f"size={size.replace('Mi', 'm').replace('Gi', 'g')},mode=1777"

    def config_map_mounts(self) -> list[tuple[str, str]]:
        """(ConfigMap name, mount path) of each configMap volume the container mounts."""
        volumes = {v["name"]: v for v in self.pod_spec.get("volumes") or []}
        found = []
        for mount in self.spec.get("volumeMounts") or []:
            source = volumes.get(mount["name"], {}).get("configMap")
            if source is not None:
                found.append((source["name"], mount["mountPath"]))
        return found

    def port(self, name: str) -> int:
        return int(next(p["containerPort"] for p in self.spec["ports"] if p["name"] == name))


def container_of(objects: list[dict[str, Any]], deployment: str) -> Container:
    found = find(objects, "Deployment", deployment)
    return Container(found, found["spec"]["template"]["spec"]["containers"][0])


_subnets = itertools.count(1)


def code_under_tmp() -> list[Path]:
    """The checkout and the Python installation, where they lie under /tmp (outermost paths only)."""
    candidates = {MANIFESTS.parent, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    under = sorted(p for p in candidates if p.is_relative_to("/tmp"))
    return [p for p in under if not any(p != other and p.is_relative_to(other) for other in under)]


# a probe's TLS, verifying nothing as the kubelet's does: one context for every probe (the real tier
# probes each of gangkeeper's pods every half second; ssl.create_default_context() parses the system's
# CA bundle each time, some 30 ms of CPU, most of the test process's CPU while the real tier ran)
PROBE_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
PROBE_TLS.check_hostname, PROBE_TLS.verify_mode = False, ssl.CERT_NONE


@dataclass
class Sandbox:
    """One pod: its own network namespace and address, its own /tmp, a read-only root."""

    name: str
    container: Container
    api_port: int
    index: int = field(default_factory=lambda: next(_subnets))
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    # in a real cluster (tests/realcluster/kubelet.py): the service-account directory the kubelet
    # mounts at /var/run/secrets/kubernetes.io/serviceaccount, and the API server's address and port
    service_account: Path | None = None
    api_address: tuple[str, int] | None = None
    # the data of the ConfigMaps the container mounts (name -> file name -> text), as the kubelet projects them
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    # an unpacked image (umoci unpack: config.json and rootfs/): the container runs from it under runc, a
    # real OCI runtime, in this sandbox's network namespace; None runs this checkout's code as a process
    image: Path | None = None
    runc_id: str = ""

    def __post_init__(self) -> None:
        tag = f"{os.getpid() % 10000}x{self.index}"
        self.netns, self.host_if, self.pod_if = f"gk{tag}", f"gkh{tag}", f"gkp{tag}"
        # another process's sandboxes (a `make cluster` beside the test session, the other xdist worker)
        # take other subnets: 250 + the worker's number under xdist, else one of 200-249 by process id
        worker = worker_number()
        octet = int(
            os.environ.get("GK_SANDBOX_OCTET") or (250 + worker if worker is not None else 200 + os.getpid() % 50)
        )
        self.host_ip, self.pod_ip = f"10.{octet}.{self.index}.1", f"10.{octet}.{self.index}.2"
        # what a run killed before its clean-up may have left under these names, or on this subnet (the
        # same octet from another process id): its route would swallow this sandbox's packets
        holders = subprocess.run(
            ["ip", "-o", "-4", "addr", "show", "to", f"{self.host_ip[:-2]}.0/30"], capture_output=True, text=True
        ).stdout.split()
        for stale in {self.host_if, *(holders[1:2])}:
            subprocess.run(["ip", "link", "del", stale.split("@")[0]], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
        for command in (
            ["ip", "netns", "add", self.netns],
            ["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.pod_if],
            ["ip", "link", "set", self.pod_if, "netns", self.netns],
            ["ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if],
            ["ip", "link", "set", self.host_if, "up"],
            ["ip", "netns", "exec", self.netns, "ip", "addr", "add", f"{self.pod_ip}/30", "dev", self.pod_if],
            ["ip", "netns", "exec", self.netns, "ip", "link", "set", self.pod_if, "up"],
            ["ip", "netns", "exec", self.netns, "ip", "link", "set", "lo", "up"],
        ):
            subprocess.run(command, check=True, capture_output=True)
        if self.api_address:  # the API server's host address is reached through the veth
            route = ["ip", "route", "add", f"{self.api_address[0]}/32", "via", self.host_ip]
            subprocess.run(["ip", "netns", "exec", self.netns, *route], check=True, capture_output=True)
        # outside /tmp, which the container replaces with its own
        self.outside = Path(tempfile.mkdtemp(prefix="gangkeeper-pod-", dir="/var/tmp"))
        self.kubeconfig = self.outside / "kubeconfig"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "test", "cluster": {"server": f"http://{self.host_ip}:{self.api_port}"}}],
                    "users": [{"name": "sa", "user": {}}],
                    "contexts": [{"name": "test", "context": {"cluster": "test", "user": "sa"}}],
                    "current-context": "test",
                }
            )
        )
        self.kubeconfig.chmod(0o644)
        self.outside.chmod(0o755)

    def start(self) -> Sandbox:
        env = {**IMAGE_ENV, **self.container.env(self.name)}
        args = self.container.args(env)
        security = {**self.container.pod_spec.get("securityContext", {}), **self.container.spec["securityContext"]}
        user, group = security.get("runAsUser", 65532), security.get("runAsGroup", 65532)
        # The image holds the code and the interpreter; here they may live under /tmp (a clone in /tmp),
        # which the emptyDir covers: they are bound aside first, then back at the same paths.
        keep = code_under_tmp()
        aside = [self.outside / f"keep{i}" for i in range(len(keep))]
        for directory in aside:
            directory.mkdir()
        steps = [f"mount --bind {shlex.quote(str(p))} {shlex.quote(str(a))}" for p, a in zip(keep, aside, strict=True)]
        steps.append(f"mount -t tmpfs -o {self.container.tmp_mount_options()} tmpfs /tmp")
        steps += [
            f"mkdir -p {shlex.quote(str(p))} && mount --bind {shlex.quote(str(a))} {shlex.quote(str(p))}"
            for p, a in zip(keep, aside, strict=True)
        ]
        if not self.container.has_tmp_volume():
            steps.append("mount -o remount,ro /tmp")  # the image's own /tmp, under a read-only root
        for files, path in self.projected_config_maps():
            steps.append(
                f"mkdir -p {shlex.quote(path)} && mount --bind -o ro {shlex.quote(str(files))} {shlex.quote(path)}"
            )
        access = {"KUBECONFIG": str(self.kubeconfig)}
        if self.service_account and self.api_address:
            target = "/var/run/secrets/kubernetes.io/serviceaccount"
            steps.append(f"mkdir -p {target} && mount --bind {shlex.quote(str(self.service_account))} {target}")
            host, port = self.api_address
            access = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port)}
        if self.image is not None:
            return self._start_from_image(
                env, args, (user, group), access, bool(security.get("readOnlyRootFilesystem"))
            )
        if security.get("readOnlyRootFilesystem"):
            steps.append("mount -o remount,ro,bind /")
        steps.append(f'exec setpriv --reuid={user} --regid={group} --clear-groups -- "$@"')
        setup = " && ".join(steps)
        self.log = self.outside / "container.log"
        sandbox = ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--", "sh", "-c", setup, "sh"]
        self.process = subprocess.Popen(
            # ENTRYPOINT ["python3", "-m", "webhook"] of the image, with this interpreter
            [*sandbox, sys.executable, "-m", "webhook", *args],
            env={"PATH": os.environ["PATH"], "HOME": "/nonexistent", **env, **access},
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            cwd="/",
        )
        return self

    def projected_config_maps(self) -> list[tuple[Path, str]]:
        """Each mounted ConfigMap's data written to a directory outside the pod, as the kubelet projects
        it: (that directory, the container's mount path)."""
        projected = []
        for config_map, path in self.container.config_map_mounts():
            files = self.outside / f"configmap-{config_map}"
            files.mkdir(exist_ok=True)
            for file_name, text in self.config_maps.get(config_map, {}).items():
                (files / file_name).write_text(text)
                (files / file_name).chmod(0o644)
            files.chmod(0o755)
            projected.append((files, path))
        return projected

    def _start_from_image(
        self, env: dict[str, str], args: list[str], owner: tuple[int, int], access: dict[str, str], read_only: bool
    ) -> Sandbox:
        """The container as a kubelet with runc runs it: the image's root (read-only as the manifest
        says), its ENTRYPOINT with the manifest's args, the image's env under the manifest's, the UID
        and group of the securityContext, no capabilities, the emptyDir and ConfigMap and service-account
        mounts, and the pod sandbox's network namespace."""
        assert self.image is not None
        config = json.loads((self.image / "config.json").read_text())
        image_env = dict(item.split("=", 1) for item in config["process"].get("env") or [])
        process = config["process"]
        process["args"] = [*IMAGE_ENTRYPOINT, *args]
        process["env"] = [f"{k}={v}" for k, v in {**image_env, **env, **access}.items()]
        process["user"] = {"uid": owner[0], "gid": owner[1]}
        process["terminal"], process["cwd"], process["noNewPrivileges"] = False, "/", True
        process["capabilities"] = {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}
        config["root"] = {"path": str(self.image / "rootfs"), "readonly": read_only}
        mounts = [m for m in config["mounts"] if m["destination"] != "/tmp"]
        size = self.container.tmp_mount_options()
        mounts.append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": size.split(",")})
        if self.service_account is not None:
            target = "/var/run/secrets/kubernetes.io/serviceaccount"
            mounts.append(
                {"destination": target, "type": "bind", "source": str(self.service_account), "options": ["rbind", "ro"]}
            )
        for files, path in self.projected_config_maps():
            mounts.append({"destination": path, "type": "bind", "source": str(files), "options": ["rbind", "ro"]})
        config["mounts"] = mounts
        namespaces = [n for n in config["linux"]["namespaces"] if n["type"] != "network"]
        config["linux"]["namespaces"] = [*namespaces, {"type": "network", "path": f"/var/run/netns/{self.netns}"}]
        bundle = self.outside / "bundle"
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(config))
        self.runc_id = f"{self.netns}-{self.name}"[:60]
        self.log = self.outside / "container.log"
        self.process = subprocess.Popen(
            ["runc", "run", "--bundle", str(bundle), self.runc_id],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        return self

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log else ""

    def stop(self, timeout: float = 30) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.terminate()
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def close(self) -> None:
        self.stop()
        if self.runc_id:
            subprocess.run(["runc", "delete", "--force", self.runc_id], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
        shutil.rmtree(self.outside, ignore_errors=True)

    def get(self, port: int, path: str, tls: bool = True, timeout: float = 2.0) -> int:
        """What a kubelet probe sees: HTTPS without verifying the certificate, as the kubelet does."""
        url = f"{'https' if tls else 'http'}://{self.pod_ip}:{port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout, context=PROBE_TLS if tls else None) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except OSError:
            return 0


class Cluster:
    """The test API server with the admission chain, and the pods of the rendered Deployments.

    A Service's endpoints are the pods whose readiness probe (`/readyz`, checked every half second as
    the kubelet's probe would) passes: the chain calls only those.
    """

    def __init__(self, kustomization: str) -> None:
        self.objects = render(kustomization)
        self.server = TestApiServer(host="0.0.0.0")
        self.port = int(self.server.url.rsplit(":", 1)[1])
        self.store = self.server.store
        self.pods: dict[str, list[Sandbox]] = {}
        self.ready: set[str] = set()
        self.chain = AdmissionChain(self.store, self.endpoints).install()
        self._stop = threading.Event()

    def __enter__(self) -> Cluster:
        self.server.__enter__()
        for obj in self.objects:  # what `kubectl apply -k` creates that the API server acts on
            if obj["kind"] in PLURALS:
                group_version, plural = PLURALS[obj["kind"]]
                self.store.create(group_version, plural, obj["metadata"].get("namespace", ""), obj)
        threading.Thread(target=self._probe, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for sandboxes in self.pods.values():
            for sandbox in sandboxes:
                sandbox.close()
        self.server.__exit__()

    def start(self, deployment: str) -> Sandbox:
        replicas = self.pods.setdefault(deployment, [])
        container = container_of(self.objects, deployment)
        config_maps = {
            name: dict(find(self.objects, "ConfigMap", name).get("data") or {})
            for name, _ in container.config_map_mounts()
        }
        sandbox = Sandbox(f"{deployment}-{len(replicas)}", container, self.port, config_maps=config_maps)
        replicas.append(sandbox.start())
        return sandbox

    def stop(self, sandbox: Sandbox) -> int | None:
        self.ready.discard(sandbox.name)
        code = sandbox.stop()
        return code

    def _probe(self) -> None:
        while not self._stop.wait(0.5):
            for sandbox in self.pods.get("gangkeeper-webhook", []):
                alive = sandbox.process is not None and sandbox.process.poll() is None
                if alive and sandbox.get(sandbox.container.port("https"), "/readyz") == 200:
                    self.ready.add(sandbox.name)
                else:
                    self.ready.discard(sandbox.name)

    def endpoints(self, service: str) -> list[tuple[str, int]]:
        """Service `name.namespace:port` -> the ready pods' addresses at the Service's targetPort."""
        name_namespace, _, port = service.rpartition(":")
        name, _, namespace = name_namespace.partition(".")
        found = next(
            (
                o
                for o in self.objects
                if o["kind"] == "Service" and o["metadata"]["name"] == name and o["metadata"]["namespace"] == namespace
            ),
            None,
        )
        if found is None:
            return []
        target = next(p["targetPort"] for p in found["spec"]["ports"] if str(p["port"]) == port)
        addresses = []
        for sandbox in self.pods.get(f"{name}", []):
            if sandbox.name in self.ready:
                addresses.append(
                    (sandbox.pod_ip, sandbox.container.port(target) if isinstance(target, str) else target)
                )
        return addresses

    def wait_ready(self, sandbox: Sandbox, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sandbox.name in self.ready:
                return
            if sandbox.process is not None and sandbox.process.poll() is not None:
                raise AssertionError(f"{sandbox.name} exited {sandbox.process.returncode}: {sandbox.logs()}")
            time.sleep(0.1)
        raise AssertionError(f"{sandbox.name} did not become ready: {sandbox.logs()}")

    def ca_bundle(self, kind: str = "mutatingwebhookconfigurations") -> bytes:
        config = self.store.get("admissionregistration.k8s.io/v1", kind, "", "gangkeeper")
        return base64.b64decode(config["webhooks"][0]["clientConfig"].get("caBundle") or "")


def wait_for(condition: Any, timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
