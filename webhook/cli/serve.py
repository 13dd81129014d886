"""`gangkeeper serve`: the admission webhook over HTTPS, its workers and their certificates."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from webhook.admission.checks import protection
from webhook.cli import certs, options
from webhook.cli.options import Command
from webhook.gangs.topology import DEFAULT_LEVELS
from webhook.serving.limits import Limits, usable_cpus

if TYPE_CHECKING:
    from webhook.admission.resolve import BackendResolver


def add(command: Command) -> None:
    serve = command("serve", help="run the admission webhook over HTTPS")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8443)
    serve.add_argument("--cert-dir", default="certs", help="ca.crt, tls.crt, tls.key; generated when missing")
    serve.add_argument(
        "--backend",
        choices=options.BACKEND_CHOICES,
        default="auto",
        help="cluster-wide default; a namespace label gangkeeper.io/backend overrides it",
    )
    serve.add_argument("--volcano-scheduler", default="volcano")
    serve.add_argument("--coscheduling-scheduler", default="scheduler-plugins-scheduler")
    serve.add_argument(
        "--topology-levels",
        type=options.topology_levels,
        default=",".join(DEFAULT_LEVELS),
        help="the cluster's node label keys of topology domains, broadest first, comma-separated "
        "(like Kueue's Topology levels): a gang's topology key is checked against them, and they map to "
        "Volcano's HyperNode tiers (%(default)s)",
    )
    serve.add_argument(
        "--volcano-queues",
        default="",
        help="Volcano queues every namespace's gangs may name besides its own default queue, comma-separated; "
        "* for any (a namespace's gangkeeper.io/volcano-queues annotation replaces this list for it)",
    )
    serve.add_argument(
        "--protect-from-disruption",
        type=protection,
        default="true",
        metavar="true|false|DURATION",
        help="gang pods carry karpenter.sh/do-not-disrupt, so Karpenter's consolidation, drift and other "
        "voluntary disruption take no member of a running gang (expiry and kubectl drain still may); a "
        "duration (12h, 90m) is the value instead: Karpenter may disrupt a member once it has run that long",
    )
    serve.add_argument(
        "--volcano-allocates-devices",
        choices=("true", "false"),
        default="false",
        help="volcano backend: this cluster's Volcano allocates DRA claims (v1.12 or later, its predicates "
        "plugin with DynamicResourceAllocationEnable); without it a workload whose pods claim devices is "
        "refused under Volcano, which would bind them without their devices",
    )
    serve.add_argument("--kubeconfig", default=None)
    # Two processes per core: each runs one event loop, and the kernel hashes connections over their
    # sockets; with the API server's handful of kept-alive connections, one process per core often
    # left a core idle (bench/admission.py, 8 connections: 1,400-3,500/s at 1 per core, 3,600-4,700 at 2).
    serve.add_argument(
        "--workers",
        type=int,
        default=2 * usable_cpus(),
        help="serving processes; default twice the CPUs this process may use (its cgroup's quota: the pod's "
        "CPU limit, not the node's CPUs)",
    )
    serve.add_argument("--graceful-timeout", type=float, default=20.0, help="seconds to finish requests at shutdown")
    serve.add_argument("--handshake-timeout", type=float, default=5.0, help="seconds for a client's TLS handshake")
    serve.add_argument("--header-timeout", type=float, default=5.0, help="seconds for a request's headers")
    serve.add_argument("--body-timeout", type=float, default=10.0, help="seconds for a request's body")
    serve.add_argument("--idle-timeout", type=float, default=120.0, help="seconds a kept-alive connection may idle")
    serve.add_argument("--max-in-flight", type=int, default=512, help="requests per process before 429")
    serve.add_argument(
        "--max-connections",
        type=int,
        default=Limits.max_connections,
        help="open connections per process, handshakes included; beyond it the one idle longest is closed "
        "(default: %(default)s)",
    )
    serve.add_argument(
        "--max-waiting-connections",
        type=int,
        default=Limits.max_waiting,
        help="accepted connections per process whose TLS handshake has not started (no ClientHello yet, or "
        "waiting for a turn); beyond it the one waiting longest is closed (default: %(default)s)",
    )
    serve.add_argument("--max-in-flight-mib", type=int, default=24, help="request bytes per process before 429")
    serve.add_argument("--cert-reload-seconds", type=float, default=5.0)
    serve.add_argument("--noop-endpoint", action="store_true", help="serve POST /noop (benchmark baseline)")
    serve.add_argument(
        "--cert-secret",
        default=None,
        help="in-cluster: keep CA and serving certificate in this Secret and inject the CA bundle",
    )
    serve.add_argument("--namespace", default="gangkeeper-system")
    serve.add_argument("--service", default="gangkeeper-webhook")
    serve.add_argument("--san", action="append", help="extra subject alternative name (repeatable)")
    serve.add_argument("--cert-sync-seconds", type=float, default=3600.0)
    serve.add_argument(
        "--drain-seconds",
        type=float,
        default=0.0,
        help="on SIGTERM, report unready and keep serving this long before shutting down",
    )
    serve.add_argument("--log-level", default="info")
    options.add_gang_limit(serve)
    options.add_config(serve)
    serve.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from webhook import certs, logs
    from webhook.admission import forgery
    from webhook.serving.supervisor import Child, check_port, supervise

    _map_large_buffers()  # before the workers are forked: they inherit it
    _metrics_dir()
    logs.setup(args.log_level)
    forgery.set_namespace(args.namespace)  # the controller's account there is the one writer of its marks
    cert_dir = Path(args.cert_dir)
    children: list[Child] = []
    if args.cert_secret:
        # certificates come from the Secret: one process keeps them, the workers wait for the files
        children.append(Child("cert-sync", lambda: _run_cert_sync(args, cert_dir)))
    elif certs.ensure(cert_dir):
        print(f"gangkeeper: wrote development certificates to {cert_dir} (ca.crt, tls.crt, tls.key)", file=sys.stderr)
    try:
        check_port(args.host, args.port)
    except OSError as error:
        print(
            f"gangkeeper serve: cannot listen on {args.host}:{args.port}: {error.strerror}; choose another --port",
            file=sys.stderr,
        )
        return 1
    children.extend(Child(f"worker-{i}", lambda: _run_worker(args, cert_dir)) for i in range(args.workers))
    cluster = (
        args.kubeconfig
        or os.environ.get("KUBECONFIG")
        or ("in-cluster" if os.environ.get("KUBERNETES_SERVICE_HOST") else "none (offline: auto means gate)")
    )
    print(
        f"gangkeeper: serving https://{args.host}:{args.port} with {args.workers} workers; backend {args.backend}; "
        f"cluster: {cluster}",
        file=sys.stderr,
    )
    return supervise(children)


def _metrics_dir() -> Path:
    """The directory prometheus_client's multiprocess mode shares between workers: made if missing and
    emptied, since files left by an earlier container in the same emptyDir would be counted again."""
    directory = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.mkdtemp(prefix="gangkeeper-metrics-"))
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)  # before any process imports prometheus_client
    return directory


def _run_worker(args: argparse.Namespace, cert_dir: Path) -> int:
    """One serving process: its own TLS reloader, namespace watch and discovery, then the loop."""
    import asyncio
    import gc
    import time

    from webhook.admission import metrics
    from webhook.admission.app import create_app
    from webhook.admission.handler import Handler
    from webhook.serving.tls import CertificateReloader
    from webhook.serving.worker import Worker

    reloader = CertificateReloader(cert_dir, args.cert_reload_seconds)
    waited = 0.0
    while True:
        try:
            if reloader.load() is not None:
                break
        except (OSError, ValueError):  # caught between the two files of a write: try again
            pass
        if waited % 10 < 0.2:
            print(f"gangkeeper: waiting for certificates in {cert_dir}", file=sys.stderr)
        time.sleep(0.2)
        waited += 0.2
    reloader.watch()
    metrics.prime()
    # and the certificate files, the API client
    _raise_open_files_limit(args.max_connections + args.max_waiting_connections + 64)
    backend_resolver = resolver(args, wait=True)
    limits = Limits(
        handshake_seconds=args.handshake_timeout,
        header_seconds=args.header_timeout,
        body_seconds=args.body_timeout,
        idle_seconds=args.idle_timeout,
        max_in_flight=args.max_in_flight,
        max_connections=args.max_connections,
        max_waiting=args.max_waiting_connections,
        max_in_flight_bytes=args.max_in_flight_mib * 1024 * 1024,
    )
    worker = Worker(
        lambda environ, start: [],  # replaced below: the app's readiness reads the worker's drain state
        limits,
        reloader,
        args.host,
        args.port,
        drain_seconds=args.drain_seconds,
        graceful_seconds=args.graceful_timeout,
        on_refusal=metrics.count_refusal,
        on_count=metrics.count_connections,
    )
    worker.app = create_app(
        Handler(backend_resolver),
        ready=lambda: reloader.context is not None and not worker.draining,
        noop_endpoint=args.noop_endpoint,
    )
    _event_loop_policy()
    # everything loaded so far lives as long as the process: keep it out of the collector's walks,
    # which otherwise pause the loop for milliseconds on every full collection
    gc.collect()
    gc.freeze()
    # A review allocates a few thousand short-lived objects, nearly all freed by reference counting:
    # collecting every 700 allocations (the default) put collector pauses in the p99 at 1,000/s
    # (bench/admission.py: open-loop p99 6-23 ms at the default, 4-6 ms at this threshold).
    gc.set_threshold(100_000, 50, 100)
    asyncio.run(worker.serve())
    return 0


def _raise_open_files_limit(needed: int) -> None:
    """The soft limit on open files up to the hard one (a container's is often 1,024): each connection
    is a descriptor, and the connection cap must be reachable before the kernel refuses accept()."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(soft, needed) if hard == resource.RLIM_INFINITY else min(hard, max(soft, needed))
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    if wanted < needed:
        print(
            f"gangkeeper: open files limit {wanted} is below what --max-connections and "
            f"--max-waiting-connections need ({needed})",
            file=sys.stderr,
        )


LARGE_BUFFER_BYTES = 64 * 1024
M_MMAP_THRESHOLD = -3  # glibc malloc.h


def _map_large_buffers() -> None:
    """Allocations of 64 KiB and more mapped on their own and unmapped when freed (glibc's mallopt
    M_MMAP_THRESHOLD, which also stops glibc raising the threshold as it goes), unless the environment
    already says (MALLOC_MMAP_THRESHOLD_, which the chart sets: read at the process's start, it also
    covers what the imports allocate).

    uvloop's TLS transport mallocs a 256 KiB read buffer per connection (uvloop/sslproto.pyx,
    SSLProtocol.__cinit__; SSL_READ_MAX_SIZE in includes/consts.pxi). Mapped, an idle connection's
    buffer costs the pages it was read into; glibc's default raises its threshold past 256 KiB at the
    first such buffer freed, after which the buffers come from the heap, where pages other requests
    touched are reused and stay resident: 1,024 silent connections per worker beside clients sending
    oversized bodies took 539 MiB for two workers, 350 MiB with this call, 291 MiB with the
    environment's setting (bench/webhook_memory.py).
    """
    import ctypes
    import ctypes.util

    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    name = ctypes.util.find_library("c")
    if name is None:
        return
    libc = ctypes.CDLL(name)
    mallopt = getattr(libc, "mallopt", None)  # glibc's; musl has none and maps large blocks anyway
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES)


