"""Admission latency and throughput of `gangkeeper serve`, against a no-op baseline on the same stack.

Starts `gangkeeper serve --noop-endpoint` over HTTPS, then drives it with C keep-alive connections
(one client process each) for a fixed time: first closed-loop (peak requests per second), then paced at
a fixed rate (latency at that load). The same runs against POST /noop, which decodes the review and
allows it, give the ceiling of the transport itself (TLS, gunicorn, Flask, JSON) in the same run.

The load comes from wrk (a C client: Debian package `wrk`) when it is installed, else from Python
client processes, which cost more CPU than the server they measure. Either way the client shares the
machine's two cores with the server, so peak figures are a lower bound of the server alone. wrk cannot
pace exactly; the "1000/s" run gives each connection a think time of concurrency/rate and reports the
rate it achieved. Endpoints alternate over several rounds and the median round is reported, because
how connections spread over gunicorn's workers varies from round to round.

    python bench/admission.py [--seconds 4] [--concurrency 4] [--rate 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import builders as b
from tests.conftest import start_server, stop_server


def job_pod_review() -> bytes:
    pod = b.pod(
        "train-x7k2p",
        labels={"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "0f5f1c1e-1"},
        owner=("batch/v1", "Job", "train"),
        spec=b.pod_spec(
            b.container(
                "4", "8Gi", resources={"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": "1"}}
            )
        ),
    )
    return json.dumps(b.review(pod)).encode()


def client(port: int, ca: str, path: str, body: bytes, seconds: float, rate: float, out: mp.Queue) -> None:
    context = ssl.create_default_context(cafile=ca)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context)
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    errors = 0
    interval = 1.0 / rate if rate else 0.0
    start = time.perf_counter()
    next_send = start
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            break
        if interval:
            if now < next_send:
                time.sleep(next_send - now)
            next_send += interval
        sent = time.perf_counter()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        done = time.perf_counter()
        if response.status != 200 or b'"allowed":true' not in payload:
            errors += 1
        # paced runs measure from the scheduled send time, so queueing delay counts (no coordinated omission)
        latencies.append(done - (next_send - interval if interval else sent))
    conn.close()
    out.put((latencies, errors, time.perf_counter() - start))


def run(port: int, ca: str, path: str, body: bytes, seconds: float, concurrency: int, rate: float) -> dict[str, float]:
    queue: mp.Queue = mp.Queue()
    per_client = rate / concurrency if rate else 0.0
    procs = [
        mp.Process(target=client, args=(port, ca, path, body, seconds, per_client, queue)) for _ in range(concurrency)
    ]
    for proc in procs:
        proc.start()
    results = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
    latencies = sorted(x for r in results for x in r[0])
    elapsed = max(r[2] for r in results)
    quantiles = statistics.quantiles(latencies, n=100)
    return {
        "requests": len(latencies),
        "errors": sum(r[1] for r in results),
        "rps": len(latencies) / elapsed,
        "p50_ms": quantiles[49] * 1000,
        "p99_ms": quantiles[98] * 1000,
    }


_WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("%(body)s", "rb"); wrk.body = f:read("*a"); f:close()
%(delay)s
"""
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def run_wrk(
    port: int, path: str, body_file: Path, seconds: float, concurrency: int, rate: float, service_ms: float = 0.0
) -> dict[str, float]:
    # think time per connection so that concurrency / (think + service time) is about `rate`
    think_ms = max(1000.0 * concurrency / rate - service_ms, 0.0) if rate else 0.0
    delay = f"function delay() return {think_ms:.3f} end" if rate else ""
    script = body_file.with_suffix(".lua")
    script.write_text(_WRK_SCRIPT % {"body": body_file, "delay": delay})
    output = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{concurrency}",
            f"-d{seconds:.0f}s",
            "--latency",
            "-s",
            str(script),
            f"https://127.0.0.1:{port}{path}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    def percentile(label: str) -> float:
        match = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", output, re.M)
        assert match, output
        return float(match.group(1)) * _UNITS[match.group(2)]

    requests = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return {
        "requests": requests,
        "errors": int(errors.group(1)) if errors else 0,
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),  # type: ignore[union-attr]
        "p50_ms": percentile("50"),
        "p99_ms": percentile("99"),
    }


