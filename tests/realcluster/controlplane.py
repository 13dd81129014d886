"""A real Kubernetes control plane run as processes: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK, from the binaries hack/cluster/build.sh puts in the cache.

Every controller of kube-controller-manager runs (the Job, StatefulSet, ReplicaSet, EndpointSlice,
garbage collector, PodGC, node lifecycle, ...). KWOK plays the kubelet of the nodes annotated
`kwok.x-k8s.io/node: fake`; tests/realcluster/kubelet.py plays it for the node that runs gangkeeper.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.realcluster import pki as pki_module
from tests.realcluster.reader import ApiReader, Unresolved
from tests.workers import host_address

ROOT = Path(__file__).resolve().parents[2]
STAGES = Path(__file__).with_name("kwok-stages.yaml")


def versions() -> dict[str, str]:
    """hack/cluster/versions.env as a dict."""
    found: dict[str, str] = {}
    for line in (ROOT / "hack/cluster/versions.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip().strip('"')
    return found


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("GK_CACHE") or Path(base) / "gangkeeper")


def binary(component: str, version: str, name: str) -> Path:
    return cache_dir() / "bin" / f"{component}-{version}" / name


def build_running() -> bool:
    """Whether hack/cluster/build.sh holds this cache's lock now (hack/test.sh runs one beside the tests)."""
    lock = cache_dir() / ".build.lock"
    if not lock.exists():
        return False
    with lock.open("a") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(held, fcntl.LOCK_UN)
    return False


