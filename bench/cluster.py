"""Gangs on the real control plane, side by side with the floor and the other mechanisms.

Starts what the real tier runs (tests/realcluster/: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK, gangkeeper deployed from manifests/overlays/gate on its system nodes), with
--nodes KWOK nodes of --node-cpu CPUs, and runs each scenario once per backend, each in a fresh
namespace of one cluster:

- floor: a namespace not opted in (the default scheduler, no gang);
- gate: gangkeeper's controller holds and releases the gang;
- native: the API server's Workload/PodGroup and kube-scheduler's gang plugin (this version's);
- volcano: Volcano's scheduler, controller manager and admission (when built);
- coscheduling: scheduler-plugins' Coscheduling as a second scheduler, its PodGroups (when built).

Scenarios: `one`, a Job of --pods one-CPU pods as one gang; `step`, a Parallel StatefulSet of --pods
one-CPU pods, scaled by 64 once it runs (the step's time from the scale to its last pod Running);
`many`, 50 Jobs of 20 pods at once; `pinch`,
the --pods gang into a pool of unused nodes that holds 90% of it, the rest of the pool added once every
pod exists (bound before the capacity came: a partial start; then capacity -> all bound); `autoscale`, the
--pods gang into a pool of unused nodes holding a quarter of it, the rest brought by Karpenter (its KWOK
provider, a NodePool of 32-CPU nodes: pods bound before the room for the whole gang was there, nodes
made against nodes needed; the pool is deleted after each run so the next starts small); `crowded`, a
64-pod gang into a cluster already running --crowd pods (default 100,000; made once, before the first
`crowded` run, in a namespace not opted in, bound by name round the nodes and requesting nothing, so
they weigh on every watch, cache and informer but take no room the other scenarios count on); `dra`, the
--pods gang with one DRA device per pod from a ResourceClaimTemplate, every node publishing a ResourceSlice
of 8 devices (5,000 nodes: 40,000 devices; kube-scheduler's DynamicResources allocates them). Per
backend it prints, from the moment the Jobs are applied: all pods created, created -> all bound (last
creation to last binding), all Running, the ratio of that to the floor's; kube-apiserver's webhook
admission latency from its own histogram (p50/p99 per webhook), its requests by verb, each component's
CPU seconds and gangkeeper's peak RSS. The controller manager's and scheduler's client QPS are set as a
production cluster sets them (--client-qps, printed), so the floor is not the Job controller's 20 QPS.

Times come from one watch of the namespace's pods (local receive time of each pod's first event, of the
first event with a node, of the first Running), not from the API's one-second timestamps.

    python bench/cluster.py [--nodes 1000] [--pods 1000] [--backends floor,gate,native,volcano,coscheduling]
                            [--scenarios one,many,pinch,autoscale,crowded,dra,step] [--crowd 100000] [--json out.json]
                            [--repeat N] [--apiserver-profiles DIR] [--gangkeeper-profiles DIR] [--gangkeeper-logs DIR]

--repeat runs every backend N times per scenario, interleaved (floor, gate, native, floor, ...), and
prints each one's median and range, its ratio taken to the floor of the same round: single runs on
this machine vary by 20-40%. --apiserver-profiles keeps kube-apiserver's CPU profile of each run;
--gangkeeper-profiles py-spy's samples of each gangkeeper controller (collapsed stacks), --gangkeeper-logs
its log after each run.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from tests.realcluster import coscheduling, dra, karpenter, volcano, workloads
from tests.realcluster.controlplane import ControlPlane, versions
from tests.realcluster.stack import FAKE, Stack, wait_until
from webhook import resources
from webhook.contract import PLACEHOLDER_LABEL
from webhook.controller.observe.autoscaler import CHECK_SECONDS

GANGKEEPER = ("gangkeeper-webhook", "gangkeeper-controller")


@dataclass
class Timeline:
    """What one watch of a namespace saw, in local monotonic seconds."""

    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    # pods first seen behind a scheduling gate, and when each was first seen without one (the release)
    gated: set[str] = field(default_factory=set)
    ungated: dict[str, float] = field(default_factory=dict)

    def see(self, pod: Any, now: float) -> None:
        if PLACEHOLDER_LABEL in (pod.metadata.labels or {}):
            return  # an autoscaler's placeholder stands in for a member: never one itself
        name = pod.metadata.name
        self.created.setdefault(name, now)
        if pod.spec.scheduling_gates:
            self.gated.add(name)
        elif name in self.gated:
            self.ungated.setdefault(name, now)
        if pod.spec.node_name:
            self.bound.setdefault(name, now)
        if pod.status and pod.status.phase == "Running":
            self.running.setdefault(name, now)


def watch_pods(core: client.CoreV1Api, namespace: str, timeline: Timeline, stop: threading.Event) -> None:
    while not stop.is_set():
        stream = watch.Watch()
        try:
            for event in stream.stream(core.list_namespaced_pod, namespace, timeout_seconds=5):
                timeline.see(event["object"], time.monotonic())
                if stop.is_set():
                    break
        except Exception:  # a watch the API server ended or refused: start another
            time.sleep(0.1)
        finally:
            stream.stop()


def profile_apiserver(api: client.ApiClient, prefix: Path, stop: threading.Event, seconds: int = 5) -> None:
    """kube-apiserver's own CPU profile (its /debug/pprof, on by default), taken in back-to-back windows
    until told to stop: prefix-0.pb.gz, prefix-1.pb.gz, ... (`go tool pprof -top` reads them together)."""
    for window in itertools.count():
        if stop.is_set():
            return
        try:
            answer = api.call_api(
                "GET",
                f"{api.configuration.host}/debug/pprof/profile?seconds={seconds}",
                header_params={},
                _request_timeout=seconds + 30,
            )
            answer.read()
            prefix.with_name(f"{prefix.name}-{window}.pb.gz").write_bytes(answer.data)
        except Exception as error:  # a profile lost is a gap in the figures, not a failed run
            print(f"apiserver profile window {window} lost: {error}", file=sys.stderr)
            stop.wait(seconds)


def profile_controllers(
    stack: Stack,
    prefix: Path,
    idle: bool = False,
    kinds: tuple[str, ...] = ("gangkeeper-controller",),
    gil: bool = False,
) -> list[subprocess.Popen[bytes]]:
    """py-spy recording each gangkeeper process of `kinds` (every replica: which one leads is the lease's
    business) until sent SIGINT: PREFIX-gangkeeper-controller@NODE.txt, collapsed stacks (flamegraph.pl).
    `idle`: threads blocked (on an API call, a lock) are sampled too, so the stacks are wall-clock time.
    `gil`: only the thread holding the GIL, so the samples are the Python code's CPU time (a thread in a
    socket read or TLS without the GIL is left out, where a plain sample may still count it)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return [
        subprocess.Popen(
            [
                spy,
                "record",
                "--pid",
                str(pid),
                "--rate",
                "250",
                "--format",
                "raw",
                "--nonblocking",
                "--subprocesses",  # the webhook serves from worker processes
                *(["--idle"] if idle else []),
                *(["--gil"] if gil else []),
                "--output",
                str(prefix.with_name(f"{prefix.name}-{name}.txt")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in components(stack).items()
        if name.startswith(kinds)
    ]


def process_tree(pid: int) -> list[int]:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [pid, *(p for c in children for p in process_tree(int(c)))]


def cpu_seconds(pid: int) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for process in process_tree(pid):
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def rss_mib(pid: int) -> float:
    total = 0
    for process in process_tree(pid):
        try:
            total += int(Path(f"/proc/{process}/statm").read_text().split()[1])
        except OSError:
            continue
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def components(stack: Stack) -> dict[str, int]:
    """Process ids by component: the control plane's processes and gangkeeper's pod sandboxes."""
    found = {p.name: p.popen.pid for p in stack.plane.processes if p.popen is not None and p.alive()}
    for node in stack.system:
        for sandbox in node.sandboxes.values():
            if sandbox.process is not None and sandbox.process.poll() is None:
                kind = next((k for k in GANGKEEPER if sandbox.name.startswith(k)), sandbox.name)
                found[f"{kind}@{node.name}"] = sandbox.process.pid
    return found


def apiserver_metrics(plane: ControlPlane) -> list[Any]:
    context = ssl.create_default_context(cafile=str(plane.pki.ca))
    context.load_cert_chain(str(plane.pki.cert("admin")), str(plane.pki.key("admin")))
    with urllib.request.urlopen(f"{plane.server}/metrics", context=context, timeout=30) as answer:
        return list(text_string_to_metric_families(answer.read().decode()))


def requests_by_verb(families: list[Any]) -> dict[str, float]:
    return requests_by(families, lambda labels: labels["verb"])


def writes_by_resource(families: list[Any]) -> dict[str, float]:
    """The API server's writes per verb and resource ("PATCH pods", "POST events", "PUT gangs/status"):
    which object the cluster spends its writes on."""

    def key(labels: dict[str, str]) -> str | None:
        if labels["verb"] not in ("POST", "PUT", "PATCH", "DELETE", "APPLY"):
            return None
        subresource = f"/{labels['subresource']}" if labels.get("subresource") else ""
        return f"{labels['verb']} {labels['resource']}{subresource}"

    return requests_by(families, key)


def reads_by_resource(families: list[Any]) -> dict[str, float]:
    """The API server's LISTs and GETs per resource ("LIST pods"): who keeps asking instead of watching."""

    def key(labels: dict[str, str]) -> str | None:
        if labels["verb"] not in ("LIST", "GET"):
            return None
        subresource = f"/{labels['subresource']}" if labels.get("subresource") else ""
        return f"{labels['verb']} {labels['resource']}{subresource}"

    return requests_by(families, key)


def requests_by(families: list[Any], key: Any) -> dict[str, float]:
    counts: dict[str, float] = defaultdict(float)
    for family in families:
        if family.name == "apiserver_request":
            for sample in family.samples:
                if sample.name == "apiserver_request_total" and (name := key(sample.labels)) is not None:
                    counts[name] += sample.value
    return dict(counts)


def delta(before: dict[str, float], after: dict[str, float], least: float = 1) -> dict[str, int]:
    changes = {name: int(count - before.get(name, 0.0)) for name, count in after.items()}
    return dict(sorted(((n, c) for n, c in changes.items() if c >= least), key=lambda item: -item[1]))


def webhook_buckets(families: list[Any]) -> dict[str, dict[float, float]]:
    """Cumulative bucket counts of kube-apiserver's webhook admission latency, per webhook name."""
    buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for family in families:
        if family.name == "apiserver_admission_webhook_admission_duration_seconds":
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    buckets[sample.labels["name"]][float(sample.labels["le"])] += sample.value
    return {name: dict(b) for name, b in buckets.items()}


def request_buckets(families: list[Any], verb: str, resource: str) -> dict[float, float]:
    """Cumulative bucket counts of kube-apiserver's own latency for one verb on one resource (verbs
    joined by `|`: "POST|APPLY", a create by `kubectl apply --server-side` counted as APPLY)."""
    buckets: dict[float, float] = defaultdict(float)
    for family in families:
        if family.name == "apiserver_request_duration_seconds":
            for sample in family.samples:
                labels = sample.labels
                if (
                    sample.name.endswith("_bucket")
                    and labels.get("verb") in verb.split("|")
                    and labels.get("resource") == resource
                    and not labels.get("subresource")
                ):
                    buckets[float(labels["le"])] += sample.value
    return dict(buckets)


def quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The bucket bound under which a fraction q of the calls made between two scrapes fell."""
    deltas = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = deltas[-1][1] if deltas else 0.0
    if total <= 0:
        return None
    return next(le for le, count in deltas if count >= q * total)


def quantiles_ms(before: dict[float, float], after: dict[float, float]) -> dict[str, float | None]:
    """p50 and p99 in ms (bucket bounds) of the calls made between two scrapes."""
    found = {q: quantile(before, after, level) for q, level in (("p50", 0.5), ("p99", 0.99))}
    return {q: None if v is None else round(v * 1000, 1) for q, v in found.items()}


@dataclass
class Snapshot:
    at: float
    cpu: dict[str, float]
    families: list[Any]
    passes: dict[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def take(cls, stack: Stack) -> Snapshot:
        return cls(
            time.monotonic(),
            {name: cpu_seconds(pid) for name, pid in components(stack).items()},
            apiserver_metrics(stack.plane),
            controller_passes(stack),
        )


def controller_passes(stack: Stack) -> dict[str, tuple[float, float]]:
    """Each controller replica's passes so far and the seconds they took (its own metrics,
    gangkeeper_controller_pass_seconds): how often the leader looked, and how long each look took."""
    found: dict[str, tuple[float, float]] = {}
    for node in stack.system:
        for sandbox in node.sandboxes.values():
            if not sandbox.name.startswith("gangkeeper-controller"):
                continue
            try:
                with urllib.request.urlopen(f"http://{sandbox.pod_ip}:8080/metrics", timeout=5) as answer:
                    families = list(text_string_to_metric_families(answer.read().decode()))
            except OSError:
                continue
            samples = {
                sample.name: sample.value
                for family in families
                if family.name == "gangkeeper_controller_pass_seconds"
                for sample in family.samples
            }
            found[f"gangkeeper-controller@{node.name}"] = (
                samples.get("gangkeeper_controller_pass_seconds_count", 0.0),
                samples.get("gangkeeper_controller_pass_seconds_sum", 0.0),
            )
    return found


def with_controller_fields(text: str, controller_fields: str) -> str:
    """The Configuration's text with each `  key: value` line set under `controller:`, in place of the
    chart's line for that key: YAML keeps the last of a key given twice, so a line added beside the
    chart's was silently overridden (the replay's compressed headOfLineSeconds, before this)."""
    head, marker, block = text.partition("controller:\n")
    if not marker:
        raise ValueError("the Configuration has no controller: block")
    lines = block.splitlines(keepends=True)
    end = next((i for i, line in enumerate(lines) if not line.startswith("  ")), len(lines))
    given = controller_fields.splitlines(keepends=True)
    keys = {line.split(":", 1)[0].strip() for line in given}
    kept = [line for line in lines[:end] if line.split(":", 1)[0].strip() not in keys]
    return head + marker + "".join(given) + "".join(kept) + "".join(lines[end:])


def configure(stack: Stack, controller_fields: str) -> None:
    """Fields set under `controller:` in the deployed Configuration, the controller restarted."""
    saved = stack.plane.get("configmap", "gangkeeper-config", namespace="gangkeeper-system")
    text = with_controller_fields(saved["data"]["config.yaml"], controller_fields)
    patch = json.dumps({"data": {"config.yaml": text}})
    stack.plane.kubectl("-n", "gangkeeper-system", "patch", "configmap", "gangkeeper-config", "-p", patch)
    stack.restart("controller")


def make_nodes(stack: Stack, count: int, cpu: int) -> None:
    """`count` KWOK nodes created side by side (kubectl apply of thousands takes minutes), then Ready."""
    core = client.CoreV1Api(config.new_client_from_config(str(stack.plane.kubeconfig)))
    capacity = {"cpu": str(cpu), "memory": f"{4 * cpu}Gi", "pods": "110"}
    names = [f"bench-{i}" for i in range(count)]

    def create(name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": dict(FAKE),
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
            },
            "status": {"capacity": capacity, "allocatable": capacity},
        }
        core.create_node(body)

    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, names))
    created = time.monotonic() - started

    def ready() -> bool:
        nodes = core.list_node(label_selector="type=kwok").items
        return (
            sum(1 for n in nodes if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []))
            >= count
        )

    wait_until(ready, f"{count} KWOK nodes Ready", 1800, every=2)
    print(f"{count} nodes: created in {created:.1f} s, all Ready after {time.monotonic() - started:.1f} s", flush=True)
    stack.workers = names
    settle_nodes(stack.plane)


def settle_nodes(plane: ControlPlane, quiet: float = 1.0, limit: float = 600.0, resource: str = "nodes") -> None:
    """Wait until the new nodes stop being written: after Ready, the controller manager takes each node's
    not-ready taint off and KWOK patches its status again (2,000-4,000 node writes at 1,000 nodes, seen
    in this benchmark's write counts), which would be billed to whichever scenario runs first."""
    started = time.monotonic()

    def writes() -> float:
        counted = writes_by_resource(apiserver_metrics(plane))
        return sum(n for key, n in counted.items() if key.split()[1].startswith(resource))

    last, told = writes(), started
    while time.monotonic() - started < limit:
        time.sleep(5)
        now = writes()
        if (now - last) / 5 <= quiet:
            break
        if time.monotonic() - told >= 60:  # a long wait (KWOK running a 100,000-pod crowd) says how it goes
            told = time.monotonic()
            print(f"  {resource}: {(now - last) / 5:.0f} writes/s after {told - started:.0f} s", flush=True)
        last = now
    else:
        print(f"{resource} still written to after {limit:.0f} s: going on", flush=True)
        return
    print(f"{resource} settled after {time.monotonic() - started:.1f} s more", flush=True)


CROWD_NAMESPACE = "bench-crowd"


def make_crowd(stack: Stack, count: int, threads: int = 16) -> None:
    """`count` running pods for the `crowded` scenario: bare pods bound by name round the benchmark's
    nodes (no scheduling: what is measured is the gang's start among them, not their own), requesting
    nothing. Sent over kept-alive connections of their own, a few hundred microseconds of this process's
    CPU each (the kubernetes client's create costs ten times that), then KWOK runs them."""
    namespace = stack.namespace(CROWD_NAMESPACE, None, opted_in=False)
    plane, nodes = stack.plane, stack.workers
    context = ssl.create_default_context(cafile=str(plane.pki.ca))
    context.load_cert_chain(str(plane.pki.cert("admin")), str(plane.pki.key("admin")))
    host, port = plane.server.removeprefix("https://").rsplit(":", 1)
    path = f"/api/v1/namespaces/{namespace}/pods"
    failed: list[str] = []

    def create(first: int) -> None:
        connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=60)
        for i in range(first, count, threads):
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"crowd-{i}", "labels": {"app": "crowd"}},
                "spec": {
                    "nodeName": nodes[i % len(nodes)],
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    "terminationGracePeriodSeconds": 0,
                },
            }
            for attempt in range(5):  # a 429 or a dropped connection under the burst: again, a moment later
                try:
                    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
                    answer = connection.getresponse()
                    answer.read()
                    if answer.status in (201, 409):
                        break
                except (OSError, http.client.HTTPException):
                    connection.close()
                    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=60)
                time.sleep(0.5 * (attempt + 1))
            else:
                failed.append(f"crowd-{i}")
        connection.close()

    started = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, range(threads)))
    if failed:
        raise SystemExit(f"{len(failed)} crowd pods not created, e.g. {failed[:3]}")
    created = time.monotonic() - started
    print(f"{count} crowd pods created in {created:.1f} s", flush=True)
    settle_nodes(plane, quiet=5.0, limit=1800.0, resource="pods")
    settle_cpu(stack, "kwok", cores=0.1, limit=1800.0)


