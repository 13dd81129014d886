"""A real GPU cluster's trace replayed on the real control plane: gangkeeper against every gang mechanism.

Hours of the Philly trace (the week `gangkeeper simulate` replays, data/traces/philly-2017-10-23-week.csv)
are applied to the real tier's control plane (tests/realcluster/: etcd, kube-apiserver, kube-controller-
manager, kube-scheduler, KWOK, gangkeeper deployed from manifests/overlays/gate), once per backend on the
same slice and the same cluster shape: --nodes KWOK nodes of 8 `nvidia.com/gpu` each, labelled in racks
(`topology.kubernetes.io/zone`, --rack-size nodes each). With --gpus-as dra the GPUs are DRA devices
instead: each node publishes a ResourceSlice of 8, and each pod claims its GPUs through a
ResourceClaimTemplate of that count (tests/realcluster/dra.py); Volcano 1.10 is left out (it allocates
no devices, so gangkeeper refuses DRA workloads under it).

Each trace job becomes a Job at its arrival time, in an opted-in namespace of its Philly virtual cluster:
ceil(g/8) workers (as `simulate --split node` splits it), each asking for ceil(g/workers) GPUs, an Indexed
Job when it has more than one; each pod runs for the job's duration (KWOK's `gangkeeper.test/run-for`).
Arrivals and durations are compressed by --speedup; every figure is given back in trace time. The mix:
every --high-every-th job in PriorityClass `replay-high` (1000, the rest 0), and the multi-node jobs ask
to stay in one rack (`gangkeeper.io/topology-preferred`), so preemption and topology run under load.

gangkeeper's own clocks are compressed with the trace, each by default the controller's default /
--speedup, so each lasts the same trace time as on a real cluster: the head-of-line bound (how long a
waiting gang may hold others back, 1800 s: at 180x an uncompressed bound would be 90 trace hours, never
reached), the min runtime before a gang may be preempted (60 s: uncompressed, 3 trace hours at 180x, so
no gang of the capped run times was ever a victim) and the requeue backoff's base (30 s).

The controller manager's and scheduler's client QPS are --client-qps (default 100, as bench/cluster.py
sets them): at kube-controller-manager's own default of 20 the Job controller's writes were what every
backend waited on at 180x, the floor included.

Backends: floor (a namespace not opted in: the default scheduler, no gang), gate, native (the control
plane's own version: GK_K8S_VERSION, 1.36 or 1.37), volcano and coscheduling (when built).

Faults while it runs (--faults, on by default; each recorded in the JSON with what it cost): a node
drained at 30% of the slice and uncordoned at 45%, another tainted NoSchedule at 40% and untainted at
55%, gangkeeper's controller restarted at 50%, a webhook pod killed at 70%.

Every figure comes from what the cluster reports (one watch of the replay's pods and one of its Jobs,
local receive times; Events), never from gangkeeper's own state:
gpu_hours_held_by_incomplete_gangs, gangs_stuck_partial_over_5min, gangs_finished, gangs_total, wait_s
(mean/p50/p95/p99 and by gang size: until the gang is first whole), wait_in_all_s (every wait before
the run that finished: a preempted gang's re-waits too), delay_s (done minus submitted minus the job's
run: those waits and the work done again), jct_s (mean/p95), gpu_utilization,
multi_node_gangs_in_one_rack_pct, preemptions, requeues, pods_gated_at_end, and gangkeeper's CPU per pod
and peak memory.

    python bench/replay.py --backends floor,gate,native,volcano,coscheduling --nodes 16 --hours 12 \\
        --speedup 120 --json replay.json [--plots DIR] [--start 2017-10-23] [--split node|gpu] [--no-faults] \\
        [--gpus-as extended|dra] [--client-qps 100] [--head-of-line-seconds S] [--min-runtime-seconds S] \\
        [--backoff-base-seconds S]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, config, watch

from bench.cluster import (
    GANGKEEPER,
    apiserver_metrics,
    components,
    configure,
    cpu_seconds,
    profile_controllers,
    rss_mib,
    writes_by_resource,
)
from tests.realcluster import coscheduling, dra, volcano
from tests.realcluster.controlplane import ControlPlane, versions
from tests.realcluster.stack import Stack, wait_until
from webhook.controller.decide.headofline import DEFAULT_BOUND_SECONDS
from webhook.controller.decide.preemption import DEFAULT_MIN_RUNTIME_SECONDS
from webhook.controller.decide.state import DEFAULT_BACKOFF_BASE_SECONDS
from webhook.simulation import trace

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "philly-2017-10-23-week.csv"
GPU, ZONE, GATE = "nvidia.com/gpu", "topology.kubernetes.io/zone", "gangkeeper.io/gang-gate"
JOB_LABEL = "replay.gangkeeper.io/job"
WORKERS_TAINT = "replay.gangkeeper.io/workers"  # on the GPU nodes; the replay's pods tolerate it
HIGH_CLASS = "replay-high"
GPUS_PER_NODE = 8
STUCK_TRACE_SECONDS = 300.0
SIZE_CLASSES = ((1, "1 pod"), (2, "2-4 pods"), (5, "5+ pods"))
# gangkeeper's clocks given to the controller compressed with the trace: option -> (Configuration field,
# the controller's default, real s)
COMPRESSED_CLOCKS = {
    "head_of_line_seconds": ("headOfLineSeconds", DEFAULT_BOUND_SECONDS),
    "min_runtime_seconds": ("minRuntimeSeconds", DEFAULT_MIN_RUNTIME_SECONDS),
    "backoff_base_seconds": ("backoffBaseSeconds", DEFAULT_BACKOFF_BASE_SECONDS),
}
# kube-scheduler's (native), Volcano's and gangkeeper's events for a gang preempted, and for one requeued
PREEMPTIONS = frozenset({"Preempted", "GangPreempted", "Evict"})
REQUEUES = frozenset({"GangRequeued", "GangEvicted", "GangMembersRequeued"})


@dataclass(frozen=True)
class ReplayJob:
    name: str
    cluster: str  # the Philly virtual cluster: one namespace each
    arrival: float  # real seconds after the replay starts
    duration: float  # real seconds each pod runs
    pods: int
    gpus_per_pod: int
    high: bool

    @property
    def size_class(self) -> str:
        return next(label for least, label in reversed(SIZE_CLASSES) if self.pods >= least)


def replay_jobs(
    jobs: Iterable[trace.TraceJob], speedup: float, high_every: int, split: str = "node", max_job_hours: float = 0
) -> list[ReplayJob]:
    """The trace's jobs as the replay applies them: `split` node gives ceil(g/8) workers of
    ceil(g/workers) GPUs (`gangkeeper simulate`'s headline split), gpu one pod per GPU; each job's run
    time capped at `max_job_hours` of trace time (0: as the trace says)."""
    made = []
    for job in jobs:
        workers = job.gpus if split == "gpu" else max(1, math.ceil(job.gpus / GPUS_PER_NODE))
        duration = min(job.duration, max_job_hours * 3600) if max_job_hours > 0 else job.duration
        made.append(
            ReplayJob(
                name=f"j{job.index:05d}",
                cluster=job.cluster,
                arrival=job.arrival / speedup,
                duration=max(1.0, duration / speedup),
                pods=max(1, workers),
                gpus_per_pod=max(1, math.ceil(job.gpus / max(1, workers))),
                high=high_every > 0 and job.index % high_every == 0,
            )
        )
    return made


def job_manifest(job: ReplayJob, gpus_as: str = "extended") -> dict[str, Any]:
    """`gpus_as` extended: `nvidia.com/gpu` requests; dra: one claim per pod from the namespace's
    ResourceClaimTemplate of that many devices (claim_templates)."""
    gpus = {GPU: str(job.gpus_per_pod)} if gpus_as == "extended" else {}
    container: dict[str, Any] = {
        "name": "work",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi", **gpus}, "limits": gpus},
    }
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if gpus_as == "dra":
        pod_spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{job.gpus_per_pod}"}]
        container["resources"]["claims"] = [{"name": "gpus"}]
    pod_spec["tolerations"] = [{"key": WORKERS_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    if job.high:
        pod_spec["priorityClassName"] = HIGH_CLASS
    annotations = {"gangkeeper.io/topology-preferred": ZONE} if job.pods > 1 else {}
    spec: dict[str, Any] = {
        "parallelism": job.pods,
        "completions": job.pods,
        "backoffLimit": 20,
        # an evicted or preempted member is not the job's failure (the gang is requeued, or retried)
        "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
        "template": {
            "metadata": {
                "labels": {JOB_LABEL: job.name},
                "annotations": {"gangkeeper.test/run-for": f"{job.duration:.1f}s"},
            },
            "spec": pod_spec,
        },
    }
    if job.pods > 1:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "labels": {JOB_LABEL: job.name}, "annotations": annotations},
        "spec": spec,
    }


@dataclass
class PodSeen:
    job: str
    gpus: int
    created: float
    bound: float | None = None
    node: str = ""
    ended: float | None = None
    ungated: float | None = None  # when the watch first saw it without gangkeeper's gate
    succeeded: bool = False  # ended by finishing its run, not by a deletion (preempted, evicted, requeued)
    seen_late: float | None = None  # real s between its container's finishedAt (to the second) and the watch
    updates_while_running: int = 0  # its updates between Running and its end: whatever touches running pods
    phase: str = ""


@dataclass
class Recorder:
    """What the watches saw, in local monotonic seconds."""

    namespaces: frozenset[str]  # this run's: a namespace of an earlier run still going is not seen
    pods: dict[str, PodSeen] = field(default_factory=dict)  # by namespace/name
    completed: dict[str, float] = field(default_factory=dict)  # namespace/job -> when it was Complete
    submitted: dict[str, float] = field(default_factory=dict)  # namespace/job -> when it was first seen
    lock: threading.Lock = field(default_factory=threading.Lock)

    def see_pod(self, kind: str, pod: Any, now: float) -> None:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        if meta.namespace not in self.namespaces:
            return
        key = f"{meta.namespace}/{meta.name}"
        with self.lock:
            seen = self.pods.get(key)
            if seen is None:
                gpus = sum(int((c.resources.requests or {}).get(GPU, 0)) for c in spec.containers) + sum(
                    int(claim.resource_claim_template_name.removeprefix("gpus-"))
                    for claim in spec.resource_claims or []
                    if (claim.resource_claim_template_name or "").startswith("gpus-")
                )
                job = f"{meta.namespace}/{(meta.labels or {}).get(JOB_LABEL, '')}"
                seen = self.pods[key] = PodSeen(job, gpus, now)
            if spec.node_name and seen.bound is None:
                seen.bound, seen.node = now, spec.node_name
            if seen.ungated is None and not any(g.name == GATE for g in spec.scheduling_gates or []):
                seen.ungated = now
            finished = kind == "DELETED" or meta.deletion_timestamp or (status.phase in ("Succeeded", "Failed"))
            seen.updates_while_running += (
                kind == "MODIFIED" and not meta.deletion_timestamp and seen.phase == status.phase == "Running"
            )
            seen.phase = status.phase or ""
            if finished and seen.ended is None:
                seen.ended = now
                seen.succeeded = status.phase == "Succeeded"
                seen.seen_late = _seen_late(status)

    def see_job(self, job: Any, now: float) -> None:
        conditions = (job.status.conditions if job.status else None) or []
        complete = any(c.type == "Complete" and c.status == "True" for c in conditions)
        if job.metadata.namespace not in self.namespaces:
            return
        key = f"{job.metadata.namespace}/{job.metadata.name}"
        with self.lock:
            self.submitted.setdefault(key, now)
            if complete:
                self.completed.setdefault(key, now)


def watch_forever(list_call: Callable[..., Any], see: Callable[[str, Any], None], stop: threading.Event) -> None:
    """One watch, restarted whenever the API server ends it (a watch's lifetime, a restart)."""
    while not stop.is_set():
        stream = watch.Watch()
        try:
            for event in stream.stream(list_call, label_selector=JOB_LABEL, timeout_seconds=30):
                see(event["type"], event["object"])
                if stop.is_set():
                    break
        except Exception:  # ended or refused: start another (the records keep the first sightings)
            time.sleep(0.2)
        finally:
            stream.stop()


class Usage:
    """gangkeeper's CPU seconds (every process it ran, a restarted one's included) and peak RSS."""

    def __init__(self, stack: Stack) -> None:
        self.stack, self.peak_mib = stack, 0.0
        self.cpu_by_pid: dict[int, float] = {}
        self.kind_of_pid: dict[int, str] = {}  # gangkeeper-webhook or gangkeeper-controller

    def sample(self) -> None:
        pids = {pid: name.split("@")[0] for name, pid in components(self.stack).items() if name.startswith(GANGKEEPER)}
        self.kind_of_pid.update(pids)
        for pid in pids:
            self.cpu_by_pid[pid] = max(self.cpu_by_pid.get(pid, 0.0), cpu_seconds(pid))
        self.peak_mib = max(self.peak_mib, sum(rss_mib(pid) for pid in pids))

    def cpu_by_kind(self) -> dict[str, float]:
        """CPU seconds per kind of gangkeeper process (its replicas and restarts summed)."""
        kinds: dict[str, float] = {}
        for pid, seconds in self.cpu_by_pid.items():
            kinds[self.kind_of_pid[pid]] = kinds.get(self.kind_of_pid[pid], 0.0) + seconds
        return kinds

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(2.0):
            self.sample()

    @property
    def cpu(self) -> float:
        return sum(self.cpu_by_pid.values())


@dataclass
class Settings:
    nodes: int
    rack_size: int
    speedup: float
    faults: bool
    drain_limit: float  # real seconds to wait for the last jobs after the last arrival
    profiles: Path | None = None  # py-spy's samples of each gangkeeper controller, one file per backend
    gpus_as: str = "extended"  # or dra: each node's GPUs a ResourceSlice, each pod's a ResourceClaim
    profile_cpu: bool = False  # the samples are CPU time, of the webhooks too, not the controllers' wall clock


def make_nodes(stack: Stack, settings: Settings) -> list[str]:
    """The GPU nodes, tainted so that only the replay's pods go there: gangkeeper's own pods, restarted
    by a fault, must land on the system nodes (a pod on a KWOK node only looks Running)."""
    nodes = stack.replace_workers(
        settings.nodes,
        cpu="64",
        memory="512Gi",
        gpus=GPUS_PER_NODE if settings.gpus_as == "extended" else 0,
        prefix="gpu",
        labels=lambda index: {ZONE: f"rack-{index // settings.rack_size}"},
    )
    if settings.gpus_as == "dra":  # the node's GPUs as a driver publishes them; gone with the node
        stack.plane.apply([dra.device_class(), *(dra.node_slice(stack, node, GPUS_PER_NODE) for node in nodes)])
    stack.plane.kubectl("taint", "node", *nodes, f"{WORKERS_TAINT}=true:NoSchedule")
    return nodes


def kubectl(stack: Stack, *args: str) -> str:
    return stack.plane.kubectl(*args, check=False, timeout=120).stdout or ""


def fault_plan(span: float, nodes: list[str]) -> list[tuple[float, str, Callable[[Stack], dict[str, Any]]]]:
    """(when, what, how) of the faults, at shares of the slice's span (real seconds)."""
    drained, tainted = nodes[0], nodes[len(nodes) // 2]

    def drain(stack: Stack) -> dict[str, Any]:
        on_node = [p for p in all_pods(stack) if p["spec"].get("nodeName") == drained]
        kubectl(stack, "drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=60s")
        return {"node": drained, "pods_evicted": len(on_node)}

    def restart_controller(stack: Stack) -> dict[str, Any]:
        holder = lease_holder(stack)
        started = time.monotonic()
        kubectl(stack, "-n", "gangkeeper-system", "delete", "pod", "-l", "app.kubernetes.io/component=controller")
        wait_until(lambda: lease_holder(stack) not in ("", holder), "a new controller leading", 180, every=1)
        return {"seconds_without_a_leader": round(time.monotonic() - started, 1)}

    def kill_webhook(stack: Stack) -> dict[str, Any]:
        selector = "app.kubernetes.io/component=webhook"
        names = kubectl(stack, "-n", "gangkeeper-system", "get", "pod", "-l", selector, "-o", "name").split()
        started = time.monotonic()
        kubectl(stack, "-n", "gangkeeper-system", "delete", "--wait=false", "--grace-period=0", "--force", names[0])
        wait_until(lambda: len(stack.webhook_endpoints()) >= len(names), "the webhook's endpoints ready", 180, every=1)
        return {"pod": names[0], "seconds_to_full_strength": round(time.monotonic() - started, 1)}

    return [
        (0.30 * span, "drain", drain),
        (
            0.40 * span,
            "taint",
            lambda s: {"node": tainted, "out": kubectl(s, "taint", "node", tainted, "replay=fault:NoSchedule")},
        ),
        (0.45 * span, "uncordon", lambda s: {"node": drained, "out": kubectl(s, "uncordon", drained)}),
        (0.50 * span, "controller restart", restart_controller),
        (0.55 * span, "untaint", lambda s: {"node": tainted, "out": kubectl(s, "taint", "node", tainted, "replay-")}),
        (0.70 * span, "webhook pod killed", kill_webhook),
    ]


def lease_holder(stack: Stack) -> str:
    lease = stack.plane.get("lease", "gangkeeper-controller", namespace="gangkeeper-system") or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def all_pods(stack: Stack) -> list[dict[str, Any]]:
    return list(stack.plane.get("pods", selector=JOB_LABEL, all_namespaces=True))


def submit(batch: client.BatchV1Api, job: ReplayJob, namespace: str, gpus_as: str) -> int:
    """The Job created, retried while the API (or its webhook, killed by a fault) refuses; the retries."""
    for attempt in range(120):
        try:
            batch.create_namespaced_job(namespace, job_manifest(job, gpus_as))
            return attempt
        except client.ApiException as error:
            if error.status == 409:
                return attempt
            time.sleep(1.0)
    return 120


def namespaces_for(stack: Stack, backend: str, clusters: Iterable[str], gpus_as: str) -> dict[str, str]:
    made = {}
    for cluster in sorted(set(clusters)):
        name = f"rp-{backend[:5]}-{cluster}"
        made[cluster] = stack.namespace(name, None if backend == "floor" else backend, backend != "floor")
        if gpus_as == "dra":  # a template per pod size: gpus-N claims N devices
            counts = range(1, GPUS_PER_NODE + 1)
            stack.plane.apply([dra.claim_template(made[cluster], f"gpus-{n}", count=n) for n in counts])
    return made


def _seen_late(status: Any) -> float | None:
    """How long after its container said it finished the watch saw the pod end (its figures' lag)."""
    for container in (status.container_statuses if status else None) or []:
        finished = container.state.terminated.finished_at if container.state and container.state.terminated else None
        if finished is not None:
            return time.time() - finished.timestamp()
    return None


def start_watches(stack: Stack, recorder: Recorder, usage: Usage, stop: threading.Event) -> None:
    api = config.new_client_from_config(str(stack.plane.kubeconfig))
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)

    def see_pod(kind: str, pod: Any) -> None:
        recorder.see_pod(kind, pod, time.monotonic())

    def see_job(kind: str, job: Any) -> None:
        recorder.see_job(job, time.monotonic())

    for target, args in (
        (watch_forever, (core.list_pod_for_all_namespaces, see_pod, stop)),
        (watch_forever, (batch.list_job_for_all_namespaces, see_job, stop)),
        (usage.run, (stop,)),
    ):
        threading.Thread(target=target, args=args, daemon=True).start()


def inject_faults(
    stack: Stack, plan: list[tuple[float, str, Callable[[Stack], dict[str, Any]]]], started: float, speedup: float
) -> list[dict[str, Any]]:
    """Each fault at its time (beside the arrivals, which go on meanwhile), with what it cost."""
    done: list[dict[str, Any]] = []
    for at, what, act in plan:
        time.sleep(max(0.0, started + at - time.monotonic()))
        try:
            result = act(stack)
        except Exception as error:  # a fault that could not be made is recorded, not fatal
            result = {"error": str(error)[:200]}
        done.append({"kind": what, "at_trace_s": round(at * speedup), **result})
    return done


def submit_all(stack: Stack, jobs: list[ReplayJob], namespaces: dict[str, str], started: float, gpus_as: str) -> int:
    """Every Job at its arrival time; the creations retried (a fault's webhook outage)."""
    batch = client.BatchV1Api(config.new_client_from_config(str(stack.plane.kubeconfig)))
    retries = 0
    for job in sorted(jobs, key=lambda j: j.arrival):
        time.sleep(max(0.0, started + job.arrival - time.monotonic()))
        retries += submit(batch, job, namespaces[job.cluster], gpus_as)
    return retries


def run_backend(stack: Stack, backend: str, jobs: list[ReplayJob], settings: Settings) -> dict[str, Any]:
    nodes = make_nodes(stack, settings)
    namespaces = namespaces_for(stack, backend, (j.cluster for j in jobs), settings.gpus_as)
    recorder, usage, stop = Recorder(frozenset(namespaces.values())), Usage(stack), threading.Event()
    keys = {job.name: f"{namespaces[job.cluster]}/{job.name}" for job in jobs}
    start_watches(stack, recorder, usage, stop)
    spies = []
    if settings.profiles is not None:
        settings.profiles.mkdir(parents=True, exist_ok=True)
        # wall-clock: a release waits on blocked API calls as much as on CPU; or CPU alone, of every process
        prefix = settings.profiles / f"replay-{backend}"
        spies = (
            profile_controllers(stack, prefix, kinds=GANGKEEPER, gil=True)
            if settings.profile_cpu
            else profile_controllers(stack, prefix, idle=True)
        )
    usage.sample()
    writes_before = writes_by_resource(apiserver_metrics(stack.plane))
    cpu_before, kinds_before, started = usage.cpu, usage.cpu_by_kind(), time.monotonic()
    span = max((j.arrival for j in jobs), default=0.0)
    plan = fault_plan(span, nodes) if settings.faults else []
    faults: list[dict[str, Any]] = []
    injector = threading.Thread(target=lambda: faults.extend(inject_faults(stack, plan, started, settings.speedup)))
    injector.start()
    retries = submit_all(stack, jobs, namespaces, started, settings.gpus_as)
    injector.join()
    deadline = time.monotonic() + settings.drain_limit
    while time.monotonic() < deadline and not set(keys.values()) <= recorder.completed.keys():
        time.sleep(1.0)
    ended = time.monotonic()
    usage.sample()
    writes = writes_by_resource(apiserver_metrics(stack.plane))
    left = all_pods(stack)
    events = Counter(e.get("reason", "") for ns in namespaces.values() for e in stack.plane.get("events", namespace=ns))
    stop.set()
    for spy in spies:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    racks = {n: f"rack-{i // settings.rack_size}" for i, n in enumerate(nodes)}
    return {
        **measure(recorder, jobs, keys, settings, started, ended, racks),
        "pods_gated_at_end": sum(1 for p in left if any(g.get("name") == GATE for g in gates_of(p))),
        "gangs_partly_bound_at_end": len(partly_bound(left)),
        "preemptions": sum(n for reason, n in events.items() if reason in PREEMPTIONS),
        "requeues": sum(n for reason, n in events.items() if reason in REQUEUES),
        "events": dict(events.most_common(12)),
        "gangkeeper_cpu_ms_per_pod": round(1000 * (usage.cpu - cpu_before) / max(1, len(recorder.pods)), 2),
        "gangkeeper_cpu_ms_per_pod_by_process": {
            kind: round(1000 * (seconds - kinds_before.get(kind, 0.0)) / max(1, len(recorder.pods)), 2)
            for kind, seconds in usage.cpu_by_kind().items()
        },
        # every client's, the replay's own and the control plane's too: compare backends, per pod
        "api_writes_per_pod": {
            key: round((n - writes_before.get(key, 0.0)) / max(1, len(recorder.pods)), 2)
            for key, n in sorted(writes.items(), key=lambda item: -(item[1] - writes_before.get(item[0], 0.0)))
            if n - writes_before.get(key, 0.0) >= 1
        },
        "gangkeeper_peak_rss_mib": round(usage.peak_mib, 1),
        "gangkeeper_peak_rss_kib_per_pod": round(1024 * usage.peak_mib / max(1, len(recorder.pods)), 1),
        "pods_created": len(recorder.pods),
        "job_create_retries": retries,
        "faults": faults,
    }


def gates_of(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return list(pod["spec"].get("schedulingGates") or [])


def partly_bound(pods: list[dict[str, Any]]) -> set[str]:
    """Jobs with live pods both bound and not bound (gated or pending)."""
    state: dict[str, set[bool]] = {}
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        job = f"{pod['metadata']['namespace']}/{pod['metadata']['labels'].get(JOB_LABEL, '')}"
        state.setdefault(job, set()).add(bool(pod["spec"].get("nodeName")))
    return {job for job, seen in state.items() if seen == {True, False}}


def percentiles(values: list[float], digits: int = 1) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p95": None, "p99": None, "count": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], digits)

    return {
        "mean": round(statistics.fmean(ordered), digits),
        "p50": at(0.5),
        "p95": at(0.95),
        "p99": at(0.99),
        "count": len(ordered),
    }


@dataclass
class GangTimes:
    """One job's gang as the cluster showed it: when it was first whole, and its partial intervals."""

    whole_at: float | None
    partial_gpu_seconds: float
    longest_partial: float
    whole_nodes: list[str]


def gang_times(pods: list[PodSeen], size: int, end: float) -> GangTimes:
    """A sweep over the pods' bound intervals until the gang is first whole: the GPU-seconds its bound
    pods held while fewer than `size` were bound, and the longest such stretch (after it was whole,
    members ending one by one is the job finishing, not a gang started partly)."""
    marks = [(p.bound, 1, i) for i, p in enumerate(pods) if p.bound is not None]
    marks += [(p.ended, -1, i) for i, p in enumerate(pods) if p.bound is not None and p.ended is not None]
    bound: set[int] = set()
    held, longest, since, last = 0.0, 0.0, None, 0.0
    for moment, step, index in sorted(marks):
        if bound and len(bound) < size:
            held += (moment - last) * sum(pods[i].gpus for i in bound)
        (bound.add if step > 0 else bound.discard)(index)
        partial = 0 < len(bound) < size
        if since is not None and not partial:
            longest, since = max(longest, moment - since), None
        if len(bound) >= size:
            return GangTimes(moment, held, longest, [pods[i].node for i in bound])
        if partial and since is None:
            since = moment
        last = moment
    if bound:
        held += (end - last) * sum(pods[i].gpus for i in bound)
    if since is not None:
        longest = max(longest, end - since)
    return GangTimes(None, held, longest, [])


def waited_in_all(pods: list[PodSeen], size: int, submitted: float) -> float | None:
    """All the time a gang waited before the run that finished: from its submission, every stretch with
    fewer than `size` pods bound, up to the last time it became whole. A gang preempted after it started
    (kube-scheduler's victims are the pods started last, the newest of a burst) waits again; its first
    wait alone does not show that. None: never whole."""
    marks = sorted(
        [(p.bound, 1) for p in pods if p.bound is not None]
        + [(p.ended, -1) for p in pods if p.bound is not None and p.ended is not None]
    )
    bound, last, waited, total = 0, submitted, 0.0, None
    for moment, step in marks:
        if bound < size:
            waited += max(0.0, moment - last)
        last = max(last, moment)
        bound += step
        if step > 0 and bound == size:
            total = waited
    return total


TIMELINE_STEP_TRACE_SECONDS = 300


def timeline(
    recorder: Recorder, whole_at: dict[str, float | None], started: float, ended: float, speedup: float
) -> dict[str, list[float]]:
    """Every 5 trace minutes: the GPUs of bound pods still running, and the gangs submitted and not yet
    whole nor finished (waiting), as the watches saw them."""
    step = TIMELINE_STEP_TRACE_SECONDS / speedup
    hours, running, waiting = [], [], []
    moment = started
    pods = [p for p in recorder.pods.values() if p.bound is not None]
    while moment <= ended:
        hours.append(round((moment - started) * speedup / 3600, 3))
        running.append(sum(p.gpus for p in pods if p.bound is not None and p.bound <= moment < _or_never(p.ended)))
        waiting.append(
            sum(
                1
                for key, at in recorder.submitted.items()
                if key in whole_at
                and at <= moment
                and _or_never(whole_at[key]) > moment
                and recorder.completed.get(key, float("inf")) > moment
            )
        )
        moment += step
    return {"trace_hours": hours, "running_gpus": running, "waiting_gangs": waiting}


def run_times(
    by_job: dict[str, list[PodSeen]], durations: dict[str, float], speedup: float, started: float = 0.0
) -> dict[str, Any]:
    """How long each bound pod held its GPUs against its job's run time (trace s): a pod that finished
    beside its duration's overrun (the cluster's lag in ending it), and the GPU-hours of pods that ended
    without finishing (preempted, evicted, requeued: work done again), each of them listed."""
    overruns, lost, cut = [], 0.0, []
    for key, pods in by_job.items():
        for pod in pods:
            if pod.bound is None or pod.ended is None:
                continue
            if pod.succeeded and key in durations:
                overruns.append((pod.ended - pod.bound - durations[key]) * speedup)
            elif not pod.succeeded:
                lost += (pod.ended - pod.bound) * pod.gpus * speedup
                ran = round((pod.ended - pod.bound) * speedup)
                cut.append([round((pod.ended - started) * speedup), key, pod.gpus, ran])
    late = [p.seen_late for pods in by_job.values() for p in pods if p.seen_late is not None]
    return {
        "pod_overrun_s": percentiles(overruns),
        "gpu_hours_lost_to_restarts": round(lost / 3600, 2),
        "cut_short": {"columns": ["ended_s", "job", "gpus", "ran_s"], "rows": sorted(cut)},
        "pod_updates_while_running": sum(p.updates_while_running for pods in by_job.values() for p in pods),
        # real s: the watch's own lag behind the cluster, which every figure above carries
        "watch_lag_real_s": percentiles(late, 2),
    }


def _or_never(moment: float | None) -> float:
    return float("inf") if moment is None else moment


def measure(
    recorder: Recorder,
    jobs: list[ReplayJob],
    keys: dict[str, str],
    settings: Settings,
    started: float,
    ended: float,
    rack_of: dict[str, str],
) -> dict[str, Any]:
    """Every figure in trace time (real seconds x speedup), from what the watches saw."""
    x = settings.speedup
    by_job: dict[str, list[PodSeen]] = {}
    for seen in recorder.pods.values():
        by_job.setdefault(seen.job, []).append(seen)
    waits: list[float] = []
    by_size: dict[str, list[float]] = {}
    # [arrival, pods, GPUs each, high priority, wait, delay, wait in all (None: never)], trace s
    gangs: list[list[Any]] = []
    jcts, delays, waits_in_all, partial_held, stuck, one_rack, multi = [], [], [], 0.0, 0, 0, 0
    for job in jobs:
        key = keys[job.name]
        pods = by_job.get(key, [])
        times = gang_times(pods, job.pods, ended)
        partial_held += times.partial_gpu_seconds
        stuck += times.longest_partial * x > STUCK_TRACE_SECONDS
        submitted = recorder.submitted.get(key, min((p.created for p in pods), default=None))
        wait = None if times.whole_at is None or submitted is None else round((times.whole_at - submitted) * x)
        done = recorder.completed.get(key)
        # all the time the job lost on its way to done: its first wait, and the re-waits and work done again
        # of a gang preempted or evicted later, which its first wait does not show (a victim restarted by
        # the Job controller is whole again without a new wait)
        delay = None if done is None or submitted is None else round((done - submitted - job.duration) * x)
        in_all = None if submitted is None else waited_in_all(pods, job.pods, submitted)
        in_all = None if in_all is None else round(in_all * x)
        gangs.append([round(job.arrival * x), job.pods, job.gpus_per_pod, job.high, wait, delay, in_all])
        delays += [float(delay)] if delay is not None else []
        waits_in_all += [float(in_all)] if in_all is not None else []
        if times.whole_at is not None and submitted is not None:
            waits.append((times.whole_at - submitted) * x)
            by_size.setdefault(job.size_class, []).append(waits[-1])
            if job.pods > 1:
                multi += 1
                one_rack += len({rack_of.get(n, n) for n in times.whole_nodes}) == 1
        if done is not None and submitted is not None:
            jcts.append((done - submitted) * x)
    busy = sum(((p.ended or ended) - p.bound) * p.gpus for p in recorder.pods.values() if p.bound is not None)
    stages = stages_of(by_job, recorder.submitted, {keys[job.name]: job.pods for job in jobs})
    window = max(1e-9, ended - started)
    jct = percentiles(jcts)
    whole = {keys[job.name]: gang_times(by_job.get(keys[job.name], []), job.pods, ended).whole_at for job in jobs}
    return {
        "timeline": timeline(recorder, whole, started, ended, x),
        "wait_s_by_gang_size_all": {k: sorted(round(w) for w in v) for k, v in sorted(by_size.items())},
        "gangs_total": len(jobs),
        "gangs_finished": sum(1 for job in jobs if keys[job.name] in recorder.completed),
        "gpu_hours_held_by_incomplete_gangs": round(partial_held * x / 3600, 2),
        "gangs_stuck_partial_over_5min": stuck,
        "wait_s": {**percentiles(waits), "by_gang_size": {k: percentiles(v) for k, v in sorted(by_size.items())}},
        "jct_s": {"mean": jct["mean"], "p95": jct["p95"], "count": jct["count"]},
        "wait_in_all_s": percentiles(waits_in_all),
        "delay_s": percentiles(delays),
        "gpu_utilization": round(busy / (window * settings.nodes * GPUS_PER_NODE), 3),
        "multi_node_gangs_in_one_rack_pct": round(100 * one_rack / multi, 1) if multi else None,
        "trace_seconds_replayed": round(window * x),
        "stages_real_s": {stage: percentiles(values, 2) for stage, values in stages.items()},
        **run_times(by_job, {keys[job.name]: job.duration for job in jobs}, x, started),
        # each gang in arrival order, for where in the run the tail came from (beside the faults' times)
        "gangs": {
            "columns": ["arrival_s", "pods", "gpus_per_pod", "high_priority", "wait_s", "delay_s", "wait_in_all_s"],
            "rows": gangs,
        },
    }


def stages_of(
    by_job: dict[str, list[PodSeen]], submitted: dict[str, float], sizes: dict[str, int]
) -> dict[str, list[float]]:
    """Where a gang's wait goes, in real seconds, for each gang that was whole: the Job submitted to its
    last pod created (the Job controller, the webhook), that to the last gate lifted (gangkeeper's
    controller, queueing for room included; 0 where nothing gates) and that to the gang whole (kube-
    scheduler and the binding; a native or Volcano gang's own wait). And, for gangs of more than one pod,
    their first pod bound to the gang whole: all a gang that starts whole holds short of whole (the
    GPU-hours "held partly" are this spread, real time, times the speedup)."""
    stages: dict[str, list[float]] = {
        "submitted_to_created": [],
        "created_to_ungated": [],
        "ungated_to_whole": [],
        "first_bound_to_whole": [],
    }
    for key, pods in by_job.items():
        size = sizes.get(key, 0)
        first = sorted(pods, key=lambda p: p.created)[:size]
        if not size or len(first) < size or any(p.bound is None or p.ungated is None for p in first):
            continue
        created = max(p.created for p in first)
        ungated = max(max(p.ungated or 0.0, p.created) for p in first)
        whole = max(p.bound or 0.0 for p in first)
        stages["submitted_to_created"].append(max(0.0, created - submitted.get(key, created)))
        stages["created_to_ungated"].append(ungated - created)
        stages["ungated_to_whole"].append(max(0.0, whole - ungated))
        if size > 1:
            stages["first_bound_to_whole"].append(whole - min(p.bound or whole for p in first))
    return stages


def print_table(results: dict[str, dict[str, Any]]) -> None:
    columns = [
        ("GPU-h held partial", lambda r: r["gpu_hours_held_by_incomplete_gangs"]),
        ("stuck >5min", lambda r: r["gangs_stuck_partial_over_5min"]),
        ("finished", lambda r: f"{r['gangs_finished']}/{r['gangs_total']}"),
        ("wait p50 s", lambda r: r["wait_s"]["p50"]),
        ("wait p95 s", lambda r: r["wait_s"]["p95"]),
        ("wait in all p95 s", lambda r: r["wait_in_all_s"]["p95"]),
        ("delay p95 s", lambda r: r["delay_s"]["p95"]),
        ("JCT mean s", lambda r: r["jct_s"]["mean"]),
        ("GPU util", lambda r: r["gpu_utilization"]),
        ("1 rack %", lambda r: r["multi_node_gangs_in_one_rack_pct"]),
        ("preempt", lambda r: r["preemptions"]),
        ("requeue", lambda r: r["requeues"]),
        ("GPU-h lost", lambda r: r["gpu_hours_lost_to_restarts"]),
        ("overrun p95 s", lambda r: r["pod_overrun_s"]["p95"]),
        ("gated at end", lambda r: r["pods_gated_at_end"]),
        ("gk CPU ms/pod", lambda r: r["gangkeeper_cpu_ms_per_pod"]),
        ("gk peak MiB", lambda r: r["gangkeeper_peak_rss_mib"]),
    ]
    print("backend".ljust(13) + "".join(name.rjust(max(10, len(name) + 2)) for name, _ in columns))
    for backend, result in results.items():
        cells = [str(get(result)).rjust(max(10, len(name) + 2)) for name, get in columns]
        print(backend.ljust(13) + "".join(cells))


PLOTTED = (
    ("GPU-hours held by gangs started partly", lambda r: r["gpu_hours_held_by_incomplete_gangs"]),
    ("gangs partly bound over 5 trace minutes", lambda r: r["gangs_stuck_partial_over_5min"]),
    ("wait p50 / p95 (trace s)", lambda r: (r["wait_s"]["p50"] or 0, r["wait_s"]["p95"] or 0)),
    ("job completion time, mean (trace s)", lambda r: r["jct_s"]["mean"] or 0),
    ("GPU utilization", lambda r: r["gpu_utilization"]),
    ("multi-pod gangs in one rack (%)", lambda r: r["multi_node_gangs_in_one_rack_pct"] or 0),
)


def plot(results: dict[str, dict[str, Any]], directory: Path) -> Path:
    """One figure of the headline figures, a panel each, the backends side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(2, 3, figsize=(15, 8))
    names = list(results)
    for axis, (title, value) in zip(axes.flat, PLOTTED, strict=True):
        values = [value(results[name]) for name in names]
        if values and isinstance(values[0], tuple):
            for offset, part, label in ((-0.2, 0, "p50"), (0.2, 1, "p95")):
                axis.bar([i + offset for i in range(len(names))], [v[part] for v in values], width=0.4, label=label)
            axis.legend()
        else:
            axis.bar(range(len(names)), values)
        axis.set_xticks(range(len(names)), names)
        axis.set_title(title, fontsize=10)
    figure.tight_layout()
    path = directory / "replay.png"
    figure.savefig(path, dpi=80)
    plt.close(figure)
    plot_over_time(results, directory, plt)
    return path


def plot_over_time(results: dict[str, dict[str, Any]], directory: Path, plt: Any) -> None:
    """replay-timeline.png: running GPUs and waiting gangs over trace time, a line per backend;
    replay-waits.png: the wait distribution (share of gangs whole within x) per gang size class."""
    figure, (gpus, gangs) = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
    for name, result in results.items():
        line = result.get("timeline") or {}
        gpus.plot(line.get("trace_hours", []), line.get("running_gpus", []), label=name, linewidth=1)
        gangs.plot(line.get("trace_hours", []), line.get("waiting_gangs", []), label=name, linewidth=1)
    gpus.set_ylabel("GPUs of running pods")
    gangs.set_ylabel("gangs waiting (not yet whole)")
    gangs.set_xlabel("trace hours")
    gpus.legend(ncol=len(results))
    figure.tight_layout()
    figure.savefig(directory / "replay-timeline.png", dpi=80)
    plt.close(figure)
    sizes = sorted({size for r in results.values() for size in r.get("wait_s_by_gang_size_all", {})})
    figure, axes = plt.subplots(1, max(1, len(sizes)), figsize=(4 * max(1, len(sizes)), 3.6), squeeze=False)
    for axis, size in zip(axes[0], sizes, strict=False):
        for name, result in results.items():
            waits = [max(1.0, w) for w in result.get("wait_s_by_gang_size_all", {}).get(size, [])]
            if waits:
                axis.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post", label=name)
        axis.set_xscale("log")
        axis.set_title(f"gangs of {size}", fontsize=10)
        axis.set_xlabel("wait until whole (trace s)")
    axes[0][0].set_ylabel("share of gangs")
    axes[0][0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(directory / "replay-waits.png", dpi=80)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="floor,gate,native,volcano,coscheduling")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--rack-size", type=int, default=4)
    parser.add_argument("--hours", type=float, default=12.0, help="trace hours replayed per backend")
    parser.add_argument("--start", default="2017-10-23", help="the slice's first day (YYYY-MM-DD)")
    parser.add_argument("--speedup", type=float, default=120.0, help="trace seconds per real second")
    parser.add_argument("--high-every", type=int, default=10, help="every Nth job in PriorityClass replay-high")
    parser.add_argument(
        "--split", choices=("node", "gpu"), default="node", help="node: ceil(g/8) workers; gpu: 1 per GPU"
    )
    parser.add_argument(
        "--max-job-hours", type=float, default=3.0, help="each job's run time capped at this (trace hours; 0: none)"
    )
    parser.add_argument(
        "--drain-hours",
        type=float,
        default=1.0,
        help="trace hours, past the longest run time, to wait for the last jobs",
    )
    parser.add_argument(
        "--client-qps",
        type=int,
        default=100,
        help="the controller manager's and scheduler's client QPS (as bench/cluster.py): at the default 20 the "
        "Job controller's writes, not scheduling, bound every backend's waits at high speedups",
    )
    for name, (key, default) in COMPRESSED_CLOCKS.items():
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            type=float,
            default=None,
            help=f"the controller's {key}, real s (default {default:g} / --speedup: compressed like the trace)",
        )
    parser.add_argument(
        "--gpus-as",
        choices=("extended", "dra"),
        default="extended",
        help="extended: nvidia.com/gpu on nodes and pods; dra: ResourceSlices of 8 devices per node, a claim per pod",
    )
    parser.add_argument("--no-faults", action="store_true")
    parser.add_argument(
        "--gangkeeper-profiles",
        type=Path,
        default=None,
        help="a directory for py-spy's wall-clock samples of each gangkeeper controller (collapsed stacks)",
    )
    parser.add_argument(
        "--profile-cpu",
        action="store_true",
        help="with --gangkeeper-profiles: samples of the thread holding the GIL (Python's CPU time) of every "
        "gangkeeper process, webhooks too",
    )
    parser.add_argument("--json", default=None)
    parser.add_argument("--plots", type=Path, default=None, help="a directory for replay.png")
    args = parser.parse_args()
    result = replay(args)
    print_table(result["backends"])
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if args.plots:
        print(f"plots: {plot(result['backends'], args.plots)}")


def mix_of(jobs: list[ReplayJob], speedup: float) -> dict[str, Any]:
    return {
        "jobs": len(jobs),
        "pods": sum(j.pods for j in jobs),
        "multi_node_jobs": sum(1 for j in jobs if j.pods > 1),
        "high_priority_jobs": sum(1 for j in jobs if j.high),
        "high_priority_class": f"{HIGH_CLASS} (1000; the rest 0)",
        "topology": f"multi-pod jobs prefer one {ZONE}",
        "gpu_hours_asked": round(sum(j.pods * j.gpus_per_pod * j.duration for j in jobs) * speedup / 3600, 1),
    }


def replay_on(stack: Stack, backends: list[str], jobs: list[ReplayJob], settings: Settings) -> dict[str, Any]:
    """Each backend in turn on the same jobs and a fresh cluster of the same shape."""
    stack.plane.apply(
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": HIGH_CLASS}, "value": 1000}
    )
    # the replay's pods all ask for GPUs, which the system nodes have none of: gangkeeper's own pods
    # may be rescheduled there when a fault restarts them
    stack.cordon_system(False)
    results: dict[str, Any] = {}
    try:
        for backend in backends:
            print(f"{backend}: replaying {len(jobs)} jobs", flush=True)
            results[backend] = run_backend(stack, backend, jobs, settings)
            print(json.dumps({backend: results[backend]}), flush=True)
    finally:
        stack.cordon_system(True)
    return results


def replay(args: argparse.Namespace) -> dict[str, Any]:
    version = os.environ.get("GK_K8S_VERSION") or versions()["K8S_DEFAULT"]
    _, sliced = trace.read(TRACE, args.start, args.hours / 24)
    jobs = replay_jobs(sliced, args.speedup, args.high_every, args.split, args.max_job_hours)
    drain = max((j.duration for j in jobs), default=0.0) + args.drain_hours * 3600 / args.speedup
    settings = Settings(
        args.nodes,
        args.rack_size,
        args.speedup,
        not args.no_faults,
        drain,
        args.gangkeeper_profiles,
        args.gpus_as,
        args.profile_cpu,
    )
    backends = [b for b in args.backends.split(",") if b]
    if args.gpus_as == "dra" and "volcano" in backends:
        # Volcano 1.10 binds pods with claims and allocates nothing; gangkeeper refuses them (devices_unheld)
        print("volcano skipped: 1.10 allocates no DRA devices (its predicates plugin does from v1.12)", flush=True)
        backends.remove("volcano")
    for name, module in (("volcano", volcano), ("coscheduling", coscheduling)):
        if name in backends and module.missing():
            print(f"{name} skipped: {module.missing()}", flush=True)
            backends.remove(name)
    for name, (_, default) in COMPRESSED_CLOCKS.items():
        if getattr(args, name) is None:
            setattr(args, name, round(default / args.speedup, 2))
    mix = mix_of(jobs, args.speedup)
    print(
        f"Kubernetes {version}; {args.hours} trace hours from {args.start} at {args.speedup}x, "
        f"controllers' client QPS {args.client_qps}, gangkeeper's "
        + ", ".join(f"{key} {getattr(args, name):g}" for name, (key, _) in COMPRESSED_CLOCKS.items())
        + f": {mix}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="gk-replay-") as tmp, ExitStack() as running:
        plane = ControlPlane(Path(tmp), kubernetes_version=version, client_qps=args.client_qps)
        missing = plane.missing()
        if missing:
            sys.exit(missing)
        stack = running.enter_context(Stack(plane, overlay="gate").running())
        configure(stack, "".join(f"  {key}: {getattr(args, name):g}\n" for name, (key, _) in COMPRESSED_CLOCKS.items()))
        if "volcano" in backends:
            processes = volcano.start(plane)
            running.callback(volcano.stop, plane, processes)
        if "coscheduling" in backends:
            running.callback(coscheduling.start(plane).stop)
        results = replay_on(stack, backends, jobs, settings)
    keys = (
        "nodes",
        "rack_size",
        "hours",
        "start",
        "speedup",
        "split",
        "gpus_as",
        "max_job_hours",
        "high_every",
        "client_qps",
        *COMPRESSED_CLOCKS,
    )
    return {
        "kubernetes": version,
        "settings": {**{k: getattr(args, k) for k in keys}, "faults": not args.no_faults},
        "mix": {**mix, "high_every": args.high_every},
        "backends": results,
    }


if __name__ == "__main__":
    main()
