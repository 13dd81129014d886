"""The `gangkeeper` command: serve, mutate, certs, controller, explain."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook import __version__
from webhook.backends import DEFAULT_KUBERNETES_VERSION, NAMES
from webhook.backends.native import GENERATIONS
from webhook.controller.autoscaler import AUTOSCALERS, PAUSE_IMAGE
from webhook.controller.headofline import DEFAULT_BOUND_SECONDS
from webhook.controller.queue import DEFAULT_DEPTH, DEFAULT_POLICY, Policy
from webhook.controller.state import DEFAULT_RECOVERY_SECONDS, RELEASE_CONCURRENCY
from webhook.gangs.common import MAX_TIMEOUT_SECONDS
from webhook.gangs.topology import DEFAULT_LEVELS, label_key_problem
from webhook.serving.limits import Limits, usable_cpus

if TYPE_CHECKING:
    from webhook.admission.resolve import BackendResolver

BACKEND_CHOICES = ("auto", *NAMES)
KUBERNETES_VERSIONS = tuple(GENERATIONS)


def _metrics_dir() -> Path:
    """The directory prometheus_client's multiprocess mode shares between workers: made if missing and
    emptied, since files left by an earlier container in the same emptyDir would be counted again."""
    directory = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.mkdtemp(prefix="gangkeeper-metrics-"))
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)  # before any process imports prometheus_client
    return directory


def _serve(args: argparse.Namespace) -> int:
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
    resolver = _resolver(args, wait=True)
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
        Handler(resolver),
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

    sync = _cert_sync(args, cert_dir)
    while True:
        try:
            state = sync.sync_once()
            break
        except Exception as error:  # the API may not be reachable yet: keep trying; workers stay closed
            print(f"gangkeeper: certificates not ready yet: {error}", file=sys.stderr)
            time.sleep(2)
    sync.run_forever(args.cert_sync_seconds, state=state)
    return 0


def _cert_sync(args: argparse.Namespace, cert_dir: Path) -> Any:
    from webhook import certs
    from webhook.certsync import CertSync
    from webhook.kube import Api, client_from

    sans = args.san or certs.service_dns_names(args.service, args.namespace)
    return CertSync(Api(client_from(args.kubeconfig)), args.namespace, args.cert_secret, cert_dir, sans)


def _resolver(args: argparse.Namespace, wait: bool = False) -> BackendResolver:
    """Namespace labels and served APIs for this process; with `wait`, only once both are known, so a
    worker never answers from an empty cache (it opens its socket after this returns)."""
    from webhook.admission.controller_lease import LeaseWatch
    from webhook.admission.resolve import BackendResolver, WatchedNamespaces, WatchedPriorityClasses, WatchedQueues
    from webhook.backends.discovery import DiscoveryCache, fetch_from_cluster
    from webhook.kube import Api

    api_client = _api_client(args.kubeconfig)
    if api_client is None:
        return BackendResolver(
            default=args.backend,
            volcano_scheduler=args.volcano_scheduler,
            coscheduling_scheduler=args.coscheduling_scheduler,
            topology_levels=_levels_of(args),
            volcano_queues=_queues_of(args),
            protect_from_disruption=args.protect_from_disruption == "true",
        )
    api = Api(api_client)
    namespaces = WatchedNamespaces(api)
    namespaces.start()
    discovery = DiscoveryCache(lambda: fetch_from_cluster(api))
    discovery.start()
    lease = LeaseWatch(api, args.namespace)
    lease.start()
    queues = WatchedQueues(api, lambda: discovery.served)
    priority_classes = WatchedPriorityClasses(api)
    priority_classes.start()
    while wait and not (namespaces.synced.wait(10) and discovery.wait(10) and lease.tried.wait(10)):
        print("gangkeeper: waiting for the namespace list, API discovery and the controller's Lease", file=sys.stderr)
    return BackendResolver(
        default=args.backend,
        namespaces=namespaces,
        served=lambda: discovery.served,
        controller=lease.health,
        queues=queues.states,
        priority_classes=priority_classes.names,
        volcano_scheduler=args.volcano_scheduler,
        coscheduling_scheduler=args.coscheduling_scheduler,
        topology_levels=_levels_of(args),
        volcano_queues=_queues_of(args),
        protect_from_disruption=args.protect_from_disruption == "true",
    )


def _queues_of(args: argparse.Namespace) -> frozenset[str]:
    return frozenset(q.strip() for q in str(getattr(args, "volcano_queues", "") or "").split(",") if q.strip())


def _api_client(kubeconfig: str | None) -> Any:
    """A client for the cluster in-cluster or from a kubeconfig; None when there is no cluster."""
    from kubernetes import client, config

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
        config.load_incluster_config()
        return client.ApiClient()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path and Path(path).exists():
        return config.new_client_from_config(config_file=path)
    return None


def _mutate(args: argparse.Namespace) -> int:
    from webhook import manifests
    from webhook.offline import diff, dump, mutate_stream

    try:
        documents = [d.obj for d in manifests.read(args.file, sys.stdin)]
    except manifests.ManifestError as error:
        print(f"gangkeeper mutate: {error}", file=sys.stderr)
        return 2
    result = mutate_stream(
        documents,
        args.backend,
        args.kubernetes_version,
        args.namespace,
        args.scheduler_name,
        _levels_of(args),
        args.volcano_hypernodes,
    )
    for line in result.summary:
        print(line, file=sys.stderr)
    for warning in result.warnings:
        print(f"Warning: {warning}", file=sys.stderr)
    for note in result.notes:
        print(f"Note: {note}", file=sys.stderr)
    for denial in result.denials:
        print(
            f'Error from server: admission webhook "mutate.gangkeeper.io" denied the request: {denial}', file=sys.stderr
        )
    sys.stdout.write(diff(result) if args.diff else dump(result.objects))
    return 1 if result.denials else 0


def _certs(args: argparse.Namespace) -> int:
    from webhook import certs

    if args.secret:
        args.cert_secret = args.secret
        state = _cert_sync(args, Path(args.cert_dir)).sync_once()
        print(
            f"certificates in Secret {args.namespace}/{args.secret} are current; CA bundle has "
            f"{state.bundle.count(b'BEGIN CERTIFICATE')} CA(s)"
        )
        return 0
    sans = args.san or certs.default_sans()
    certs.write(certs.generate(sans), Path(args.cert_dir))
    print(f"wrote {args.cert_dir}/ca.crt, tls.crt, tls.key for {', '.join(sans)}")
    return 0


def _release_all(args: argparse.Namespace) -> int:
    from webhook.controller.uninstall import release_all
    from webhook.kube import Api, client_from

    done = release_all(Api(client_from(args.kubeconfig, args.server)))
    print(f"gangkeeper release-all: {len(done.gates)} gates lifted, {len(done.resumed)} workloads resumed")
    for what in done.failed:
        print(f"  not released: {what}", file=sys.stderr)
    return 1 if done.failed else 0


def _topology_levels(text: str) -> str:
    """Comma-separated node label keys, each valid and named once."""
    levels = [level.strip() for level in text.split(",") if level.strip()]
    if not levels or len(levels) > 16:
        raise argparse.ArgumentTypeError("expected 1 to 16 node label keys, comma-separated")
    for level in levels:
        problem = label_key_problem(level)
        if problem is not None:
            raise argparse.ArgumentTypeError(f"{level!r} is not a node label key: {problem}")
    if len(set(levels)) != len(levels):
        raise argparse.ArgumentTypeError("each level once")
    return ",".join(levels)


def _levels_of(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(str(getattr(args, "topology_levels", None) or ",".join(DEFAULT_LEVELS)).split(","))


def _recovery_seconds(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_TIMEOUT_SECONDS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_TIMEOUT_SECONDS} seconds")
    return value


def _controller(args: argparse.Namespace) -> int:
    from webhook import logs
    from webhook.controller.run import run
    from webhook.kube import client_from

    logs.setup(args.log_level)
    run(
        client_from(args.kubeconfig, args.server),
        args.namespace,
        args.interval,
        args.native_version,
        args.metrics_port,
        max_attempts=args.max_attempts,
        recovery_seconds=args.recovery_timeout,
        queue_policy=args.queue_policy,
        queue_depth=args.queue_depth,
        head_of_line_seconds=args.head_of_line_seconds,
        volcano_scheduler=args.volcano_scheduler,
        release_concurrency=args.release_concurrency,
        autoscaler=args.autoscaler,
        placeholder_image=args.placeholder_image,
    )
    return 0


def _explain(args: argparse.Namespace) -> int:
    from webhook.controller.explain import UnknownGang, explain, explain_from_gang
    from webhook.kube import Api, ApiError, client_from

    namespace, _, reference = args.gang.partition("/")
    if not reference:
        print("gangkeeper explain: expected NAMESPACE/GANG, NAMESPACE/KIND/NAME or NAMESPACE/NAME", file=sys.stderr)
        return 2
    api = Api(client_from(args.kubeconfig, args.server))
    gang = _gang_named(api, namespace, reference)
    if gang is None:
        return 1
    try:
        try:
            print(explain(api, namespace, gang, args.queue_policy))
        except ApiError as error:
            if error.status != 403:
                raise
            # read access to one namespace only (a tenant): what the Gang object says
            print(explain_from_gang(api, namespace, gang))
    except UnknownGang as unknown:
        print(f"gangkeeper explain: {unknown}", file=sys.stderr)
        return 1
    return 0


def _gang_named(api: Any, namespace: str, reference: str) -> str | None:
    """The gang a user means by what they applied (`Job/train`, `train`) or by its name; None, with a
    line on stderr, when the reference is ambiguous."""
    from webhook.controller.explain import matching_gangs
    from webhook.controller.gangobject import GANGS
    from webhook.kube import ApiError

    try:
        gangs = api.list(GANGS.path(namespace)).get("items") or []
    except ApiError as error:
        if error.status not in (403, 404):
            raise
        return reference  # no Gang objects to read: the name as given
    found = matching_gangs(reference, gangs)
    if len(found) > 1:
        print(
            f"gangkeeper explain: {reference} names {len(found)} gangs in {namespace}: "
            + ", ".join(found)
            + f"; give one: gangkeeper explain {namespace}/{found[0]}",
            file=sys.stderr,
        )
        return None
    return found[0] if found else reference


def _default_trace() -> Path:
    return Path(__file__).resolve().parents[1] / "data" / "traces" / "philly-2017-10-23-week.csv"


def _simulate(args: argparse.Namespace) -> int:
    from webhook import simulation
    from webhook.simulation.engine import ClusterShape

    try:
        policies = simulation.parse_policies(args.policies)
    except ValueError as error:
        print(f"gangkeeper simulate: {error}", file=sys.stderr)
        return 2
    if not Path(args.trace).is_file():
        print(f"gangkeeper simulate: no trace at {args.trace}", file=sys.stderr)
        return 2
    topologies = tuple(t.strip() for t in args.topology.split(",") if t.strip())
    if not topologies or any(t not in ("none", "required", "preferred") for t in topologies):
        print("gangkeeper simulate: --topology: a list of none, required, preferred", file=sys.stderr)
        return 2
    settings = simulation.Settings(
        trace=Path(args.trace),
        start=args.start,
        days=args.days,
        shape=ClusterShape(nodes=args.nodes, gpus_per_node=args.gpus_per_node, nodes_per_rack=max(0, args.rack_size)),
        topologies=topologies,
        split=args.split,
        policies=policies,
        orderings=args.orderings,
        seed=args.seed,
        estimates=args.estimates == "trace",
        depth=args.queue_depth,
        workers=args.workers,
    )
    print(simulation.main(settings, Path(args.plots) if args.plots else None, Path(args.json) if args.json else None))
    return 0


class _Defaults(argparse.HelpFormatter):
    """Every option's default in --help, with or without a help text of its own."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text
        if shown and action.option_strings:
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gangkeeper",
        description="All-or-nothing scheduling for Kubernetes workloads, without rewriting manifests.",
    )
    parser.add_argument("--version", action="version", version=f"gangkeeper {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, **options: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, formatter_class=_Defaults, **options)

    serve = command("serve", help="run the admission webhook over HTTPS")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8443)
    serve.add_argument("--cert-dir", default="certs", help="ca.crt, tls.crt, tls.key; generated when missing")
    serve.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        default="auto",
        help="cluster-wide default; a namespace label gangkeeper.io/backend overrides it",
    )
    serve.add_argument("--volcano-scheduler", default="volcano")
    serve.add_argument("--coscheduling-scheduler", default="scheduler-plugins-scheduler")
    serve.add_argument(
        "--topology-levels",
        type=_topology_levels,
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
        choices=("true", "false"),
        default="true",
        help="gang pods carry karpenter.sh/do-not-disrupt, so Karpenter's consolidation, drift and other "
        "voluntary disruption take no member of a running gang (expiry and kubectl drain still may)",
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
        "waiting for a turn); beyond it a new one is closed (default: %(default)s)",
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
    _add_gang_limit(serve)
    _add_config(serve)
    serve.set_defaults(func=_serve)

    mutate = command("mutate", help="show what admission does to a YAML stream, offline")
    mutate.add_argument(
        "-f",
        "--file",
        required=True,
        action="append",
        help="as kubectl's: a YAML or JSON file, a directory of them, or - for standard input (repeatable)",
    )
    mutate.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        default="auto",
        help="as the webhook's --backend; offline, auto means gate. A Namespace in the stream labelled "
        "gangkeeper.io/backend decides for its objects",
    )
    mutate.add_argument(
        "--kubernetes-version",
        choices=KUBERNETES_VERSIONS,
        default=DEFAULT_KUBERNETES_VERSION,
        help="native backend: which scheduling.k8s.io generation to produce",
    )
    mutate.add_argument("--namespace", default="default", help="namespace of objects that name none")
    mutate.add_argument("--scheduler-name", default=None, help="schedulerName the backend injects")
    mutate.add_argument("--diff", action="store_true", help="print a unified diff instead of the objects")
    mutate.add_argument(
        "--topology-levels",
        type=_topology_levels,
        default=None,
        help="the cluster's topology levels, broadest first (its Configuration's topologyLevels)",
    )
    mutate.add_argument(
        "--volcano-hypernodes",
        action="store_true",
        help="volcano backend: preview for a Volcano that serves HyperNodes (topology.volcano.sh, 1.11+)",
    )
    _add_config(mutate)
    _add_gang_limit(mutate)
    mutate.set_defaults(func=_mutate)

    controller = command("controller", help="run the controller: group objects and gang release")
    controller.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    controller.add_argument("--server", default=None, help="API server URL without credentials (tests)")
    controller.add_argument("--namespace", default="gangkeeper-system", help="where the leader Lease lives")
    controller.add_argument(
        "--interval",
        type=float,
        default=10.0,
        help="longest wait between passes when nothing changes and no gang's deadline falls due (seconds)",
    )
    controller.add_argument(
        "--native-version",
        choices=("auto", *KUBERNETES_VERSIONS),
        default="auto",
        help="scheduling.k8s.io generation of native gangs; auto: the newest the API server serves (%(default)s)",
    )
    controller.add_argument("--metrics-port", type=int, default=8080)
    controller.add_argument(
        "--release-concurrency",
        type=int,
        default=RELEASE_CONCURRENCY,
        help="release PATCHes sent side by side (%(default)s; the API client's pool holds 96 connections)",
    )
    controller.add_argument(
        "--volcano-scheduler",
        default="volcano",
        help="the schedulerName the webhook gives Volcano's pods (schedulerNames.volcano): a LeaderWorkerSet "
        "whose templates carry it gets its PodGroups ahead of its pods",
    )
    controller.add_argument(
        "--max-attempts", type=int, default=5, help="times a timed-out gang is requeued before it gives up"
    )
    controller.add_argument(
        "--recovery-timeout",
        type=_recovery_seconds,
        default=DEFAULT_RECOVERY_SECONDS,
        help="seconds a gang that ran whole may run short of a member before it is requeued whole "
        "(a gang's gangkeeper.io/recovery-timeout-seconds wins; %(default)s)",
    )
    controller.add_argument(
        "--queue-policy",
        choices=[p.value for p in Policy],
        default=DEFAULT_POLICY.value,
        help="how waiting gate gangs take turns: backfill (the head's reservation is never delayed), fifo, "
        "or first-fit (see `gangkeeper simulate`)",
    )
    controller.add_argument(
        "--queue-depth", type=int, default=DEFAULT_DEPTH, help="backfill: gangs at the front that hold a reservation"
    )
    controller.add_argument(
        "--head-of-line-seconds",
        type=float,
        default=DEFAULT_BOUND_SECONDS,
        help="a waiting gang holds the gangs behind it back for at most this long at a time, then yields for as "
        "long (0: no bound)",
    )
    controller.add_argument(
        "--autoscaler",
        choices=AUTOSCALERS,
        default="auto",
        help="what adds nodes for Unschedulable pods: a gate gang that waits on capacity gets placeholder pods "
        "it can see; auto: Karpenter when its NodePools exist",
    )
    controller.add_argument(
        "--placeholder-image", default=PAUSE_IMAGE, help="the image of placeholder pods (they only hold room)"
    )
    controller.add_argument("--log-level", default="info")
    _add_gang_limit(controller)
    _add_config(controller)
    controller.set_defaults(func=_controller)

    release = sub.add_parser(
        "release-all",
        formatter_class=_Defaults,
        help="before uninstalling: lift every gate gangkeeper set and resume what it suspended",
    )
    release.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    release.add_argument("--server", default=None, help="API server URL without credentials (tests)")
    release.set_defaults(func=_release_all)

    explain = command("explain", help="why a gang waits: members, capacity, node by node")
    explain.add_argument(
        "gang",
        help="NAMESPACE/GANG (the pods' gangkeeper.io/group label), or what you applied: NAMESPACE/KIND/NAME "
        "(Job/train, job/train) or NAMESPACE/NAME",
    )
    explain.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    explain.add_argument("--server", default=None)
    explain.add_argument(
        "--queue-policy", choices=[p.value for p in Policy], default=DEFAULT_POLICY.value, help="the controller's"
    )
    explain.set_defaults(func=_explain)

    simulate = sub.add_parser(
        "simulate",
        formatter_class=_Defaults,
        help="replay a GPU-cluster trace: the default scheduler vs gangkeeper's queue policies",
    )
    simulate.add_argument("--trace", default=str(_default_trace()), help="CSV: timestamp,duration,num_gpus,...")
    simulate.add_argument("--start", default=None, help="first day of a slice, YYYY-MM-DD (default: all)")
    simulate.add_argument("--days", type=float, default=None, help="length of the slice in days")
    simulate.add_argument("--nodes", type=int, default=64)
    simulate.add_argument("--gpus-per-node", type=int, default=8)
    simulate.add_argument(
        "--split", choices=("node", "gpu"), default="node", help="node: ceil(g/8) workers (headline); gpu: 1 per pod"
    )
    simulate.add_argument("--policies", default="default,fifo,first-fit,backfill")
    simulate.add_argument("--orderings", type=int, default=3, help="pod orderings tried for the default scheduler")
    simulate.add_argument("--seed", type=int, default=1)
    simulate.add_argument(
        "--estimates", choices=("trace", "none"), default="trace", help="what backfill knows of run times"
    )
    simulate.add_argument("--queue-depth", type=int, default=DEFAULT_DEPTH, help="backfill reservations")
    simulate.add_argument(
        "--workers", type=int, default=os.cpu_count() or 1, help="replays run side by side (default: one per CPU)"
    )
    simulate.add_argument("--rack-size", type=int, default=0, help="nodes per rack (0: no racks)")
    simulate.add_argument(
        "--topology",
        default="none,required,preferred",
        help="with racks, gang policies run as listed: none, required or preferred to keep each gang in one rack",
    )
    simulate.add_argument("--plots", default=None, help="directory for PNG plots")
    simulate.add_argument("--json", default=None, help="write the figures as JSON here")
    simulate.set_defaults(func=_simulate)

    cert = command("certs", help="generate a CA and serving certificate")
    cert.add_argument("--cert-dir", default="certs")
    cert.add_argument("--san", action="append", help="subject alternative name (repeatable)")
    cert.add_argument("--secret", default=None, help="in-cluster: the Secret to create or rotate")
    cert.add_argument("--namespace", default="gangkeeper-system")
    cert.add_argument("--service", default="gangkeeper-webhook")
    cert.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    cert.set_defaults(func=_certs)
    for choice in sub.choices.values():  # argparse shows nothing for an option without help text
        for action in choice._actions:
            if action.help is None and action.option_strings and action.default not in (None, False):
                action.help = "(default: %(default)s)"
    return parser


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _add_config(parser: argparse.ArgumentParser) -> None:
    from webhook import config

    parser.add_argument(
        config.FLAG,
        default=None,
        metavar="FILE",
        help=f"a {config.KIND} ({config.API_VERSION}) file; flags given on the command line win over it",
    )


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(found.choices)


