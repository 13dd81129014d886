"""One command for a local cluster with gangkeeper in it: the test bed, as a demo.

    sudo .venv/bin/python hack/cluster/up.py [--kubernetes 1.36.3] [--overlay gate] [--nodes 3] [--lws] [--jobset]
        [--karpenter] [--multikueue]

Starts the real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK)
from hack/cluster/build.sh's binaries, deploys gangkeeper with `kubectl apply -k manifests/overlays/OVERLAY`,
adds fake nodes, writes WORKDIR/env (KUBECONFIG, and kubectl and the kubectl-gangkeeper plugin on the
PATH: `. WORKDIR/env` in another shell) once it is up, and runs until Ctrl-C, SIGTERM or SIGHUP, then removes
everything.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.realcluster import operators
from tests.realcluster.controlplane import ControlPlane, versions
from tests.realcluster.stack import Stack

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def stop_on_the_first_signal() -> None:
    """SIGTERM, Ctrl-C or SIGHUP (the terminal of `make cluster &` closed) raises SystemExit once; later ones
    are ignored, so they cannot cut the removal short. `kill %1` sends SIGTERM twice: to the job's process
    group, then make forwards its own to this process (GNU make's fatal_error_signal), 0.1 ms apart; a
    second SystemExit in the `finally` left WORKDIR/env behind. The components run in sessions of their own
    (ControlPlane), so a signal this process dies of unhandled leaves them running."""

    def stop(signum: int, frame: object) -> None:
        for name in STOP_SIGNALS:
            signal.signal(name, signal.SIG_IGN)
        raise SystemExit(0)

    for name in STOP_SIGNALS:
        signal.signal(name, stop)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubernetes", default=versions()["K8S_DEFAULT"], help="version built (default %(default)s)")
    parser.add_argument("--overlay", default="gate", help="manifests/overlays/ to apply (default %(default)s)")
    parser.add_argument("--nodes", type=int, default=3, help="fake 8-CPU nodes (default %(default)s)")
    parser.add_argument("--lws", action="store_true", help="run the LeaderWorkerSet operator")
    parser.add_argument("--jobset", action="store_true", help="run the JobSet operator")
    parser.add_argument(
        "--karpenter",
        action="store_true",
        help="run Karpenter's KWOK provider with a NodePool of 4-CPU nodes (64 CPUs at most): a gang larger "
        "than the cluster brings its nodes (hack/cluster/build.sh karpenter)",
    )
    parser.add_argument(
        "--multikueue",
        action="store_true",
        help="this cluster a Kueue MultiKueue manager, with two worker clusters beside it (10.253.0.2 and .3), "
        "each with Kueue, gangkeeper and its AdmissionCheck gang-fits; WORKDIR/env names their kubeconfigs "
        "(docs/multikueue.md; hack/cluster/build.sh kueue)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="state and logs (default: a new temp dir)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gangkeeper-cluster-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env = workdir / "env"
    env.unlink(missing_ok=True)  # written again once this cluster is up: waiting for it means waiting for that
    plane = ControlPlane(workdir, kubernetes_version=args.kubernetes)
    reason = plane.missing()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    stop_on_the_first_signal()
    started = time.monotonic()
    with contextlib.ExitStack() as running:
        stack = running.enter_context(Stack(plane, overlay=args.overlay).running())
        for wanted, operator in ((args.lws, operators.lws), (args.jobset, operators.jobset)):
            if wanted:
                operator().install(plane)
        stack.replace_workers(args.nodes)
        if args.karpenter:
            from tests.realcluster import karpenter

            if karpenter.missing():
                print(karpenter.missing(), file=sys.stderr)
                return 1
            karpenter.Karpenter(plane).start()
            plane.apply(karpenter.node_pool(cpu_per_node=4, limit_cpu=64))
        workers: dict[str, Stack] = {}
        if args.multikueue:
            from tests.realcluster import multicluster

            manager_kueue = operators.kueue(more=multicluster.MANAGER_KUEUE)
            if manager_kueue.missing():
                print(manager_kueue.missing(), file=sys.stderr)
                return 1
            manager_kueue.install(plane)
            workers = running.enter_context(multicluster.workers_with_kueue(workdir, args.kubernetes))
            # stopped before the workers: its watches on them would hold each API server's exit 15 s
            running.callback(manager_kueue.uninstall, plane)
            for member in workers.values():
                member.replace_workers(args.nodes)
            multicluster.dispatch_to(plane, workers)
        kubectl = plane.k8s_binary("kubectl")
        plugins = Path(__file__).resolve().parents[2] / "plugins"
        try:  # from the moment it is written: a signal at any point after still removes it
            lines = [f"export KUBECONFIG={plane.kubeconfig}", f"export PATH={kubectl.parent}:{plugins}:$PATH"]
            lines += [f"export KUBECONFIG_{name.upper()}={member.plane.kubeconfig}" for name, member in workers.items()]
            env.write_text("\n".join(lines) + "\n")
            print(
                f"cluster v{args.kubernetes} with gangkeeper ({args.overlay}) up in {time.monotonic() - started:.0f}s"
            )
            print(f"  . {env}    # KUBECONFIG={plane.kubeconfig}; kubectl and kubectl-gangkeeper on the PATH")
            print("  kubectl apply -f manifests/examples/00-namespace.yaml")
            print("  kubectl apply -n gang-demo -f manifests/examples/01-all-fit.yaml")
            if workers:
                print(f"  a MultiKueue manager of {', '.join(workers)}: kubectl --kubeconfig $KUBECONFIG_WORKER1 ...")
            print(f"  logs: {plane.logs}   Ctrl-C stops and removes everything", flush=True)
            while all(p.alive() for p in plane.processes):
                time.sleep(1)
        finally:
            env.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
