"""Gangs whose pods claim devices through Dynamic Resource Allocation, on the real tier: kube-scheduler's
DynamicResources plugin allocates them from ResourceSlices published for KWOK nodes (tests/realcluster/
dra.py). The seeds' pinch with devices: a 12-pod gang, one device per pod, devices for 8 published. With
no gang mechanism 8 pods run and 4 wait for devices (the partial start); under gangkeeper none is bound
until devices for all 12 are there, then all start together. Every assertion reads what the cluster
reports: pods' nodes and phases, and the ResourceClaims kube-scheduler allocated."""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import pytest
import yaml

from tests.real.test_real_seeds import Watch, assert_started_together, hold_pending
from tests.realcluster import dra, workloads
from tests.realcluster.stack import FAKE, Stack, bound, gated, running, wait_until
from webhook import contract
from webhook.controller.act.claim_holders import HOLDER_MARK
from webhook.controller.decide import device_cel

pytestmark = pytest.mark.cluster
HOLDER = f"{contract.PLACEHOLDER_LABEL}={HOLDER_MARK}"
SIZE = 12


def allocated_devices(stack: Stack, namespace: str) -> dict[str, list[str]]:
    """Pod name -> the devices its claims were allocated (as the ResourceClaims say)."""
    found: dict[str, list[str]] = {}
    for claim in stack.plane.get("resourceclaims.resource.k8s.io", namespace=namespace):
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        for owner in claim["metadata"].get("ownerReferences") or []:
            if owner.get("kind") == "Pod":
                found.setdefault(owner["name"], []).extend(f"{r['pool']}/{r['device']}" for r in results)
    return found


def dra_pinch(stack: Stack, backend: str | None) -> tuple[str, list[str]]:
    """Four nodes with CPU for all; devices published on two of them (4 each): room for 8 of 12 pods."""
    nodes = stack.replace_workers(4)
    dra.publish(stack, nodes[:2], 4)
    namespace = stack.namespace(f"dra-{backend or 'floor'}", backend, opted_in=backend is not None)
    stack.plane.apply(dra.claim_template(namespace))
    job = dra.claiming(workloads.job("train", namespace, SIZE, "100m"))
    # a backend installed a moment ago is refused until the webhook's discovery (each minute) sees it
    wait_until(lambda: stack.plane.apply(job), "the Job admitted", 90, every=5)
    return namespace, nodes


def dra_pinch_waits_whole_then_starts_whole(stack: Stack, backend: str) -> float:
    """The pinch with devices: none bound for 15 s while devices for 8 of 12 exist; devices for all
    published, all 12 Running together, each with its own device on its own node. Returns the seconds
    from the publication to all Running."""
    namespace, nodes = dra_pinch(stack, backend)
    pods = hold_pending(stack, namespace, SIZE, seconds=15)
    if backend == "gate":
        assert len(gated(pods)) == SIZE
        gang = wait_until(lambda: stack.plane.get("gang", "job-train", namespace=namespace), "the Gang", 30)
        assert "8" in (gang.get("status") or {}).get("message", ""), gang.get("status")
    with Watch(stack, namespace) as watch:
        published = time.monotonic()
        dra.publish(stack, nodes[2:], 4)
        pods = wait_until(
            lambda: (p := stack.pods(namespace)) and len(running(p)) == SIZE and p, "the gang Running", 120, every=1
        )
        took = time.monotonic() - published
    assert_started_together(pods, SIZE)
    assert not watch.partial, f"partly bound for {watch.longest_partial:.1f}s"
    devices = allocated_devices(stack, namespace)
    assert sorted(devices) == sorted(p["metadata"]["name"] for p in pods)
    assert all(len(d) == 1 for d in devices.values()), devices
    # each pod's device is on its own node, and no device went to two pods
    node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert all(d[0].split("/")[0] == node_of[name] for name, d in devices.items()), (devices, node_of)
    assert len({d[0] for d in devices.values()}) == SIZE
    version = stack.plane.kubernetes_version
    print(f"\n{backend} on {version}: devices for all published -> all {SIZE} Running: {took:.1f} s")
    return took


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_a_dra_gang_waits_whole_for_devices_then_starts_whole(stack: Stack, backend: str) -> None:
    dra_pinch_waits_whole_then_starts_whole(stack, backend)


def test_without_a_gang_mechanism_the_dra_pinch_starts_part(stack: Stack) -> None:
    """The floor: a namespace not opted in, the same pinch: 8 pods get devices and run, 4 wait."""
    namespace, _ = dra_pinch(stack, None)
    wait_until(lambda: len(running(stack.pods(namespace))) == 8, "eight pods Running", 90)
    time.sleep(5)
    pods = stack.pods(namespace)
    assert len(running(pods)) == 8 and len(bound(pods)) == 8 and len(pods) == SIZE


