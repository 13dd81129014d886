"""What one hostile tenant's device objects cost another team (issue 97), against the same run without it.

100 nodes of 8 GPUs, each device with a UUID of its own (as real drivers publish), the controller as it
runs (its informers, its CEL sandbox and the tenant budget) against the test API server. The hostile
namespace, team-x, holds a waiting gang whose pod names 32 claim templates, the most a pod may name:

- one selector that reads each device's UUID and costs ~0.3 s a device in cel-python (under the
  sandbox's 0.5 s per evaluation: kube-apiserver accepts it; ~1,200 comparisons by its estimator);
- 15 distinct selectors each over the per-evaluation budget (each stops the worker);
- 16 claims whose constraint searches find nothing on any node (9 devices of distinct groups where a
  node's 8 devices have 4).

Then team-a applies a plain 2-pod Job and a 2-pod DRA Job that both fit. Reported: seconds from team-a's
apply to both gangs released, and the longest pass, beside the tenant and without it (the baseline, in
the same run), and the controller's passes meanwhile. Target: released within 2 s of fitting; no pass
near STUCK_SECONDS (120 s).

    python bench/tenant_cost.py [--nodes 100] [--passes-before 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.apiserver import TestApiServer
from tests.cluster import add_job, add_job_pods
from tests.cluster import node as api_node
from tests.conftest import client_from
from tests.fake.test_devices import DRIVER, device_class, dra_controller, exactly, node_slice, template
from webhook.controller.decide import device_cel
from webhook.controller.observe.cel_sandbox import CelSandbox
from webhook.kube import Api

GROUP = f"{DRIVER}/group"


def in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    obj["metadata"]["namespace"] = namespace
    return obj


def costly(least_seconds: float, letters_from: int = 12) -> tuple[str, int]:
    """A selector reading each device's UUID and costing at least `least_seconds` a device in cel-python."""
    for letters in range(letters_from, 40):
        slow = f'duration("{"a" * letters}" + "!") > duration("1s")'
        expression = f'device.attributes["{DRIVER}"].uuid != "" && {slow}'
        facts = (DRIVER, {"uuid": {"string": "calibrating"}}, {}, False)
        device_cel.evaluate_all([(expression, facts)])
        started = time.process_time()
        device_cel.evaluate_all([(expression, facts)])
        if time.process_time() - started >= least_seconds:
            return expression, letters
    raise SystemExit("no selector slow enough")


def cluster(store: Any, nodes: int) -> None:
    for i in range(nodes):
        devices = [
            {
                "name": f"gpu-{d}",
                "attributes": {
                    "model": {"string": "a100"},
                    "uuid": {"string": f"GPU-{i}-{d}"},
                    "group": {"int": d % 4},
                },
            }
            for d in range(8)
        ]
        store.create("v1", "nodes", "", api_node(f"w{i}", cpu="64"))
        store.create("resource.k8s.io/v1", "resourceslices", "", node_slice(f"w{i}", devices))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("gpu", exactly()))


def hostile(store: Any) -> None:
    dear, letters = costly(0.3)
    names = ["dear"]
    store.create(
        "resource.k8s.io/v1",
        "resourceclaimtemplates",
        "team-x",
        in_namespace(template("dear", exactly("gpu", 1, "gpu", dear)), "team-x"),
    )
    for s in range(15):  # each over the sandbox's per-evaluation budget, each its own text
        slow = 'duration("' + "a" * (letters + 4 + s) + '" + "!") > duration("1s")'
        store.create(
            "resource.k8s.io/v1",
            "resourceclaimtemplates",
            "team-x",
            in_namespace(template(f"slow{s}", exactly(f"s{s}", 1, "gpu", slow)), "team-x"),
        )
        names.append(f"slow{s}")
    for t in range(16):
        searched = template(f"c{t}", exactly(f"r{t}", 9, "gpu"), constraints=[{"distinctAttribute": GROUP}])
        store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-x", in_namespace(searched, "team-x"))
        names.append(f"c{t}")
    job = add_job(store, "hostile", parallelism=1, cpu="1", namespace="team-x")
    job["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": f"g{i}", "resourceClaimTemplateName": name} for i, name in enumerate(names)
    ]
    add_job_pods(store, job)


def team_a(store: Any) -> None:
    add_job_pods(store, add_job(store, "plain", parallelism=2, cpu="1"))
    job = add_job(store, "devices", parallelism=2, cpu="1")
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
    add_job_pods(store, job)


def run(nodes: int, with_tenant: bool, passes_before: int) -> dict[str, float]:
    with TestApiServer() as server:
        api = Api(client_from(server=server.url))
        cluster(server.store, nodes)
        if with_tenant:
            hostile(server.store)
        controller, relist = dra_controller(server, api)
        longest = 0.0
        try:
            for _ in range(passes_before):  # the tenant as it has been for a while
                started = time.monotonic()
                controller.reconcile_once()
                longest = max(longest, time.monotonic() - started)
            team_a(server.store)
            relist()
            applied, passes, released = time.monotonic(), 0, False
            while not released and time.monotonic() - applied < 300:
                started = time.monotonic()
                decisions = controller.reconcile_once()
                longest, passes = max(longest, time.monotonic() - started), passes + 1
                released = all(decisions.get(f"team-a/job-{n}") and decisions[f"team-a/job-{n}"].state == "Release"
                               for n in ("plain", "devices"))  # fmt: skip
            took = time.monotonic() - applied
            ledger = controller.device_watch.memo.ledger
            spent = dict(getattr(ledger, "spent", {}))
        finally:
            sandbox = controller.device_watch.memo.evaluator
            if isinstance(sandbox, CelSandbox):
                sandbox.close()
        return {"released": took, "passes": passes, "longest": longest, "tenant": spent.get("team-x", 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--passes-before", type=int, default=2)
    args = parser.parse_args()
    alone = run(args.nodes, False, args.passes_before)
    beside = run(args.nodes, True, args.passes_before)
    print(f"{args.nodes} nodes of 8 devices, each its own UUID; team-a's plain and DRA gangs, both fitting")
    for label, got in (("alone (the baseline)", alone), ("beside the hostile tenant", beside)):
        print(
            f"  {label:28}: released {got['released']:.2f} s after apply, in {got['passes']:.0f} passes; "
            f"longest pass {got['longest']:.2f} s; the tenant's CEL and searches in the last pass {got['tenant']:.2f} s"
        )
    print(f"  beside / alone: {beside['released'] / alone['released']:.1f}x (target: released within 2 s)")


if __name__ == "__main__":
    main()