def _event_loop_policy() -> None:
    """uvloop when installed (the image has it): the same asyncio API, about twice the I/O throughput."""
    try:
        import uvloop
    except ImportError:
        return
    uvloop.install()


def _run_cert_sync(args: argparse.Namespace, cert_dir: Path) -> int:
    """Certificates from the Secret before anything serves (workers wait on the files), then upkeep."""
    import time

    sync = certs.cert_sync(args, cert_dir)
    while True:
        try:
            state = sync.sync_once()
            break
        except Exception as error:  # the API may not be reachable yet: keep trying; workers stay closed
            print(f"gangkeeper: certificates not ready yet: {error}", file=sys.stderr)
            time.sleep(2)
    sync.run_forever(args.cert_sync_seconds, state=state)
    return 0


def resolver(args: argparse.Namespace, wait: bool = False) -> BackendResolver:
    """Namespace labels and served APIs for this process (admission/bootstrap.py); with `wait`, only once
    both are known, so a worker never answers from an empty cache (it opens its socket after this returns)."""
    from webhook.admission.bootstrap import WebhookSettings, build_resolver
    from webhook.kube import Api

    api_client = options.api_client(args.kubeconfig)
    api = Api(api_client) if api_client is not None else None
    return build_resolver(WebhookSettings.from_args(args), api, args.namespace, wait)