def test_a_gang_asking_for_devices_no_node_has_waits_whole_saying_so(stack: Stack) -> None:
    """Bad input that can only be known in the cluster: a request selector no published device matches,
    and a template that does not exist. Nothing is bound; the Gang says why."""
    nodes = stack.replace_workers(2)
    dra.publish(stack, nodes, 4)
    namespace = stack.namespace("dra-impossible", "gate")
    h100 = 'device.attributes["gpu.example.com"].model == "h100"'
    stack.plane.apply(dra.claim_template(namespace, "h100", selector=h100))
    stack.plane.apply(dra.claiming(workloads.job("h100", namespace, 2, "100m"), "h100"))
    missing = yaml.safe_dump(dra.claiming(workloads.job("missing", namespace, 2, "100m"), "no-such-template"))
    # no warning at apply: a review names its own namespace and the webhook cannot tell a forged one, so
    # it reads no ResourceClaimTemplate (docs/security.md); the Gang says it, where the namespace is real
    result = stack.plane.kubectl("apply", "-f", "-", stdin=missing)
    assert result.returncode == 0 and "ResourceClaimTemplate" not in result.stderr, result.stderr

    # the Job controller makes its pods in slow-start batches, so "1 of 2 pods exist" may come first
    expected = {"job-h100": "could hold 0", "job-missing": "ResourceClaimTemplate no-such-template does not exist"}
    seen: dict[str, str] = {}

    def saying_why() -> bool:
        seen.clear()
        seen.update(
            {
                g["metadata"]["name"]: (g.get("status") or {}).get("message", "")
                for g in stack.plane.get("gangs", namespace=namespace)
            }
        )
        return all(reason in seen.get(name, "") for name, reason in expected.items())

    try:
        wait_until(saying_why, "both Gangs saying why they wait", 90)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}: {seen}") from None
    assert not bound(stack.pods(namespace))


def shaped_slice(stack: Stack, node: str, shaped: list[tuple[str, str | None]]) -> dict[str, Any]:
    """One node's slice of devices, each (model, PCIe root or None); a "shared" one allows multiple
    allocations of its 8Gi, rounded up in whole Gi, 2Gi when a claim asks for none."""
    body = dra.node_slice(stack, node, len(shaped))
    for device, (model, root) in zip(body["spec"]["devices"], shaped, strict=True):
        device["attributes"]["model"] = {"string": model}
        if model == "shared":
            device["allowMultipleAllocations"] = True
            policy = {"default": "2Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
            device["capacity"] = {"memory": {"value": "8Gi", "requestPolicy": policy}}
        if root is not None:
            device["attributes"]["pcie"] = {"string": root}
    return body


def template_with(namespace: str, name: str, devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": devices}},
    }


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_alternatives_and_constraints_start_whole_where_kube_scheduler_can_allocate_them(
    stack: Stack, backend: str
) -> None:
    """Issue 79's two shapes, side by side with kube-scheduler's own allocator (native): one big GPU or
    else two small per pod (node 0: one big and two small, node 1: four small: room for 4), and two GPUs
    on one PCIe root per pod (node 2: roots a, b, c, a; node 3: d, d: room for 2). Both gangs start whole
    on either backend, and every pair kube-scheduler allocated shares its root."""
    nodes = stack.replace_workers(4)
    stack.plane.apply(
        [
            dra.device_class(),
            shaped_slice(stack, nodes[0], [("big", None), ("small", None), ("small", None)]),
            shaped_slice(stack, nodes[1], [("small", None)] * 4),
            shaped_slice(stack, nodes[2], [("linked", "a"), ("linked", "b"), ("linked", "c"), ("linked", "a")]),
            shaped_slice(stack, nodes[3], [("linked", "d"), ("linked", "d")]),
        ]
    )
    namespace = stack.namespace(f"dra-shapes-{backend}", backend)
    model = 'device.attributes["gpu.example.com"].model == "{}"'

    def choice(name: str, count: int, wanted: str) -> dict[str, Any]:
        selector = [{"cel": {"expression": model.format(wanted)}}]
        return {"name": name, "deviceClassName": dra.CLASS, "count": count, "selectors": selector}

    either = {"requests": [{"name": "g", "firstAvailable": [choice("big", 1, "big"), choice("small", 2, "small")]}]}
    pair = {
        "requests": [
            {
                "name": "g",
                "exactly": {
                    "deviceClassName": dra.CLASS,
                    "allocationMode": "ExactCount",
                    "count": 2,
                    "selectors": [{"cel": {"expression": 'has(device.attributes["gpu.example.com"].pcie)'}}],
                },
            }
        ],
        "constraints": [{"matchAttribute": "gpu.example.com/pcie"}],
    }
    stack.plane.apply([template_with(namespace, "either", either), template_with(namespace, "pair", pair)])
    stack.plane.apply(
        [
            dra.claiming(workloads.job("alternatives", namespace, 4, "100m"), "either"),
            dra.claiming(workloads.job("pairs", namespace, 2, "100m"), "pair"),
        ]
    )
    pods = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == 6 and p,
        f"{backend}: both gangs Running",
        120,
        every=1,
        explain=lambda: stack.describe(namespace),
    )
    devices = allocated_devices(stack, namespace)
    roots = {
        f"{s['spec']['pool']['name']}/{d['name']}": d["attributes"].get("pcie", {}).get("string")
        for s in stack.plane.get("resourceslices.resource.k8s.io")
        if s["spec"]["pool"]["name"] in nodes
        for d in s["spec"]["devices"]
    }
    pairs = [devices[p["metadata"]["name"]] for p in pods if p["metadata"]["name"].startswith("pairs")]
    assert len(pairs) == 2 and all(len(d) == 2 and roots[d[0]] == roots[d[1]] is not None for d in pairs), pairs
    on = sorted(p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("alternatives"))
    assert on == sorted([nodes[0], nodes[0], nodes[1], nodes[1]]), on


