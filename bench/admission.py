"""Admission throughput and latency of `gangkeeper serve` under a client shaped like kube-apiserver.

The load comes from bench/apiclient (Go's net/http, as kube-apiserver's webhook client: HTTP/1.1, a
connection per concurrent call, 25 idle kept, a 10 s timeout per call). For each level it drives
POST /mutate with a Job's pod as the API server sends it, then two baselines in the same run: POST /noop,
a no-op Flask webhook (decode the review, allow it) on the same server, TLS and processes; and the
issue's own baseline, the same no-op Flask app under granian (bench/noop_wsgi.py: Rust HTTP and TLS, one
worker process, its defaults), on gangkeeper's certificate. /mutate itself is answered without Flask's
request machinery (webhook/admission/app.py, AdmissionFirst).

- closed loop at 8, 64 and 256 connections (peak requests per second);
- open loop at --rate requests per second, --open-repeat times (the median p99 judged), latency from the
  scheduled send (no coordinated omission), with where the slow calls waited;
- a new connection per request (a TLS handshake each);
- a burst: a 1,000-pod Job's pod reviews as the Job controller sends them (500 per sync in slow-start
  batches of 1, 2, 4, ..., each batch side by side), the time to the last answer;
- 8 connections while 32 clients trickle their headers a byte at a time;
- connection churn: a new TLS connection per call for --churn-seconds, each worker's RSS before and
  after (a closed connection must leave nothing behind).

The client shares the machine's cores with the server, so peak figures are a lower bound of the server
alone. Needs Go (Debian: apt-get install golang-go).

    python bench/admission.py [--seconds 5] [--rate 1000] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import builders as b
from tests.conftest import free_port, start_server, stop_server

CLIENT_SOURCE = Path(__file__).parent / "apiclient"


def job_pod_review() -> bytes:
    """A Job's pod as kube-apiserver sends it to a mutating webhook: made by the Job controller
    (pkg/controller/job: its labels, finalizer and owner), defaulted (pkg/apis/core/v1/defaults.go) and
    through the built-in mutating plugins that run before webhooks (plugin/pkg/admission: ServiceAccount's
    projected token volume, DefaultTolerationSeconds' two tolerations, Priority's fields). About 3 KB,
    where a hand-written minimal pod is under 1 KB: decoding and every walk cost by size."""
    uid = "0f5f1c1e-7d7b-4f53-9d0e-6c2a1b9e5a31"
    job_labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "train",
        "controller-uid": uid,
        "job-name": "train",
    }
    volume = "kube-api-access-x7k2p"
    container = {
        **b.container(
            "4", "8Gi", resources={"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": "1"}}
        ),
        "command": ["python", "train.py", "--epochs", "10"],
        "env": [{"name": "WORLD_SIZE", "value": "8"}, {"name": "MASTER_PORT", "value": "29500"}],
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"name": volume, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ],
    }
    token = [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {
            "downwardAPI": {
                "items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]
            }
        },
    ]
    spec = b.pod_spec(
        container,
        volumes=[{"name": volume, "projected": {"sources": token, "defaultMode": 420}}],
        restartPolicy="Never",
        terminationGracePeriodSeconds=30,
        dnsPolicy="ClusterFirst",
        serviceAccountName="default",
        serviceAccount="default",
        securityContext={},
        schedulerName="default-scheduler",
        tolerations=[
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ],
        priority=0,
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
    )
    pod = b.pod("", labels=job_labels, owner=("batch/v1", "Job", "train"), spec=spec)
    pod["metadata"].pop("name")
    pod["metadata"].update(generateName="train-", finalizers=["batch.kubernetes.io/job-tracking"])
    pod["metadata"]["ownerReferences"][0]["uid"] = uid
    pod["status"] = {}
    document = b.review(pod)
    document["request"]["userInfo"] = {
        "username": "system:serviceaccount:kube-system:job-controller",
        "uid": "5b1c2a8e-3f0d-4c6e-9a57-2d8f1e4b7c90",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
    }
    document["request"]["options"] = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    return json.dumps(document).encode()


def build_client(out: Path) -> Path:
    if shutil.which("go") is None:
        raise SystemExit("bench/admission.py needs Go for its kube-apiserver-shaped client: apt-get install golang-go")
    binary = out / "apiclient"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOCACHE": str(out / "gocache"), "GOPATH": str(out / "gopath")}
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=CLIENT_SOURCE, check=True, env=env)
    return binary


def drive(client: Path, url: str, ca: str, body: Path, mode: str, seconds: float, **flags: float) -> dict[str, float]:
    command = [str(client), f"-url={url}", f"-ca={ca}", f"-body={body}", f"-mode={mode}", f"-seconds={seconds}"]
    command += [f"-{name}={value:g}" for name, value in flags.items()]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output)  # type: ignore[no-any-return]


def settle(pid: int, limit: float = 60.0) -> None:
    """Wait until the server is idle: beyond 25 connections the client dials a new one per call, and
    dials it abandoned still queue at the server, whose handshakes would be billed to the next level."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = server_cpu(pid)
        time.sleep(0.5)
        if server_cpu(pid) - before < 0.03:
            return