def built(path: Path, timeout: float = 3600.0) -> bool:
    """Whether hack/cluster/build.sh built `path` (its directory marked complete); while a build of this
    cache runs, waits for it rather than skip a test on a fresh machine's first run."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and (path.parent / ".complete").exists()):
        if not build_running() or time.monotonic() > deadline:
            return path.exists()
        time.sleep(5)
    return True


@dataclass(frozen=True)
class NativeGang:
    """How a Kubernetes minor enables the Workload API and the gang plugin, as named in its own source
    (pkg/features/kube_features.go and staging/src/k8s.io/api/scheduling/ of that release)."""

    feature_gates: tuple[str, ...]
    runtime_config: str


NATIVE: dict[str, NativeGang] = {
    # 1.35: both gates alpha, API scheduling.k8s.io/v1alpha1 (Workload, pods' spec.workloadRef)
    "1.35": NativeGang(("GenericWorkload", "GangScheduling"), "scheduling.k8s.io/v1alpha1=true"),
    # 1.36: both gates alpha (GangScheduling depends on GenericWorkload), API v1alpha2 (Workload + PodGroup);
    # WorkloadAwarePreemption (alpha, needs GangScheduling) has kube-scheduler preempt whole PodGroups
    # TopologyAwareWorkloadScheduling (alpha) adds the TopologyPlacement plugins to the default profile
    # (pkg/scheduler/apis/config/v1/default_plugins.go) and lets PodGroups keep schedulingConstraints
    # DRAWorkloadResourceClaims (alpha in 1.36, beta and off in 1.37; needs DynamicResourceAllocation and
    # GenericWorkload) lets a PodGroup hold the claims its pods share (KEP-5729)
    "1.36": NativeGang(
        (
            "GenericWorkload",
            "GangScheduling",
            "WorkloadAwarePreemption",
            "TopologyAwareWorkloadScheduling",
            "DRAWorkloadResourceClaims",
        ),
        "scheduling.k8s.io/v1alpha2=true",
    ),
    # 1.37: GenericWorkload is beta (still off by default) and GangScheduling is gone, merged into it, as
    # is workload-aware preemption (no gate of its own in 1.37.2's kube_features.go); the API is served
    # as v1beta1 (and v1alpha3), a beta API that --runtime-config must turn on; CompositePodGroup (alpha,
    # needs GenericWorkload and TopologyAwareWorkloadScheduling) is served in v1alpha3 only
    "1.37": NativeGang(
        ("GenericWorkload", "TopologyAwareWorkloadScheduling", "CompositePodGroup", "DRAWorkloadResourceClaims"),
        "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true",
    ),
}


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port no socket holds, from below the kernel's range for outgoing connections. A port the
    kernel picked from that range was free at the probe but could go to an outgoing connection before
    the component bound it (CI saw kube-apiserver exit: bind: address already in use)."""
    top = max(_ephemeral_start(), 10001)
    for _ in range(200):
        port = random.randrange(10000, top)
        with socket.socket() as probe:
            try:
                probe.bind(("0.0.0.0", port))  # every address, as the components bind
            except OSError:
                continue
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Process:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        # a session of its own: Ctrl-C or `kill %1` in the terminal of `make cluster` reaches the Python that
        # owns it, which stops the components in order, not the API server under a kubelet still syncing
        self.popen = subprocess.Popen(
            self.argv, stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
        )
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 15) -> None:
        if not self.alive():
            return
        assert self.popen is not None
        self.popen.terminate()
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class ControlPlane:
    """Start with `with ControlPlane(...) as cp:`; `cp.kubectl(...)` runs the matching kubectl."""

    workdir: Path
    kubernetes_version: str = field(default_factory=lambda: versions()["K8S_DEFAULT"])
    # a non-loopback address on the host for the API server to advertise (the `kubernetes` Service's
    # endpoint; EndpointSlices refuse loopback) and for pod sandboxes to reach it by
    advertise_address: str = field(default_factory=lambda: host_address(1))
    native_gang: bool = True
    # the controller manager's and scheduler's client QPS (burst twice it); None: their defaults (20 and
    # 50), which bound how fast a Job's pods are created and bound, not the gang mechanism (bench/cluster.py)
    client_qps: int | None = None
    # kube-apiserver's /debug/pprof (bench/cluster.py --apiserver-profiles); off as a hardened cluster has it
    profiling: bool = False
    processes: list[Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.minor = ".".join(self.kubernetes_version.split(".")[:2])
        self.api_port = free_port()
        self.server = f"https://{self.advertise_address}:{self.api_port}"

    # --- binaries -------------------------------------------------------------------------------
    def k8s_binary(self, name: str) -> Path:
        if name == "kubectl":  # built with the default version only: the skew policy allows a minor either side
            return binary("kubernetes", versions()["K8S_DEFAULT"], name)
        return binary("kubernetes", self.kubernetes_version, name)

    def missing(self) -> str | None:
        """Why this machine cannot start it, or None."""
        if os.geteuid() != 0:
            return "the real cluster tier needs root (an address for the API server, pod sandboxes)"
        v = versions()
        wanted = [
            self.k8s_binary(n) for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        ]
        wanted += [binary("etcd", v["ETCD_VERSION"], "etcd"), binary("kwok", v["KWOK_VERSION"], "kwok")]
        absent = [str(p) for p in wanted if not built(p)]
        if absent:
            build = f"hack/cluster/build.sh {self.kubernetes_version} {versions()['K8S_DEFAULT']} etcd kwok"
            return f"not built: {', '.join(absent)} (run {build})"
        return None

    # --- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        reason = self.missing()
        if reason:
            raise RuntimeError(reason)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs = self.workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        subprocess.run(["ip", "addr", "replace", f"{self.advertise_address}/32", "dev", "lo"], check=True)
        self.pki = pki_module.create(self.workdir / "pki", [self.advertise_address, "127.0.0.1", "10.96.0.1"])
        self.kubeconfig = self.write_kubeconfig(self.workdir / "admin.kubeconfig")
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def spawn(self, name: str, argv: list[str]) -> Process:
        process = Process(name, argv, self.logs / f"{name}.log").start()
        self.processes.append(process)
        return process

    def _start_etcd(self) -> None:
        v = versions()
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        data = self.workdir / "etcd"
        shutil.rmtree(data, ignore_errors=True)
        self.spawn(
            "etcd",
            [
                str(binary("etcd", v["ETCD_VERSION"], "etcd")),
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",  # a throwaway cluster: durability buys nothing here
                "--log-level=warn",
            ],
        )
        self._wait(lambda: _http_ok(f"{self.etcd_url}/health"), "etcd", 60)

    def feature_flags(self) -> list[str]:
        if not self.native_gang:
            return []
        native = NATIVE[self.minor]
        return ["--feature-gates=" + ",".join(f"{g}=true" for g in native.feature_gates)]

    def client_flags(self) -> list[str]:
        if self.client_qps is None:
            return []
        return [f"--kube-api-qps={self.client_qps}", f"--kube-api-burst={2 * self.client_qps}"]

    def _start_apiserver(self) -> None:
        p = self.pki
        runtime = [f"--runtime-config={NATIVE[self.minor].runtime_config}"] if self.native_gang else []
        self.spawn(
            "kube-apiserver",
            [
                str(self.k8s_binary("kube-apiserver")),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=0.0.0.0",
                f"--secure-port={self.api_port}",
                f"--advertise-address={self.advertise_address}",
                f"--tls-cert-file={p.cert('apiserver')}",
                f"--tls-private-key-file={p.key('apiserver')}",
                f"--client-ca-file={p.ca}",
                f"--service-account-key-file={p.directory / 'sa.pub'}",
                f"--service-account-signing-key-file={p.key('sa')}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=Node,RBAC",
                # webhooks and aggregated APIs are called at their Service's endpoints (no kube-proxy here)
                "--enable-aggregator-routing=true",
                "--allow-privileged=true",
                f"--profiling={str(self.profiling).lower()}",
                "--v=1",
                *self.feature_flags(),
                *runtime,
            ],
        )
        self._wait(self._api_ready, "kube-apiserver", 120)

    def _start_controllers(self) -> None:
        kubeconfig = str(self.kubeconfig)
        self._start_kube_controller_manager()
        self.start_scheduler()
        v = versions()
        self.spawn(
            "kwok",
            [
                str(binary("kwok", v["KWOK_VERSION"], "kwok")),
                f"--kubeconfig={kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--config={STAGES}",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.252.0.1",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
        )
        # the API server's own objects the controllers start from
        self._wait(
            lambda: self.get("serviceaccount", "default", namespace="default") is not None,
            "the default service account (kube-controller-manager's token controllers)",
            120,
        )

    def _start_kube_controller_manager(self) -> None:
        p, kubeconfig = self.pki, str(self.kubeconfig)
        self.spawn(
            "kube-controller-manager",
            [
                str(self.k8s_binary("kube-controller-manager")),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--controllers=*",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                f"--service-account-private-key-file={p.key('sa')}",
                f"--root-ca-file={p.ca}",
                f"--secure-port={free_port()}",
                "--bind-address=127.0.0.1",
                "--profiling=false",
                # KWOK renews the fake nodes' Leases every hour (kwok-stages.yaml): a node is lost only
                # when it is deleted, never because a busy machine delayed a heartbeat
                "--node-monitor-grace-period=7200s",
                "--node-startup-grace-period=7200s",
                "--v=1",
                *self.feature_flags(),
                *self.client_flags(),
            ],
        )

    def upgrade(self, version: str) -> None:
        """The control plane moved to another Kubernetes release over the same etcd, as an upgrade does:
        the API server, controller manager and scheduler stopped and started again from `version`'s
        binaries with that minor's gates and APIs; etcd, KWOK and every node keep running."""
        restarted = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        for process in [p for p in self.processes if p.name in restarted]:
            process.stop()
            self.processes.remove(process)
        self.kubernetes_version = version
        self.minor = ".".join(version.split(".")[:2])
        self.__dict__.pop("reader", None)  # what the new release serves is discovered again
        self._start_apiserver()
        self._start_kube_controller_manager()
        self.start_scheduler()

    @contextlib.contextmanager
    def api_server_stopped(self) -> Iterator[None]:
        """kube-apiserver stopped for the block (the cluster lost to every client), then started again over
        the same etcd, so what runs beside it stops cleanly after."""
        place = next(i for i, p in enumerate(self.processes) if p.name == "kube-apiserver")
        self.processes.pop(place).stop()
        try:
            yield
        finally:
            self._start_apiserver()
            # back in its place: stopped last but etcd, after its clients (stopped before them, it waited
            # for their connections until the 15 s kill)
            self.processes.insert(place, self.processes.pop())

    def start_scheduler(self, extra: list[str] | None = None, name: str = "kube-scheduler") -> Process:
        kubeconfig = str(self.kubeconfig)
        return self.spawn(
            name,
            [
                str(self.k8s_binary("kube-scheduler")),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                f"--secure-port={free_port()}",
                "--bind-address=127.0.0.1",
                "--v=1",
                *self.feature_flags(),
                *self.client_flags(),
                *(extra or []),
            ],
        )

    def _wait(self, check: Any, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p for p in self.processes if not p.alive()]
            if dead:
                raise RuntimeError(f"{dead[0].name} exited while waiting for {what}:\n{dead[0].tail()}")
            with contextlib.suppress(Exception):
                if check():
                    return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}")

    def _api_ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.cert("admin")), str(self.pki.key("admin")))
        with urllib.request.urlopen(f"{self.server}/readyz", context=context, timeout=2) as answer:
            return int(answer.status) == 200

    # --- access ---------------------------------------------------------------------------------
    def write_kubeconfig(self, path: Path) -> Path:
        p = self.pki
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "gangkeeper",
                    "clusters": [
                        {"name": "gangkeeper", "cluster": {"server": self.server, "certificate-authority": str(p.ca)}}
                    ],
                    "users": [
                        {
                            "name": "admin",
                            "user": {"client-certificate": str(p.cert("admin")), "client-key": str(p.key("admin"))},
                        }
                    ],
                    "contexts": [{"name": "gangkeeper", "context": {"cluster": "gangkeeper", "user": "admin"}}],
                }
            )
        )
        path.chmod(0o600)
        return path

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.k8s_binary("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def apply(self, manifest: str | dict[str, Any] | list[dict[str, Any]], *extra: str) -> str:
        text = (
            manifest
            if isinstance(manifest, str)
            else yaml.safe_dump_all(manifest if isinstance(manifest, list) else [manifest])
        )
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", *extra, stdin=text).stdout

    @functools.cached_property
    def reader(self) -> ApiReader:
        return ApiReader(self.server, self.pki.ca, self.pki.cert("admin"), self.pki.key("admin"))

    def get(
        self,
        kind: str,
        name: str | None = None,
        namespace: str | None = None,
        selector: str | None = None,
        all_namespaces: bool = False,
    ) -> Any:
        """The object as JSON, None when it does not exist; a list's items when no name is given. Read in
        this process (tests/realcluster/reader.py); what it cannot resolve, by kubectl."""
        with contextlib.suppress(Unresolved):
            return self.reader.get(kind, name, namespace, selector, all_namespaces)
        args = ["get", kind, "-o", "json"]
        args += ["-A"] if all_namespaces else []
        args += [name] if name else []
        args += ["-n", namespace] if namespace else []
        args += ["-l", selector] if selector else []
        result = self.kubectl(*args, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            raise RuntimeError(result.stderr)
        data = json.loads(result.stdout)
        return data if name else data["items"]


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return int(answer.status) == 200