def partitioned_gpu(stack: Stack, node: str) -> list[dict[str, Any]]:
    """One 8Gi GPU of a node as partitionable devices: a slice of its counters, a slice of its partitions
    (two halves of 4Gi and the whole), one pool of two slices, owned by the node."""
    counters = dra.node_slice(stack, node, 0)
    counters["metadata"]["name"] = f"{node}-counters"
    counters["spec"]["pool"]["resourceSliceCount"] = 2
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = [{"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}]
    parts = dra.node_slice(stack, node, 3)
    parts["spec"]["pool"]["resourceSliceCount"] = 2
    for device, (name, size) in zip(
        parts["spec"]["devices"], [("half-0", "4Gi"), ("half-1", "4Gi"), ("whole", "8Gi")], strict=True
    ):
        device["name"] = name
        device["consumesCounters"] = [{"counterSet": "gpu-0", "counters": {"memory": {"value": size}}}]
    return [counters, parts]


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_partitions_of_a_gpu_start_a_gang_whole_within_its_counters(stack: Stack, backend: str) -> None:
    """Partitionable devices (beta, on by default in 1.36): two nodes, each one GPU as two halves and the
    whole, all sharing its memory: room for four one-partition pods, never a half and the whole of one
    GPU. A gang of four starts whole on either backend, on the two halves of each GPU."""
    nodes = stack.replace_workers(2)
    stack.plane.apply([dra.device_class(), *(s for node in nodes for s in partitioned_gpu(stack, node))])
    namespace = stack.namespace(f"dra-partitions-{backend}", backend)
    stack.plane.apply(dra.claim_template(namespace))
    taken = four_start_whole(stack, namespace, backend)
    assert taken == sorted(f"{n}/{half}" for n in nodes for half in ("half-0", "half-1")), taken


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_devices_claims_share_start_a_gang_whole_within_their_capacity(stack: Stack, backend: str) -> None:
    """Consumable capacity (beta, on by default in 1.36): two nodes, each one device of 8Gi that allows
    multiple allocations (whole Gi, 2Gi by default); each pod asks for 3Gi: room for two per node, four
    in all. A gang of four starts whole on either backend, two shares of each device."""
    nodes = stack.replace_workers(2)
    stack.plane.apply([dra.device_class(), *(shaped_slice(stack, node, [("shared", None)]) for node in nodes)])
    namespace = stack.namespace(f"dra-shared-{backend}", backend)
    template = dra.claim_template(namespace)
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": "3Gi"}}
    stack.plane.apply(template)
    taken = four_start_whole(stack, namespace, backend)
    assert taken == sorted(f"{n}/gpu-0" for n in nodes for _ in range(2)), taken


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_a_constraint_over_shared_devices_starts_a_gang_whole_within_their_capacity(stack: Stack, backend: str) -> None:
    """matchAttribute over devices that allow multiple allocations (issue 79; the gate left them out of a
    constrained search, so such a gang waited for ever): two nodes, each three shared 8Gi GPUs, two on
    PCIe root a and one on b; each pod takes two GPUs of one root, 4Gi of each: room for two pods per
    node, on root a. A gang of four starts whole on either backend, and no pod has b's GPU."""
    nodes = stack.replace_workers(2)
    shaped = [("shared", "a"), ("shared", "a"), ("shared", "b")]
    stack.plane.apply([dra.device_class(), *(shaped_slice(stack, node, shaped) for node in nodes)])
    namespace = stack.namespace(f"dra-shared-match-{backend}", backend)
    request = {**exactly_of(2), "capacity": {"requests": {"memory": "4Gi"}}}
    same_root = [{"matchAttribute": "gpu.example.com/pcie"}]
    devices = {"requests": [{"name": "gpu", "exactly": request}], "constraints": same_root}
    stack.plane.apply(template_with(namespace, "one-gpu", devices))
    taken = four_start_whole(stack, namespace, backend)
    assert len(taken) == 8 and all(d.rsplit("/", 1)[1] in ("gpu-0", "gpu-1") for d in taken), taken


def four_start_whole(stack: Stack, namespace: str, backend: str) -> list[str]:
    """A Job of four claiming from the namespace's template Running, started together; the devices its
    claims were allocated (pool/device), sorted."""
    stack.plane.apply(dra.claiming(workloads.job("four", namespace, 4, "100m")))
    pods = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p,
        f"{backend}: the gang of four Running",
        120,
        every=1,
        explain=lambda: stack.describe(namespace),
    )
    assert_started_together(pods, 4)
    return sorted(d for found in allocated_devices(stack, namespace).values() for d in found)


DIFFERENTIAL_CASES = 50
KNOWN_SEED = 790473688  # its 50 cases agreed with kube-scheduler 1.36.3 (2026-12-02)
# a case's devices: partitions of one GPU sharing its counters (two slices of one pool), not a shaped slice
PARTITIONS: list[tuple[str, str | None]] = [("partitions", None)]


def exactly_of(count: int) -> dict[str, Any]:
    return {"deviceClassName": dra.CLASS, "allocationMode": "ExactCount", "count": count}


def random_case(rng: random.Random) -> tuple[list[tuple[str, str | None]], dict[str, Any], int]:
    """One node's devices (model, PCIe root or none), one claim template's devices, and the pods that each
    claim from it: the shapes issue 79 names (counts, selectors, alternatives, constraints, capacity
    shared by claims, partitions within shared counters)."""
    shape = rng.choice(["count", "alternatives", "match", "distinct", "capacity", "partitions"])
    if shape == "partitions":  # one GPU of 8Gi as two halves and the whole (partitioned_gpu): shared counters
        return PARTITIONS, {"requests": [{"name": "g", "exactly": exactly_of(rng.randint(1, 2))}]}, rng.randint(1, 3)
    if shape == "alternatives":  # few big ones, more small: a gang often fits only through its second choice
        kinds = ["big"] * rng.randint(0, 2) + ["small"] * rng.randint(1, 5)
    elif shape in ("count", "capacity"):  # devices claims share (consumable capacity) among whole ones
        kinds = [rng.choice(["big", "small", "shared"]) for _ in range(rng.randint(1, 4))]
    else:
        kinds = [rng.choice(["big", "small"]) for _ in range(rng.randint(2, 5))]
    devices = [(kind, rng.choice(["a", "b", "c", None])) for kind in kinds]
    model = 'device.attributes["gpu.example.com"].model == "{}"'

    def exactly(count: int, wanted: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"deviceClassName": dra.CLASS, "allocationMode": "ExactCount", "count": count}
        if wanted:
            body["selectors"] = [{"cel": {"expression": model.format(wanted)}}]
        return body

    claim: dict[str, Any]
    if shape == "count":
        claim = {"requests": [{"name": "g", "exactly": exactly(rng.randint(1, 2), rng.choice([None, "big"]))}]}
    elif shape == "capacity":
        request = exactly(rng.randint(1, 2), rng.choice([None, "shared"]))
        request["capacity"] = {"requests": {"memory": rng.choice(["1500Mi", "3Gi", "5Gi", "9Gi"])}}
        claim = {"requests": [{"name": "g", "exactly": request}]}
    elif shape == "alternatives":
        first = [{"name": "big", **exactly(1, "big")}, {"name": "small", **exactly(2, "small")}]
        claim = {"requests": [{"name": "g", "firstAvailable": first}]}
    else:
        kind = "matchAttribute" if shape == "match" else "distinctAttribute"
        claim = {
            "requests": [{"name": "g", "exactly": exactly(2)}],
            "constraints": [{kind: "gpu.example.com/pcie"}],
        }
    return devices, claim, rng.randint(1, 3)


def shares(*requests: tuple[str, int, str]) -> dict[str, Any]:
    """A claim's requests, each (name, count, memory of each share) of the "shared" devices."""
    return {
        "requests": [
            {"name": name, "exactly": {**exactly_of(count), "capacity": {"requests": {"memory": memory}}}}
            for name, count, memory in requests
        ]
    }


# one device allowing multiple allocations (8Gi): a request's units take distinct devices (1.36 and later:
# allocateOne's nextLocation), so one request of two shares starts nowhere; two requests of one share each
# take it twice, both pods' four shares on it
FIXED_CASES: list[tuple[list[tuple[str, str | None]], dict[str, Any], int]] = [
    ([("shared", None)], shares(("g", 2, "3Gi")), 1),
    ([("shared", None)], shares(("a", 1, "2Gi"), ("b", 1, "2Gi")), 2),
]


def taken_back(stack: Stack, namespace: str, cases: list[Any]) -> list[str]:
    """The cases whose gate gang had a release taken back: its pods pinned where kube-scheduler then refused
    them (the gate's model allocated what kube-scheduler does not), replaced or the Job requeued whole by
    the gate's own supervision. The pods' verdicts settle alike then, so only these events tell. Fixed case B
    was taken back in about half the runs, then ran whole: its claims, counted whole per node, stopped being
    counted once its pods were ungated, so a pass before they bound read the node as overcommitted (now
    counted until they bind: tests/fake/test_devices.py ..._not_taken_back_while_kube_scheduler_binds_it)."""
    back = {"GangMembersReplaced", "GangRequeued"}
    found: dict[int, str] = {}
    for event in stack.plane.get("events", namespace=namespace):
        if event.get("reason") in back and (event.get("involvedObject") or {}).get("kind") == "Job":
            found.setdefault(int(event["involvedObject"]["name"][1:]), str(event.get("message") or ""))
    return [
        f"case {i}: the gate's release was taken back ({why}); devices {cases[i][0]}; claim {cases[i][1]}"
        for i, why in sorted(found.items())
    ]


def test_the_gate_starts_a_dra_gang_exactly_when_kube_scheduler_allocates_every_pod(stack: Stack) -> None:
    """kube-scheduler as the oracle (issue 79): DIFFERENTIAL_CASES random small cases and FIXED_CASES, each
    a node of random devices and a gang claiming from a random template, once under native (kube-scheduler's
    own allocator and gang plugin) and once under the gate, side by side in one cluster, each on its own node.
    The gate starts a gang exactly when kube-scheduler binds every pod of it, never binds one partly, and
    never releases pods kube-scheduler then refuses (`taken_back`: its own supervision would undo that).
    CI runs a seed known to agree (KNOWN_SEED), so a red run is a regression, not a new random case;
    GK_DRA_SEED=random explores new cases and GK_DRA_SEED=N replays one. The seed is printed on failure.
    Seed 364264077's case 47 disagreed once in a loaded CI run (native 3 of 3 bound, the gate none yet
    when judged after 45 s) and agreed replayed alone: the gate's model allocates it
    (test_device_capacity's test_devices_taken_whole_each_hold_...), so it was the gate late, not wrong."""
    chosen = os.environ.get("GK_DRA_SEED") or str(KNOWN_SEED)
    seed = random.SystemRandom().randrange(1 << 30) if chosen == "random" else int(chosen)
    rng = random.Random(seed)
    cases = [random_case(rng) for _ in range(DIFFERENTIAL_CASES)] + FIXED_CASES
    sides = ("gate", "native")
    nodes = stack.replace_workers(len(cases) * 2, labels=lambda i: {"dra-case": str(i // 2), "dra-side": sides[i % 2]})
    stack.plane.apply(
        [
            dra.device_class(),
            *(
                piece
                for i, node in enumerate(nodes)
                for piece in (
                    partitioned_gpu(stack, node)
                    if cases[i // 2][0] == PARTITIONS
                    else [shaped_slice(stack, node, cases[i // 2][0])]
                )
            ),
        ]
    )
    namespaces = {side: stack.namespace(f"dra-diff-{side}", side) for side in sides}
    objects: list[dict[str, Any]] = []
    for side, namespace in namespaces.items():
        for i, (_, claim, size) in enumerate(cases):
            objects.append(template_with(namespace, f"t{i}", claim))
            job = dra.claiming(workloads.job(f"j{i}", namespace, size, "10m"), f"t{i}")
            job["spec"]["template"]["spec"]["nodeSelector"] = {"dra-case": str(i), "dra-side": side}
            objects.append(job)
    stack.plane.apply(objects)

    def verdicts() -> dict[str, list[int]]:
        """Pods bound per case on each side, and on the gate's side the pods it released: a gang released
        that kube-scheduler cannot bind would sit there, ungated, bound to nothing."""
        bound_now: dict[str, list[int]] = {side: [0] * len(cases) for side in (*sides, "released")}
        for side, namespace in namespaces.items():
            for pod in stack.pods(namespace):
                if pod["metadata"].get("deletionTimestamp"):
                    continue
                case = int(pod["metadata"]["labels"]["batch.kubernetes.io/job-name"][1:])
                if pod["spec"].get("nodeName"):
                    bound_now[side][case] += 1
                gates = [g.get("name") for g in pod["spec"].get("schedulingGates") or []]
                if side == "gate" and contract.GATE not in gates:
                    bound_now["released"][case] += 1
        return bound_now

    def disagreements(seen: dict[str, list[int]]) -> list[str]:
        wrong = []
        for i, (devices, claim, size) in enumerate(cases):
            gate, native, released = seen["gate"][i], seen["native"][i], seen["released"][i]
            partly = gate not in (0, size) or released not in (0, size) or released != gate
            if partly or (gate == size) != (native == size):
                wrong.append(
                    f"case {i}: gate {gate} bound ({released} released), native {native} of {size} pods; "
                    f"devices {devices}; claim {claim}"
                )
        return wrong

    # settled: the same for 30 s, at least 60 s after the apply (a gang waits for its last pod's claim; a
    # loaded CI machine delays both sides); while the sides disagree, up to 180 s (a cold CI run's builds
    # beside two test workers left the gate's release of a case late, not wrong)
    started, last, since = time.monotonic(), verdicts(), time.monotonic()
    while time.monotonic() - started < 180:
        time.sleep(5)
        now = verdicts()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 30 and time.monotonic() - started >= 60 and not disagreements(last):
            break
    wrong = disagreements(last) + taken_back(stack, namespaces["gate"], cases)
    print(f"\n{len(cases)} cases (seed {seed}): {sum(1 for n in last['native'] if n)} started under native")
    assert not wrong, f"seed {seed} (GK_DRA_SEED={seed} replays it):\n" + "\n".join(wrong)


# cel-python's duration() parses its argument with a backtracking regular expression: about 2^N steps for
# N letters before a character it cannot end on (N=34: a quarter of an hour in one call holding the GIL).
# The argument is not a literal, so kube-apiserver's compile-time check of literals does not see it.
SLOW_SELECTOR = 'duration("' + "a" * 34 + '" + "!") > duration("1s")'


def both_gangs_running(stack: Stack, name: str) -> float:
    """A plain 2-pod gang and a 2-pod DRA gang in a new namespace: seconds from apply to all Running."""
    namespace = stack.namespace(name, "gate")
    stack.plane.apply(dra.claim_template(namespace))
    started = time.monotonic()
    stack.plane.apply(
        [workloads.job("plain", namespace, 2, "100m"), dra.claiming(workloads.job("devices", namespace, 2, "100m"))]
    )
    wait_until(
        lambda: len(running(stack.pods(namespace))) == 4,
        f"{name}: both gangs Running",
        120,
        every=0.5,
        explain=lambda: stack.describe(namespace),
    )
    return time.monotonic() - started


def gang_says(stack: Stack, namespace: str, gang: str, *words: str) -> str | None:
    """The Gang's status message when it holds any of `words`."""
    found = stack.plane.get("gang", gang, namespace=namespace) or {}
    message = str((found.get("status") or {}).get("message") or "")
    return message if any(word in message for word in words) else None


def test_a_tenants_slow_selector_costs_another_teams_gangs_nothing(stack: Stack) -> None:
    """Issue 76's HIGH finding: a tenant's template whose selector would hold the controller's process
    for minutes, accepted by kube-apiserver, first unused, then named by a gang of its own. Another
    team's plain gate gang and DRA gang start as fast as they did before it, in the same run; the
    tenant's gang waits, its Gang saying the selector ran over its budget."""
    nodes = stack.replace_workers(2)
    dra.publish(stack, nodes, 6)
    before = both_gangs_running(stack, "quiet-before")
    tenant = stack.namespace("tenant-slow", None, opted_in=False)
    stack.plane.apply(dra.claim_template(tenant, "slow", selector=SLOW_SELECTOR))
    kept = stack.plane.get("resourceclaimtemplates.resource.k8s.io", "slow", namespace=tenant)
    assert kept["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"] == (
        SLOW_SELECTOR
    )  # kube-apiserver accepted it
    unused = both_gangs_running(stack, "beside-unused")
    hostile = stack.namespace("tenant-gang", "gate")
    stack.plane.apply(dra.claim_template(hostile, "slow", selector=SLOW_SELECTOR))
    stack.plane.apply(dra.claiming(workloads.job("hostile", hostile, 1, "100m"), "slow"))
    named = both_gangs_running(stack, "beside-named")
    print(
        f"\nboth gangs Running: {before:.1f} s alone, {unused:.1f} s beside the unused template, {named:.1f} s "
        "beside a gang naming it"
    )
    for took in (unused, named):
        assert took <= max(2 * before, before + 10), (before, unused, named)
    said = wait_until(
        lambda: gang_says(stack, hostile, "job-hostile", "ran over its budget"),
        "the tenant's Gang naming the selector's budget",
        60,
        every=1,
    )
    print(said)
    assert not bound(stack.pods(hostile))


def dear_selector(least_seconds: float) -> str:
    """A selector that reads each device's own uuid and costs at least `least_seconds` a device on the
    controller's CEL (cel-python: its `duration` backtracks on N letters; N found on this machine)."""
    for letters in range(12, 40):
        expression = (
            f'device.attributes["{dra.DRIVER}"].uuid != "" && duration("{"a" * letters}" + "!") > duration("1s")'
        )
        facts = (dra.DRIVER, {"uuid": {"string": "calibrating"}}, {}, False)
        device_cel.evaluate_all([(expression, facts)])
        started = time.process_time()
        device_cel.evaluate_all([(expression, facts)])
        if time.process_time() - started >= least_seconds:
            return expression
    raise AssertionError("no selector slow enough")


def test_a_tenants_dear_selectors_and_searches_are_paid_from_its_own_share(stack: Stack) -> None:
    """Issue 97's HIGH and MEDIUM findings on the real tier: a tenant's gang names a selector that reads
    each device's UUID and costs ~0.15 s a device (under the per-evaluation budget; kube-apiserver accepts
    it), and 16 claims whose constraint searches find nothing on any node (9 devices of distinct groups
    where a node has 8), on 4 nodes of 16 devices each with its own UUID. Charged to its namespace's
    share of each pass, another team's plain and DRA gangs start as fast as before it, in the same run;
    the tenant's Gang says what holds it."""
    nodes = stack.replace_workers(4)
    stack.plane.apply([dra.device_class(), *(dra.node_slice(stack, node, 16, unique=True) for node in nodes)])
    before = both_gangs_running(stack, "dear-before")
    hostile = stack.namespace("tenant-dear", "gate")
    selector = dear_selector(0.15)
    templates = [dra.claim_template(hostile, "dear", selector=selector)]
    group = f"{dra.DRIVER}/group"
    templates += [dra.claim_template(hostile, f"c{t}", 9, distinct=group, request=f"r{t}") for t in range(16)]
    stack.plane.apply(templates)
    kept = stack.plane.get("resourceclaimtemplates.resource.k8s.io", "c0", namespace=hostile)
    assert kept["spec"]["spec"]["devices"]["constraints"] == [{"distinctAttribute": group}]  # accepted
    job = workloads.job("hostile", hostile, 1, "100m")
    job["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": f"g{t}", "resourceClaimTemplateName": name}
        for t, name in enumerate(["dear", *(f"c{t}" for t in range(16))])
    ]
    stack.plane.apply(job)
    said = wait_until(
        lambda: gang_says(stack, hostile, "job-hostile", "over its budget", "spent its share"),
        "the tenant's Gang saying what holds it",
        90,
        every=1,
        explain=lambda: stack.describe(hostile),
    )
    beside = both_gangs_running(stack, "dear-beside")
    print(f"\nboth gangs Running: {before:.1f} s alone, {beside:.1f} s beside the tenant's gang\n{said}")
    assert beside <= max(2 * before, before + 10), (before, beside)
    assert not bound(stack.pods(hostile))


def said(stack: Stack, namespace: str) -> str:
    """What gangkeeper's controller said of this namespace's gangs, and where their pods are: a failure's
    diagnostics."""
    lines = [
        line for system in stack.system for line in system.logs().splitlines() if namespace in line or "Gang" in line
    ]
    pods = [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase")) for p in stack.pods(namespace)]
    events = [
        f"{e['involvedObject'].get('name')}: {e.get('reason')}: {e.get('message')}"
        for e in stack.plane.get("events", namespace=namespace)
        if e.get("reason") in ("FailedScheduling", "Scheduled")
    ]
    claims = [
        (c["metadata"]["name"], c.get("status"))
        for c in stack.plane.get("resourceclaims.resource.k8s.io", namespace=namespace)
    ]
    return "\n".join([*lines[-40:], f"pods: {pods}", *events, f"claims: {claims}"])


def add_worker(stack: Stack, name: str, cpu: str) -> str:
    """One more fake node, of its own size (replace_workers makes them all alike), removed with the rest."""
    capacity = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
    labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"}
    stack.plane.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": dict(FAKE), "labels": labels},
            "status": {"capacity": capacity, "allocatable": capacity},
        }
    )
    stack.workers.append(name)
    wait_until(
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (stack.plane.get("node", name) or {}).get("status", {}).get("conditions", [])
        ),
        f"node {name} Ready",
        60,
    )
    return name


def shared_claim(namespace: str, name: str = "domain") -> dict[str, Any]:
    """One device for the whole gang (an interconnect domain, a reservation): a ResourceClaim every pod
    names."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": dra.CLASS}}]}},
    }


def sharing(manifest: dict[str, Any], claim: str = "domain") -> dict[str, Any]:
    spec = manifest["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "domain", "resourceClaimName": claim}]
    for container in spec["containers"]:
        container.setdefault("resources", {})["claims"] = [{"name": "domain"}]
    return manifest


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_a_claim_the_whole_gang_shares_is_allocated_once_and_the_gang_runs_where_it_reaches(
    stack: Stack, backend: str
) -> None:
    """Every pod names ResourceClaim `domain`: one device of one node. Its allocation reaches that node
    alone, so the gang must run there. Two nodes have a device each; only the second has CPU for all
    three pods. The gate places the gang inside the reach that holds it; the native backend writes the
    claim as the PodGroup's own (spec.resourceClaims, DRAWorkloadResourceClaims), which the API server
    keeps. Either way: all three Running on that node, the claim allocated once, reserved for them."""
    (big,) = stack.replace_workers(1, cpu="12")
    small = add_worker(stack, f"{big}-small", cpu="4")  # one 3-CPU pod of the gang, not three
    dra.publish(stack, [small, big], 1)
    namespace = stack.namespace(f"dra-shared-{backend}", backend)
    stack.plane.apply(shared_claim(namespace))
    size = 3
    stack.plane.apply(sharing(workloads.job("train", namespace, size, "3")))
    try:
        pods = wait_until(
            lambda: (p := stack.pods(namespace)) and len(running(p)) == size and p, "the gang Running", 120, every=1
        )
    except AssertionError:
        print(said(stack, namespace))
        raise
    assert_started_together(pods, size)
    claim = stack.plane.get("resourceclaim.resource.k8s.io", "domain", namespace=namespace)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1, results
    assert {p["spec"]["nodeName"] for p in pods} == {results[0]["pool"]} == {big}
    if backend == "native":
        group = stack.plane.get("podgroups.scheduling.k8s.io", "job-train", namespace=namespace)
        assert group["spec"].get("resourceClaims") == [{"name": "domain", "resourceClaimName": "domain"}], group


def test_a_high_priority_dra_gang_takes_the_devices_of_one_whole_lower_gang(stack: Stack) -> None:
    """One node with CPU for everyone and 4 devices: a low-priority gang of 4 holds them all. A
    high-priority gang of 4 preempts it whole (its Job suspended, never failed) and runs on its devices."""
    from tests.real.test_real_recovery import gang_pods, priority_class, with_priority

    nodes = stack.replace_workers(1, cpu="64")
    dra.publish(stack, nodes, 4)
    namespace = stack.namespace("dra-preemption", "gate")
    stack.plane.apply([dra.claim_template(namespace), priority_class("gangkeeper-test-dra-high", 1000)])
    stack.plane.apply(dra.claiming(workloads.job("low", namespace, 4, "100m")))
    wait_until(lambda: len(running(gang_pods(stack, namespace, "low"))) == 4, "the low gang Running", 120)
    time.sleep(62)  # a gang released within the last minute is nobody's victim (--min-runtime-seconds, 60)
    stack.plane.apply(
        with_priority(dra.claiming(workloads.job("high", namespace, 4, "100m")), "gangkeeper-test-dra-high")
    )
    try:
        high = wait_until(
            lambda: (p := gang_pods(stack, namespace, "high")) and len(running(p)) == 4 and p,
            "the high gang Running",
            150,
        )
    except AssertionError:
        print(said(stack, namespace))
        raise
    assert_started_together(high, 4)
    low = stack.plane.get("job", "low", namespace=namespace)
    assert low["spec"].get("suspend") is True  # the whole lower gang went, by suspension
    assert not any(c["type"] == "Failed" for c in (low.get("status") or {}).get("conditions") or [])
    assert not bound(gang_pods(stack, namespace, "low"))
    devices = allocated_devices(stack, namespace)
    assert sorted(devices) == sorted(p["metadata"]["name"] for p in high)


def test_a_gang_whose_node_loses_its_devices_is_requeued_whole_and_runs_whole_again(stack: Stack) -> None:
    """Two nodes with 2 devices each hold a gang of 4. The driver on one node goes (its ResourceSlice
    deleted): the gang is short, and after its recovery timeout requeued whole (its Job suspended, no
    pod left running alone); the driver back, the gang runs whole again."""
    nodes = stack.replace_workers(2, cpu="2")
    dra.publish(stack, nodes, 2)
    namespace = stack.namespace("dra-recovery", "gate")
    stack.plane.apply(dra.claim_template(namespace))
    annotations = {"gangkeeper.io/recovery-timeout-seconds": "10"}
    stack.plane.apply(dra.claiming(workloads.job("train", namespace, 4, "500m", annotations=annotations)))
    pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the gang Running", 120)
    first_uids = {p["metadata"]["uid"] for p in pods}
    stack.plane.kubectl("delete", "resourceslice", f"{nodes[1]}-gpus")
    try:
        wait_until(
            lambda: (stack.plane.get("job", "train", namespace=namespace) or {}).get("spec", {}).get("suspend"),
            "the Job suspended: requeued whole",
            90,
        )
        wait_until(
            lambda: not ({p["metadata"]["uid"] for p in running(stack.pods(namespace))} & first_uids),
            "none of the first run's pods left running",
            90,
        )
        dra.publish(stack, [nodes[1]], 2)
        again = wait_until(
            lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the gang Running whole again", 150
        )
    except AssertionError:
        print(said(stack, namespace))
        raise
    assert_started_together(again, 4)
    assert not ({p["metadata"]["uid"] for p in again} & first_uids)


LINK_DRIVER = "link.example.com"


def rack_links(stack: Stack, racks: dict[str, list[str]]) -> list[dict[str, Any]]:
    """One interconnect device per rack, reachable from the rack's nodes alone (a pool with a nodeSelector,
    as a fabric driver publishes it; owned by the rack's first node, so it goes with it), and its class."""
    link_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": LINK_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{LINK_DRIVER}"'}}]},
    }
    slices = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": f"rack-{rack}-link-{nodes[0]}",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": nodes[0],
                        "uid": stack.plane.get("node", nodes[0])["metadata"]["uid"],
                    }
                ],
            },
            "spec": {
                "driver": LINK_DRIVER,
                "pool": {"name": f"rack-{rack}-{nodes[0]}", "generation": 1, "resourceSliceCount": 1},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
                    ]
                },
                "devices": [{"name": "link"}],
            },
        }
        for rack, nodes in racks.items()
    ]
    return [link_class, *slices]


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_a_gang_sharing_one_rack_link_starts_whole_in_the_rack_that_holds_it(stack: Stack, backend: str) -> None:
    """The issue's two racks (#78): each rack has one interconnect device reachable from its own nodes; rack
    a's two nodes have one GPU each and the most free CPU (kube-scheduler's LeastAllocated scores them
    first), rack b's two have two GPUs each. A 4-pod gang takes one GPU per pod and shares one link claim:
    only rack b holds it whole. Placed pod by pod, the first pod's allocation of the shared claim picks
    rack a and traps the rest (native 1.36 without steering: not Running whole in 120 s). Both backends:
    all four Running in rack b, the link allocated once."""
    a_gang_sharing_one_rack_link_starts_whole_in_its_rack(stack, backend)