def server_cpu(pid: int) -> float:
    """CPU seconds used by the server's process tree (master and workers)."""
    total = 0.0
    for process in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError):
            pass
    return total


def descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in map(int, (task / "children").read_text().split()):
            found += [child, *descendants(child)]
    return found


def start_granian(cert_dir: Path, ca: str) -> tuple[subprocess.Popen[bytes], str]:
    """The no-op Flask webhook under granian (bench/noop_wsgi.py), ready to answer."""
    import requests

    port = free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "granian", "--interface", "wsgi", "--host", "127.0.0.1", "--port", str(port)),
            *("--ssl-certificate", str(cert_dir / "tls.crt"), "--ssl-keyfile", str(cert_dir / "tls.key")),
            *("--log-level", "warning", "--no-ws", "bench.noop_wsgi:app"),
        ],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"https://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "/readyz", verify=ca, timeout=2).status_code == 200:
                return process, url
        except (requests.ConnectionError, OSError):
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("granian did not become ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="open loop, requests per second")
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1), help="as serve's default")
    parser.add_argument("--open-repeat", type=int, default=3, help="open-loop runs, the median p99 judged")
    parser.add_argument("--churn-seconds", type=float, default=90.0, help="new connections for this long (0: skip)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="gangkeeper-bench-"))
    client = build_client(tmp)
    body = tmp / "review.json"
    body.write_bytes(job_pod_review())
    running = start_server(
        tmp, "--backend", "volcano", "--noop-endpoint", "--log-level", "warning", "--workers", str(args.workers)
    )
    granian, granian_url = start_granian(running.cert_dir, running.ca)
    # endpoint -> (its URL, the process whose CPU it costs)
    targets = {
        "/mutate": (running.url + "/mutate", running.process.pid),
        "/noop": (running.url + "/noop", running.process.pid),
        "granian": (granian_url + "/noop", granian.pid),
    }
    levels: list[tuple[str, str, dict[str, float]]] = [
        ("closed 8", "closed", {"conns": 8}),
        ("closed 64", "closed", {"conns": 64}),
        ("closed 256", "closed", {"conns": 256}),
        # the open loop's tail varies run to run (which worker the client's hottest connection lands
        # on): its verdict is the median of several runs, mutate and no-op alternating
        *((f"open {args.rate:.0f}/s #{n + 1}", "open", {"rate": args.rate}) for n in range(args.open_repeat)),
        ("new conn x8", "newconn", {"conns": 8}),
        ("burst 1000", "burst", {"count": 1000}),
        ("8 + 32 slow", "trickle", {"conns": 8, "trickle": 32}),
    ]
    print(
        f"gangkeeper serve: {args.workers} worker processes, {os.cpu_count()} cores; client: Go net/http "
        f"(HTTP/1.1, 25 idle, 10 s timeout) on the same machine; {args.seconds:g} s per level"
    )
    header = f"{'endpoint':<9}{'level':<14}{'requests':>9}{'rps':>8}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>9}"
    print(header + f"{'>1s':>5}{'errors':>7}{'cpu/s':>7}")
    figures: dict[tuple[str, str], dict[str, float]] = {}
    try:
        for label, mode, flags in levels:
            for endpoint, (url, pid) in targets.items():
                settle(pid)
                before = server_cpu(pid)
                result = drive(client, url, running.ca, body, mode, args.seconds, **flags)
                cpu = (server_cpu(pid) - before) / args.seconds
                figures[(endpoint, label)] = result
                print(
                    f"{endpoint:<9}{label:<14}{result['requests']:>9}{result['rps']:>8.0f}{result['p50_ms']:>8.2f}"
                    f"{result['p99_ms']:>8.2f}{result['max_ms']:>9.1f}{result['over_1s']:>5}{result['errors']:>7}"
                    f"{cpu:>7.2f}"
                )
                if mode == "open":
                    # where the tail is: calls waiting for a connection, or the client behind its schedule
                    print(
                        f"{'':<23}connections dialed {result['dials']}, waiting for one p99 "
                        f"{result['conn_wait_p99_ms']:.2f} ms, sender behind by at most "
                        f"{result['send_lag_max_ms']:.1f} ms, calls over 10 ms per tenth of the run "
                        f"{result['slow_by_tenth']}"
                    )
                for sample in result.get("error_sample") or []:
                    print(f"           error: {sample}")
        churn = None
        if args.churn_seconds > 0:
            settle(running.process.pid)
            before_rss = worker_rss(running.process.pid)
            result = drive(client, running.url + "/mutate", running.ca, body, "newconn", args.churn_seconds, conns=8)
            settle(running.process.pid)
            churn = (result, before_rss, worker_rss(running.process.pid))
    finally:
        stop_server(running)
        granian.terminate()
        granian.wait(timeout=30)
    closed = [label for label, mode, _ in levels if mode == "closed"]
    peak_mutate = max(figures[("/mutate", label)]["rps"] for label in closed)
    peak_noop = max(figures[("/noop", label)]["rps"] for label in closed)
    peak_granian = max(figures[("granian", label)]["rps"] for label in closed)
    opens = [label for label, mode, _ in levels if mode == "open"]
    open_p99 = statistics.median(figures[("/mutate", label)]["p99_ms"] for label in opens)
    noop_p99 = statistics.median(figures[("/noop", label)]["p99_ms"] for label in opens)
    granian_p99 = statistics.median(figures[("granian", label)]["p99_ms"] for label in opens)

    def failures(endpoint: str) -> int:
        return sum(r["errors"] + r["over_1s"] for (e, _), r in figures.items() if e == endpoint)

    worst_open = max(figures[("/mutate", label)]["p99_ms"] for label in opens)
    print()
    verdict = {True: "met", False: "NOT met"}
    print(
        f"errors and requests over 1 s, all levels: /mutate {failures('/mutate')} (target 0: "
        f"{verdict[not failures('/mutate')]}), same-server no-op {failures('/noop')}, "
        f"granian no-op {failures('granian')}"
    )
    print(
        f"p99 at {args.rate:.0f}/s open loop, median of {len(opens)} runs: {open_p99:.2f} ms, no-op {noop_p99:.2f} ms, "
        f"granian no-op {granian_p99:.2f} ms (target <= 10 ms: {verdict[open_p99 <= 10]}); the worst run "
        f"{worst_open:.2f} ms ({verdict[worst_open <= 10]} in every run)"
    )
    for baseline, name in (("/noop", "same-server no-op"), ("granian", "granian no-op")):
        p99_64 = figures[("/mutate", "closed 64")]["p99_ms"] / figures[(baseline, "closed 64")]["p99_ms"]
        print(f"p99 at 64 connections, mutate / {name}: {p99_64:.2f} (target <= 2: {verdict[p99_64 <= 2]})")
    for peak, name in ((peak_noop, "same-server no-op"), (peak_granian, "granian no-op")):
        print(
            f"peak: mutate {peak_mutate:.0f}/s, {name} {peak:.0f}/s, ratio {peak_mutate / peak:.2f} "
            f"(target >= 0.8: {verdict[peak_mutate >= 0.8 * peak]})"
        )
    last = {e: 1000 * figures[(e, "burst 1000")]["requests"] / figures[(e, "burst 1000")]["rps"] for e in targets}
    print(
        f"a 1,000-pod Job's burst, time to the last answer: mutate {last['/mutate']:.0f} ms, same-server no-op "
        f"{last['/noop']:.0f} ms ({last['/mutate'] / last['/noop']:.2f}x), granian no-op {last['granian']:.0f} ms "
        f"({last['/mutate'] / last['granian']:.2f}x)"
    )
    if churn is not None:
        result, before_rss, after_rss = churn
        growth = max(after_rss[pid] - before_rss.get(pid, after_rss[pid]) for pid in after_rss)
        per_worker = ", ".join(f"{before_rss.get(pid, 0):.0f} -> {after_rss[pid]:.0f}" for pid in sorted(after_rss))
        print(
            f"churn: {result['requests']} new TLS connections ({result['errors']} errors); "
            f"worker RSS MiB {per_worker}; largest growth {growth:.1f} MiB "
            f"(target flat, < 16 MiB: {verdict[growth < 16]})"
        )
    return 0


def worker_rss(pid: int) -> dict[int, float]:
    """Resident MiB of each serving process under the master."""
    found = {}
    for child in descendants(pid):
        try:
            status = Path(f"/proc/{child}/status").read_text()
        except OSError:
            continue
        kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
        found[child] = kib / 1024
    return found


if __name__ == "__main__":
    raise SystemExit(main())