def settle_cpu(stack: Stack, component: str, cores: float, limit: float) -> None:
    """Wait until `component` uses under `cores` over 10 s: after a 30,000-pod crowd the pods' writes had
    gone quiet while KWOK still worked through them, and the first run paid for it (18 CPU-s of KWOK in
    the floor's window against half a second in the others)."""
    pid = components(stack).get(component)
    if pid is None:
        return
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = cpu_seconds(pid)
        time.sleep(10)
        used = (cpu_seconds(pid) - before) / 10
        if used < cores:
            print(f"{component} quiet ({used:.2f} cores) after {time.monotonic() - started:.0f} s more", flush=True)
            return
    print(f"{component} still busy after {limit:.0f} s: going on", flush=True)


POOL_LABEL = "bench.gangkeeper.io/pool"
CROWDED_GANG = 64  # the issue's: a 64-pod gang into a cluster already running 100,000 pods
STEP_PODS = 64  # issue 99: the step a scale-up adds to a running 1,000-pod gang
# the pinch: the pool first holds this share of the gang, then the rest of what it needs is added
PINCH_SHARE = 0.9
AUTOSCALE_SHARE = 0.25  # the autoscale scenario's pool starts with a quarter of the gang's need
AUTOSCALE_NODE_CPU = 32  # Karpenter's nodes (one KWOK instance type of this many CPUs)