def server_cpu(pid: int) -> float:
    """CPU seconds used by the server process tree (master and workers)."""
    total = 0.0
    for child in [pid, *children(pid)]:
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError):
            pass
    return total


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        for child in map(int, text):
            found += [child, *children(child)]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rate", type=float, default=1000.0, help="paced run, requests per second in total")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="gangkeeper-bench-"))
    # the tests' own start-up (waits for /readyz); later flags override its --workers/--threads
    running = start_server(
        tmp,
        "--backend",
        "volcano",
        "--noop-endpoint",
        "--log-level",
        "warning",
        "--workers",
        str(args.workers),
        "--threads",
        str(args.threads),
    )
    server, ca = running.process, running.ca
    port = int(running.url.rsplit(":", 1)[1])
    try:
        body = job_pod_review()
        body_file = tmp / "review.json"
        body_file.write_bytes(body)
        use_wrk = shutil.which("wrk") is not None
        print(
            f"gangkeeper serve: {args.workers} workers x {args.threads} threads, {os.cpu_count()} cores; "
            f"client: {'wrk' if use_wrk else 'python'}, {args.concurrency} keep-alive connections, "
            f"{args.seconds:.0f}s per run, median of {args.rounds} rounds"
        )
        print(
            f"{'endpoint':<10}{'load':<14}{'requests':>9}{'errors':>7}{'rps':>9}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'server cpu':>12}"
        )
        figures: dict[tuple[str, str], dict[str, float]] = {}
        for label, rate in (("peak", 0.0), (f"{args.rate:.0f}/s", args.rate)):
            rounds: dict[str, list[tuple[dict[str, float], float]]] = {"/noop": [], "/mutate": []}
            for _ in range(args.rounds):
                for endpoint in rounds:
                    cpu_before = server_cpu(server.pid)
                    if use_wrk:
                        service = figures[(endpoint, "peak")]["p50_ms"] / 2 if rate else 0.0
                        result = run_wrk(port, endpoint, body_file, args.seconds, args.concurrency, rate, service)
                    else:
                        result = run(port, ca, endpoint, body, args.seconds, args.concurrency, rate)
                    rounds[endpoint].append((result, (server_cpu(server.pid) - cpu_before) / args.seconds))
            for endpoint, results in rounds.items():
                result, cpu = sorted(results, key=lambda r: r[0]["rps"])[len(results) // 2]
                figures[(endpoint, label)] = result
                print(
                    f"{endpoint:<10}{label:<14}{result['requests']:>9.0f}{result['errors']:>7.0f}"
                    f"{result['rps']:>9.0f}{result['p50_ms']:>9.2f}{result['p99_ms']:>9.2f}"
                    f"{cpu:>10.2f}/s"
                )
        noop, mutate = figures[("/noop", "peak")], figures[("/mutate", "peak")]
        print(
            f"mutation cost at peak: {100 * (1 - mutate['rps'] / noop['rps']):.1f}% below the no-op ceiling "
            f"({mutate['rps']:.0f} vs {noop['rps']:.0f} rps)"
        )
        busy = figures[("/mutate", f"{args.rate:.0f}/s")]
        print(
            f"targets: p99 <= 5 ms at {args.rate:.0f}/s: {busy['p99_ms']:.2f} ms "
            f"({'met' if busy['p99_ms'] <= 5 else 'not met'}); peak >= 3000 rps: {mutate['rps']:.0f} "
            f"({'met' if mutate['rps'] >= 3000 else 'not met'}); mutation <= 30% below no-op: "
            f"{100 * (1 - mutate['rps'] / noop['rps']):.1f}% "
            f"({'met' if mutate['rps'] >= 0.7 * noop['rps'] else 'not met'})"
        )
    finally:
        stop_server(running)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