def a_gang_sharing_one_rack_link_starts_whole_in_its_rack(stack: Stack, backend: str) -> None:
    a = list(stack.replace_workers(2, cpu="64", prefix="racka"))  # a copy: add_worker appends to the stack's
    b = [add_worker(stack, f"{a[0]}-b{i}", cpu="8") for i in (1, 2)]
    stack.plane.apply([dra.device_class(), *(dra.node_slice(stack, n, 1) for n in a)])
    stack.plane.apply([dra.node_slice(stack, n, 2) for n in b])
    stack.plane.apply(rack_links(stack, {"a": a, "b": b}))
    namespace = stack.namespace(f"dra-racks-{backend}", backend)
    link = shared_claim(namespace, "fabric")
    link["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = LINK_DRIVER
    stack.plane.apply([link, dra.claim_template(namespace)])
    job = dra.claiming(workloads.job("train", namespace, 4, "1"))
    spec = job["spec"]["template"]["spec"]
    spec["resourceClaims"].append({"name": "fabric", "resourceClaimName": "fabric"})
    spec["containers"][0]["resources"]["claims"].append({"name": "fabric"})
    # a backend installed a moment ago is refused until the webhook's discovery (each minute) sees it
    wait_until(lambda: stack.plane.apply(job), "the Job admitted", 90, every=5)
    try:
        pods = wait_until(
            lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the gang Running", 120, every=1
        )
    except AssertionError:
        print(said(stack, namespace))
        raise
    assert_started_together(pods, 4)
    fabric = stack.plane.get("resourceclaim.resource.k8s.io", "fabric", namespace=namespace)
    where = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert set(where.values()) == set(b), json.dumps([where, fabric.get("status")])
    results = fabric["status"]["allocation"]["devices"]["results"]
    assert [r["pool"] for r in results] == [f"rack-b-{b[0]}"], results
    # a claim holder (coscheduling's, act/claim_holders.py) is gone once the gang is bound, and the claim
    # stays allocated for the gang's pods alone
    wait_until(lambda: not stack.plane.get("pods", namespace=namespace, selector=HOLDER), "no claim holder left", 30)

    def reserved_for_the_gang_alone() -> Any:
        claim = stack.plane.get("resourceclaim.resource.k8s.io", "fabric", namespace=namespace)
        pods = {c["name"] for c in claim["status"].get("reservedFor") or [] if c.get("resource") == "pods"}
        # native 1.36 may reserve it for the gang's PodGroup rather than pod by pod
        return pods <= set(where) and claim["status"]

    reserved = wait_until(reserved_for_the_gang_alone, "the link reserved for the gang's pods alone", 30)
    assert reserved.get("allocation"), reserved