DEVICES_PER_NODE = 8  # the dra scenario: each node's ResourceSlice, one device per CPU of its 8
_published: set[str] = set()


def publish_devices(stack: Stack) -> None:
    """A DeviceClass and every worker's ResourceSlice of DEVICES_PER_NODE devices, once per cluster, in
    chunks (5,000 nodes: 40,000 devices)."""
    todo = [n for n in stack.workers if n not in _published]
    if not todo:
        return
    stack.plane.apply(dra.device_class())
    for start in range(0, len(todo), 250):
        chunk = todo[start : start + 250]
        stack.plane.apply([dra.node_slice(None, n, DEVICES_PER_NODE) for n in chunk])
        _published.update(chunk)


def scenario_jobs(scenario: str, namespace: str, pods: int) -> list[dict[str, Any]]:
    if scenario == "one":
        return [workloads.job("gang", namespace, pods, "1")]
    if scenario == "crowded":
        return [workloads.job("gang", namespace, CROWDED_GANG, "1")]
    if scenario == "dra":  # each pod claims one device from the namespace's template (publish_devices)
        return [dra.claiming(workloads.job("gang", namespace, pods, "1"))]
    if scenario == "step":  # a Parallel StatefulSet of --pods, then STEP_PODS more (run_one scales it)
        return [workloads.statefulset("gang", namespace, pods, "1")]
    if scenario in ("pinch", "autoscale"):
        job = workloads.job("gang", namespace, pods, "1")
        job["spec"]["template"]["spec"]["nodeSelector"] = {POOL_LABEL: namespace}
        return [job]
    return [workloads.job(f"gang-{i}", namespace, 20, "1") for i in range(50)]