def _add_gang_limit(parser: argparse.ArgumentParser) -> None:
    from webhook.gangs import limits

    def gang_limit(text: str) -> int:
        value = _positive_int(text)
        if value > limits.CEILING:
            raise argparse.ArgumentTypeError(
                f"must be at most {limits.CEILING}, not {value} (a Gang object records each released pod)"
            )
        return value

    parser.add_argument(
        limits.FLAG,
        type=gang_limit,
        default=limits.DEFAULT_MAX_GANG_PODS,
        help="pods a workload may have; larger ones are refused at admission and left by the controller "
        "(default: %(default)s)",
    )


def main(argv: list[str] | None = None) -> int:
    from webhook import config

    parser = build_parser()
    try:
        argv = config.expand(sys.argv[1:] if argv is None else argv, _commands(parser))
    except config.ConfigError as error:
        print(f"gangkeeper: {error}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if getattr(args, "max_gang_pods", None) is not None:
        from webhook.gangs import limits

        limits.set_max_gang_pods(args.max_gang_pods)
    try:
        return int(args.func(args))
    except Exception as error:
        # a missing kubeconfig or an API refusal is the user's to fix, not a traceback to read
        from kubernetes.config import ConfigException

        from webhook.kube import ApiError

        if isinstance(error, ConfigException | FileNotFoundError) and args.command in (
            "explain",
            "certs",
            "controller",
            "release-all",
        ):
            print(
                f"gangkeeper {args.command}: no cluster to talk to ({error}); set KUBECONFIG or --kubeconfig",
                file=sys.stderr,
            )
            return 2
        if isinstance(error, ApiError) and error.unreachable:
            print(f"gangkeeper {args.command}: {error.unreachable}", file=sys.stderr)
            return 2
        if isinstance(error, ApiError):
            hint = " (explain lists pods and nodes cluster-wide)" if error.status == 403 else ""
            print(f"gangkeeper {args.command}: the API server refused: {error}{hint}", file=sys.stderr)
            return 1
        raise