@dataclass
class Pinch:
    """The pinch scenario's pool: nodes never used by an earlier run, labelled for this namespace, a
    share of the gang's need at first and the rest when `widen` is called."""

    stack: Stack
    namespace: str
    first: list[str]
    rest: list[str]

    @classmethod
    def take(
        cls, stack: Stack, namespace: str, pods: int, node_cpu: int, used: list[int], share_of_need: float = PINCH_SHARE
    ) -> Pinch:
        need = -(-pods // node_cpu)
        start = used[0]
        names = stack.workers[start : start + need]
        if len(names) < need:
            raise SystemExit(f"the pinch needs {need} unused nodes; add --nodes")
        used[0] = start + need
        share = int(need * share_of_need)
        pinch = cls(stack, namespace, names[:share], names[share:])
        pinch.label(pinch.first)
        return pinch

    def label(self, nodes: list[str]) -> None:
        for chunk in range(0, len(nodes), 100):
            self.stack.plane.kubectl("label", "nodes", *nodes[chunk : chunk + 100], f"{POOL_LABEL}={self.namespace}")

    def widen(self) -> float:
        """The rest of the pool labelled; returns when (monotonic) the capacity arrived."""
        self.label(self.rest)
        return time.monotonic()


@dataclass
class Autoscaled:
    """The autoscale scenario's pool: a quarter of the gang's need in unused nodes labelled for this
    namespace, and a Karpenter NodePool whose nodes carry the same label, so Karpenter brings the rest
    (through gangkeeper's placeholders on the gate, the Unschedulable pods elsewhere). Each new node's
    Ready is seen by polling (1 s), so the pods bound before the room for the whole gang was there count."""

    stack: Stack
    namespace: str
    pool: dict[str, Any]
    ready: dict[str, float] = field(default_factory=dict)
    last_poll: float = 0.0

    @classmethod
    def start(cls, stack: Stack, namespace: str, pods: int, node_cpu: int, used: list[int]) -> Autoscaled:
        Pinch.take(stack, namespace, pods, node_cpu, used, AUTOSCALE_SHARE)
        pool = karpenter.node_pool(
            namespace[-63:], cpu_per_node=AUTOSCALE_NODE_CPU, limit_cpu=pods * 2, consolidate_after="30s"
        )
        pool["spec"]["template"]["metadata"]["labels"][POOL_LABEL] = namespace
        stack.plane.apply(pool)
        time.sleep(CHECK_SECONDS + 1)  # gangkeeper's controller looks for NodePools this often
        return cls(stack, namespace, pool)

    def nodes(self) -> list[dict[str, Any]]:
        name = self.pool["metadata"]["name"]
        return list(self.stack.plane.get("nodes", selector=f"karpenter.sh/nodepool={name}"))

    def poll(self) -> None:
        now = time.monotonic()
        if now - self.last_poll < 1.0:
            return
        self.last_poll = now
        for node in self.nodes():
            conditions = node.get("status", {}).get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                self.ready.setdefault(node["metadata"]["name"], now)

    def figures(self, pods: int, node_cpu: int, bound: list[float]) -> dict[str, Any]:
        made = self.nodes()
        # one-CPU pods per node: its allocatable CPUs, whole (KWOK's instance types keep some for the kubelet)
        per_node = min((int(resources.parse(n["status"]["allocatable"]["cpu"])) for n in made), default=0)
        had = int(-(-pods // node_cpu) * AUTOSCALE_SHARE) * node_cpu
        room = max(self.ready.values(), default=None)
        return {
            "nodes_made": len(made),
            "nodes_needed": -(-(pods - had) // per_node) if per_node else None,
            "bound_before_room": sum(1 for t in bound if room is not None and t < room),
        }

    def remove(self) -> None:
        """The NodePool deleted: Karpenter drains and removes its nodes before the next run starts small."""
        self.stack.plane.kubectl("delete", "nodepools.karpenter.sh", self.pool["metadata"]["name"], "--wait=false")
        wait_until(lambda: not self.nodes(), "Karpenter's nodes of the run removed", 600, every=3)


def take_step(stack: Stack, namespace: str, timeline: Timeline, running: int) -> float | None:
    """The step scenario, once its gang runs: the StatefulSet scaled by STEP_PODS; when (monotonic) it was
    scaled, returning once the step runs (or 600 s passed); None when the gang never ran."""
    if len(timeline.running) < running:
        return None
    time.sleep(5.0)  # the controller's books settled on the running gang
    stepped = time.monotonic()
    stack.plane.kubectl("-n", namespace, "scale", "statefulset/gang", f"--replicas={running + STEP_PODS}")
    while len(timeline.running) < running + STEP_PODS and time.monotonic() < stepped + 600:
        time.sleep(0.25)
    return stepped


def run_one(
    stack: Stack,
    backend: str,
    scenario: str,
    pods: int,
    node_cpu: int = 8,
    used: list[int] | None = None,
    profiles: Path | None = None,
    controller_profiles: Path | None = None,
    round_: int = 0,
    controller_logs: Path | None = None,
) -> dict[str, Any]:
    namespace = stack.namespace(
        f"bench-{scenario}-{backend}-{round_}", None if backend == "floor" else backend, backend != "floor"
    )
    jobs = scenario_jobs(scenario, namespace, pods)
    if scenario == "dra":
        publish_devices(stack)
        stack.plane.apply(dra.claim_template(namespace))
    pinch = Pinch.take(stack, namespace, pods, node_cpu, used or [0]) if scenario == "pinch" else None
    autoscaled = Autoscaled.start(stack, namespace, pods, node_cpu, used or [0]) if scenario == "autoscale" else None
    expected = sum(j["spec"].get("parallelism", j["spec"].get("replicas", 0)) for j in jobs)
    core = client.CoreV1Api(config.new_client_from_config(str(stack.plane.kubeconfig)))
    timeline, stop = Timeline(), threading.Event()
    watcher = threading.Thread(target=watch_pods, args=(core, namespace, timeline, stop), daemon=True)
    watcher.start()
    if profiles is not None:
        profiles.mkdir(parents=True, exist_ok=True)
        profiler = threading.Thread(
            target=profile_apiserver, args=(core.api_client, profiles / f"{scenario}-{backend}", stop), daemon=True
        )
        profiler.start()
    spies: list[subprocess.Popen[bytes]] = []
    if controller_profiles is not None:
        controller_profiles.mkdir(parents=True, exist_ok=True)
        spies = profile_controllers(stack, controller_profiles / f"{scenario}-{backend}-{round_}", gil=True)
    time.sleep(1.0)
    before = Snapshot.take(stack)
    peak_rss: dict[str, float] = defaultdict(float)  # per gangkeeper pod (all its processes)
    applied = time.monotonic()
    # the webhook's API discovery refreshes each minute: a mechanism installed a moment ago (Volcano) is
    # refused, naming what is missing, until it sees its API
    wait_until(lambda: stack.plane.apply(jobs) or True, f"the {backend} Jobs admitted", 120, every=5)
    deadline = applied + 600
    widened: float | None = None
    bound_before_capacity = 0
    while len(timeline.running) < expected and time.monotonic() < deadline:
        time.sleep(0.25)
        for name, pid in components(stack).items():
            if name.startswith(GANGKEEPER):
                peak_rss[name] = max(peak_rss[name], rss_mib(pid))
        if autoscaled is not None:
            autoscaled.poll()
        # the pinch: once every pod exists and the cluster had 10 s to place what fits, the rest arrives
        settled = len(timeline.created) >= expected and time.monotonic() - max(timeline.created.values()) >= 10
        if pinch is not None and widened is None and settled:
            bound_before_capacity = len(timeline.bound)
            widened = pinch.widen()
    stepped = take_step(stack, namespace, timeline, expected) if scenario == "step" else None
    expected += STEP_PODS if stepped is not None else 0
    after = Snapshot.take(stack)
    stop.set()
    for spy in spies:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    if controller_logs is not None:  # each controller's log so far (its pauses, its releases)
        controller_logs.mkdir(parents=True, exist_ok=True)
        for node in stack.system:
            for sandbox in node.sandboxes.values():
                if sandbox.name.startswith("gangkeeper-controller") and sandbox.log is not None:
                    target = controller_logs / f"{scenario}-{backend}-{round_}-gangkeeper-controller@{node.name}.log"
                    shutil.copyfile(sandbox.log, target)
    watcher.join(timeout=10)
    created, bound, running, ungated = (
        sorted(t.values()) for t in (timeline.created, timeline.bound, timeline.running, timeline.ungated)
    )
    complete = len(running) >= expected
    result: dict[str, Any] = {
        "backend": backend,
        "scenario": scenario,
        "round": round_,
        "pods": expected,
        "complete": complete,
        "all_created_s": round(created[-1] - applied, 2) if len(created) >= expected else None,
        "created_to_all_bound_s": round(bound[-1] - created[-1], 2) if len(bound) >= expected else None,
        "all_running_s": round(running[-1] - applied, 2) if complete else None,
        # the step: from the scale to its last pod Running, the pods already running untouched
        **({"step_running_s": round(running[-1] - stepped, 2) if complete else None} if stepped else {}),
        "binding_spread_s": round(bound[-1] - bound[0], 2) if len(bound) >= expected else None,
        # a gang's first binding before all its pods exist would be a partial start (the floor's is)
        "pods_existing_at_first_binding": sum(1 for t in created if bound and t <= bound[0]),
        "first_bound_after_all_created_s": round(bound[0] - created[-1], 2) if len(bound) >= expected else None,
        # a gated release split in two: the gates lifted (the controller's PATCHes, as the watch saw them
        # land) and the scheduler's binding after the last of them
        **(
            {
                "gates_lifted_spread_s": round(ungated[-1] - ungated[0], 2),
                "all_ungated_after_all_created_s": round(ungated[-1] - created[-1], 2),
                "last_ungated_to_all_bound_s": round(bound[-1] - ungated[-1], 2),
            }
            if ungated and len(ungated) >= len(timeline.gated) and len(bound) >= expected and created
            else {}
        ),
        # the pinch: pods bound while the gang could not fit (a partial start), and from the capacity's
        # arrival to the last binding
        **(
            {
                "bound_before_capacity": bound_before_capacity,
                "capacity_to_all_bound_s": round(bound[-1] - widened, 2)
                if widened is not None and len(bound) >= expected
                else None,
            }
            if pinch is not None
            else {}
        ),
        **(autoscaled.figures(expected, node_cpu, bound) if autoscaled is not None else {}),
        "pod_patch_ms": quantiles_ms(
            request_buckets(before.families, "PATCH", "pods"), request_buckets(after.families, "PATCH", "pods")
        ),
        # a Job's creation as its client sees it, every admission webhook inside it (Volcano's validation
        # makes the Job's PodGroups: admission/ahead.py)
        "job_create_ms": quantiles_ms(
            request_buckets(before.families, "POST|APPLY", "jobs"),
            request_buckets(after.families, "POST|APPLY", "jobs"),
        ),
        "webhook_latency_ms": {
            name: quantiles_ms(b, a)
            for name, a in webhook_buckets(after.families).items()
            if (b := webhook_buckets(before.families).get(name, {})) is not None and quantile(b, a, 0.5) is not None
        },
        "requests_by_verb": delta(requests_by_verb(before.families), requests_by_verb(after.families)),
        "writes_by_resource": delta(writes_by_resource(before.families), writes_by_resource(after.families), 10),
        "reads_by_resource": delta(reads_by_resource(before.families), reads_by_resource(after.families), 10),
        "events_by_reason": events_by_reason(core, namespace),
        # the replicas' passes while measured: how many, and their seconds (each pass's own clock)
        "controller_passes": {
            name: {
                "passes": int(count - before.passes.get(name, (0.0, 0.0))[0]),
                "seconds": round(total - before.passes.get(name, (0.0, 0.0))[1], 2),
            }
            for name, (count, total) in sorted(after.passes.items())
        },
        "cpu_seconds": {
            name: round(after.cpu[name] - before.cpu.get(name, after.cpu[name]), 1)
            for name in sorted(after.cpu)
            if after.cpu[name] - before.cpu.get(name, after.cpu[name]) >= 0.05
        },
        "gangkeeper_peak_rss_mib": {name: round(mib, 1) for name, mib in sorted(peak_rss.items())},
    }
    stack.plane.kubectl("delete", "namespace", namespace, "--wait=false")
    wait_until(
        lambda: not core.list_namespaced_pod(namespace, limit=1).items, f"the pods of {namespace} gone", 600, every=2
    )
    if autoscaled is not None:
        autoscaled.remove()
    return result


def events_by_reason(core: client.CoreV1Api, namespace: str, least: int = 10) -> dict[str, int]:
    """The run's namespace's Events by who reported them and why ("default-scheduler Scheduled"), their
    repeats counted: which component's events the API server's "POST events" writes were."""
    counts: dict[str, int] = defaultdict(int)
    for event in core.list_namespaced_event(namespace).items:
        who = event.reporting_component or (event.source.component if event.source else None) or "?"
        counts[f"{who} {event.reason}"] += max(1, event.count or 1)
    return dict(sorted(((k, n) for k, n in counts.items() if n >= least), key=lambda item: -item[1]))


def print_table(results: list[dict[str, Any]]) -> None:
    for scenario in dict.fromkeys(r["scenario"] for r in results):
        rows = [r for r in results if r["scenario"] == scenario]
        floor = next((r for r in rows if r["backend"] == "floor"), None)
        print(f"\nscenario {scenario}: {rows[0]['pods']} pods")
        print(
            f"{'backend':<9} {'created':>8} {'c->bound':>9} {'running':>8} {'x floor':>8} {'spread':>7}"
            "  webhook p50/p99 ms"
        )
        for r in rows:
            ratio = (
                f"{r['all_running_s'] / floor['all_running_s']:.2f}"
                if floor and floor["all_running_s"] and r["all_running_s"]
                else "-"
            )
            hooks = ", ".join(f"{n.split('.')[0]} {v['p50']}/{v['p99']}" for n, v in r["webhook_latency_ms"].items())
            if r["job_create_ms"]["p50"] is not None:
                hooks += f"; create jobs {r['job_create_ms']['p50']}/{r['job_create_ms']['p99']}"
            cells = [
                r[k] if r[k] is not None else "-" for k in ("all_created_s", "created_to_all_bound_s", "all_running_s")
            ]
            spread = r["binding_spread_s"] if r["binding_spread_s"] is not None else "-"
            print(f"{r['backend']:<9} {cells[0]:>8} {cells[1]:>9} {cells[2]:>8} {ratio:>8} {spread:>7}  {hooks}")
            if "gates_lifted_spread_s" in r:
                print(
                    f"{'':<9} gates: all lifted {r['all_ungated_after_all_created_s']} s after the last creation "
                    f"(over {r['gates_lifted_spread_s']} s), all bound {r['last_ungated_to_all_bound_s']} s after"
                )
            if "nodes_made" in r:
                print(
                    f"{'':<9} autoscale: {r['bound_before_room']} of {r['pods']} bound before the room for the "
                    f"whole gang was there; Karpenter made {r['nodes_made']} nodes (needed {r['nodes_needed']})"
                )
            if "step_running_s" in r:
                floor_step = floor.get("step_running_s") if floor else None
                print(
                    f"{'':<9} step: {STEP_PODS} pods added to the running gang, all Running {r['step_running_s']} s "
                    f"after the scale"
                    + (f" ({r['step_running_s'] / floor_step:.2f}x the floor's)" if floor_step else "")
                )
            if "capacity_to_all_bound_s" in r:
                print(
                    f"{'':<9} pinch: {r['bound_before_capacity']} of {r['pods']} bound before the capacity came, "
                    f"then all bound {r['capacity_to_all_bound_s']} s after it"
                )
        for r in rows:
            print(f"  {r['backend']}: requests {r['requests_by_verb']}")
            print(f"  {r['backend']}: writes {r['writes_by_resource']}")
            print(f"  {r['backend']}: events {r.get('events_by_reason', {})}")
            print(f"  {r['backend']}: controller passes {r.get('controller_passes', {})}")
            print(f"  {r['backend']}: reads {r['reads_by_resource']}")
            print(f"  {r['backend']}: cpu s {r['cpu_seconds']}; gangkeeper peak RSS MiB {r['gangkeeper_peak_rss_mib']}")


def print_medians(results: list[dict[str, Any]]) -> None:
    """With --repeat: each backend's median (and range) over the rounds, the ratio taken to the floor
    of the same round (a machine whose runs vary by 20-40% makes one run's ratio a coin toss); for the
    pinch, also the time from the capacity to all bound and the pods bound before it came."""
    floors = {(r["scenario"], r["round"]): r for r in results if r["backend"] == "floor"}
    columns = [("created", "all_created_s"), ("c->bound", "created_to_all_bound_s"), ("running", "all_running_s")]
    for scenario in dict.fromkeys(r["scenario"] for r in results):
        rows = [r for r in results if r["scenario"] == scenario]
        pinch = [("capacity->bound", "capacity_to_all_bound_s"), ("bound before", "bound_before_capacity")]
        shown = columns + [c for c in pinch if any(c[1] in r for r in rows)]
        print(f"\nscenario {scenario}, median [min-max] of {len({r['round'] for r in rows})} rounds")
        print(f"{'backend':<9}" + "".join(f" {title:>20}" for title, _ in [*shown, ("x floor", "")]))
        for backend in dict.fromkeys(r["backend"] for r in rows):
            mine = [r for r in rows if r["backend"] == backend]
            ratios = [
                r["all_running_s"] / floor["all_running_s"]
                for r in mine
                if (floor := floors.get((scenario, r["round"]))) and floor["all_running_s"] and r["all_running_s"]
            ]
            cells = [summary([r[key] for r in mine if r.get(key) is not None]) for _, key in shown]
            print(f"{backend:<9}" + "".join(f" {cell:>20}" for cell in [*cells, summary(ratios)]))


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{statistics.median(ordered):.2f} [{ordered[0]:.2f}-{ordered[-1]:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--node-cpu", type=int, default=8)
    parser.add_argument("--pods", type=int, default=1000, help="pods of the `one` scenario's gang")
    parser.add_argument("--backends", default="floor,gate,native,volcano,coscheduling")
    parser.add_argument("--scenarios", default="one,many")
    parser.add_argument("--crowd", type=int, default=100_000, help="running pods the `crowded` scenario starts among")
    parser.add_argument("--client-qps", type=int, default=100, help="controller manager's and scheduler's")
    parser.add_argument("--release-concurrency", type=int, default=None, help="the controller's, when not its default")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of every backend per scenario, interleaved; medians printed"
    )
    parser.add_argument(
        "--apiserver-profiles",
        type=Path,
        default=None,
        help="a directory for kube-apiserver's CPU profiles of each run (5-s windows: SCENARIO-BACKEND-N.pb.gz)",
    )
    parser.add_argument(
        "--gangkeeper-profiles",
        type=Path,
        default=None,
        help="a directory for py-spy's CPU samples (the GIL's holder) of each gangkeeper controller in each run "
        "(SCENARIO-BACKEND-N-POD.txt)",
    )
    parser.add_argument(
        "--gangkeeper-logs",
        type=Path,
        default=None,
        help="a directory for each gangkeeper controller's log after each run (SCENARIO-BACKEND-N-POD.log)",
    )
    args = parser.parse_args()
    version = os.environ.get("GK_K8S_VERSION") or versions()["K8S_DEFAULT"]
    backends = args.backends.split(",")
    for name, module in (("volcano", volcano), ("coscheduling", coscheduling)):
        if name in backends and module.missing():
            print(f"{name} skipped: {module.missing()}")
            backends.remove(name)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gk-bench-") as tmp, ExitStack() as running:
        plane = ControlPlane(
            Path(tmp),
            kubernetes_version=version,
            client_qps=args.client_qps,
            profiling=args.apiserver_profiles is not None,
        )
        missing = plane.missing()
        if missing:
            sys.exit(missing)
        stack = running.enter_context(Stack(plane, overlay="gate").running())
        print(f"Kubernetes {version}; controller manager and scheduler: {' '.join(plane.client_flags())}", flush=True)
        if args.release_concurrency:
            configure(stack, f"  releaseConcurrency: {args.release_concurrency}\n")
        if "volcano" in backends:
            processes = volcano.start(plane)
            running.callback(volcano.stop, plane, processes)
        if "coscheduling" in backends:
            running.callback(coscheduling.start(plane).stop)
        if "autoscale" in args.scenarios.split(","):
            if karpenter.missing():
                sys.exit(karpenter.missing())
            running.enter_context(karpenter.running(plane))
        make_nodes(stack, args.nodes, args.node_cpu)
        used = [0]  # the pinch takes nodes no earlier run used
        for scenario in args.scenarios.split(","):
            if scenario == "crowded" and CROWD_NAMESPACE not in stack.namespaces:
                make_crowd(stack, args.crowd)
            for round_, backend in itertools.product(range(args.repeat), backends):
                result = run_one(
                    stack,
                    backend,
                    scenario,
                    args.pods,
                    args.node_cpu,
                    used,
                    args.apiserver_profiles,
                    args.gangkeeper_profiles,
                    round_,
                    args.gangkeeper_logs,
                )
                print(json.dumps(result), flush=True)
                results.append(result)
    print_table(results)
    if args.repeat > 1:
        print_medians(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
