"""The gate's pass with DRA devices, against the same pass without them, in one run (issue 62).

5,000 nodes of 64 CPUs, each with a ResourceSlice of 8 devices (40,000 devices, a DeviceClass with a
CEL selector), and one 1,000-pod gang, one device per pod from a ResourceClaimTemplate. Measured in
process, as the controller does it (controller/observe/cluster.py ClusterIndex, decide/state.py decide):

- without devices: the index built from the nodes and the gang's pods (CPU only), the gang decided;
- with devices: the inventory read from the four DRA kinds (every device's selector in CEL, cold), the
  nodes' devices as resources, the gang's pods with their claims, the gang decided (placement, then
  the exact allocation of every pod's claim on its node);
- the steady pass with devices: one slice changed (a driver republished one node), its pool gathered
  again (the controller's PoolBook, from the informer's changes), the inventory and that node's devices
  again (what the other 39,992 devices select remembered), the gang decided again.

    python bench/devices.py [--nodes 5000] [--gang 1000] [--devices 8]
    python bench/devices.py --unused-templates 1000   (another namespace's templates no pod names)
    python bench/devices.py --shape alternatives|constraints|counters|capacity   (issue 79's shapes)
    python bench/devices.py --allocated 3   (3 of each node's devices held by other teams' claims)
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster import gated_job_pods, node
from webhook.controller.decide import device_cel, device_cel_fast, devices
from webhook.controller.decide.situation import GangSpec
from webhook.controller.decide.state import decide
from webhook.controller.observe.cluster import ClusterIndex
from webhook.controller.observe.device_check import devices_check
from webhook.controller.observe.devices import RESOURCE_SLICES, DeviceWatch
from webhook.controller.observe.devices import RESOURCES as DRA_RESOURCES
from webhook.controller.observe.informer import trim_node, trim_pod
from webhook.controller.observe.pool_book import PoolBook
from webhook.controller.observe.store import GangStore
from webhook.controller.run import garbage
from webhook.controller.run.process import TRIMS
from webhook.informer import Informer, identity

DRIVER = "gpu.example.com"
NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)


def device_class() -> dict[str, Any]:
    expression = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "h100"'
    return {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}


# what each node's devices and the gang's template are, per --shape (issue 79): one device per pod; the
# first of one device or else two (firstAvailable); two devices on one PCIe root (matchAttribute);
# partitions within a GPU's shared counters; shares of devices that allow multiple allocations
SHAPE = "plain"
ALLOCATED = 0  # devices per node allocated to other teams' pods' claims (--allocated)
UNIQUE = False  # each device with an attribute of its own, a UUID (--unique)


def shaped_device(i: int) -> dict[str, Any]:
    device: dict[str, Any] = {"name": f"gpu-{i}", "attributes": {"model": {"string": "h100"}, "index": {"int": i}}}
    if SHAPE == "constraints":
        device["attributes"]["pcie"] = {"string": f"root-{i // 2}"}
    elif SHAPE == "counters":
        device["consumesCounters"] = [{"counterSet": "gpu", "counters": {"memory": {"value": "10Gi"}}}]
    elif SHAPE == "capacity":
        device["allowMultipleAllocations"] = True
        policy = {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}
        device["capacity"] = {"memory": {"value": "40Gi", "requestPolicy": policy}}
    return device


def shaped_request() -> dict[str, Any]:
    if SHAPE == "alternatives":
        big = {"name": "big", "deviceClassName": "gpu", "selectors": [{"cel": {"expression": _index_is(0)}}]}
        small = {"name": "small", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2}
        return {"requests": [{"name": "gpu", "firstAvailable": [big, small]}]}
    if SHAPE == "constraints":
        pair = {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2}
        return {"requests": [{"name": "gpu", "exactly": pair}], "constraints": [{"matchAttribute": f"{DRIVER}/pcie"}]}
    exactly: dict[str, Any] = {"deviceClassName": "gpu"}
    if SHAPE == "capacity":
        exactly["capacity"] = {"requests": {"memory": "10Gi"}}
    return {"requests": [{"name": "gpu", "exactly": exactly}]}


def _index_is(i: int) -> str:
    return f'device.attributes["{DRIVER}"].index == {i}'


def node_slice(name: str, count: int, version: str = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "nodeName": name,
        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
        "devices": [shaped_device(i) for i in range(count)],
    }
    if UNIQUE:  # as a driver publishes its GPUs: each with its own UUID, the same when republished
        for i, device in enumerate(spec["devices"]):
            device["attributes"]["uuid"] = {"string": f"GPU-{name}-{i}"}
    if SHAPE == "counters":  # in the devices' slice here; a driver may publish them in one of their own
        spec["sharedCounters"] = [{"name": "gpu", "counters": {"memory": {"value": "40Gi"}}}]
    return {"metadata": {"name": f"{name}-gpus", "uid": f"uid-{name}", "resourceVersion": version}, "spec": spec}


def allocated_claims(nodes: int) -> list[dict[str, Any]]:
    """Each node's first ALLOCATED devices held, each by its own claim made for another team's pod."""
    return [
        {
            "metadata": {
                "name": f"held-{i}-{d}",
                "namespace": "team-b",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": f"p-{i}-{d}", "uid": f"b-{i}-{d}"}],
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "gpu", "driver": DRIVER, "pool": f"node-{i:04d}", "device": f"gpu-{d}"}]
                    }
                }
            },
        }
        for i in range(nodes)
        for d in range(ALLOCATED)
    ]


def gang_pods(size: int, claims: bool) -> list[dict[str, Any]]:
    return list(gated_job_pods(size, "8", "32Gi", "one" if claims else None).values())


def one_pass(index: ClusterIndex, spec: GangSpec, records: GangStore | None = None) -> tuple[str, int]:
    gang = index.gangs()["team-a/job-train"]
    decision = decide(
        gang.pods,
        spec,
        index.node_list(),
        dict(index.free),
        NOW,
        eligibility=index.eligibility(),
        devices_fit=devices_check(index, gang, (RECORDS if records is None else records).record(gang.key)),
    )
    return str(decision.state), len(decision.release)


# the controller's memory of each gang between passes (its last devices check); a Cluster keeps its own (an
# empty store is falsy: `records or RECORDS` gave every Cluster this one)
RECORDS = GangStore()
STEADY_PASSES = 10  # steady passes timed after each cold one: one pass is ~10 ms, a sample of one is noise


def between_passes() -> None:
    """What the controller does between passes (run/garbage.py): the oldest generation collected there,
    not inside a pass, and what survives frozen."""
    gc.collect()
    gc.freeze()


class Served:
    """The four DRA kinds as the API server lists and watches them, for the controller's own informers
    (the bench has no API server): the passes read the devices as the controller does, through its
    DeviceWatch, whose informers list and follow these."""

    def __init__(self, lists: dict[str, list[dict[str, Any]]]) -> None:
        self.lists, self.events = lists, list[dict[str, Any]]()

    def list(self, path: str, **query: str) -> dict[str, Any]:
        return {"items": list(self.lists.get(path.rpartition("/")[2], ())), "metadata": {"resourceVersion": "1"}}

    def stream(self, path: str, query: dict[str, str], timeout: float) -> Iterator[dict[str, Any]]:
        events, self.events = self.events, []
        return iter(events)


class Cluster:
    """One cluster's index as the controller keeps it, with devices (read through its DeviceWatch) or
    without."""

    def __init__(self, raw_nodes: dict[str, Any], gang: int, with_devices: bool) -> None:
        self.raw_nodes, self.gang, self.with_devices = raw_nodes, gang, with_devices
        self.spec = GangSpec(min_member=gang)
        self.index, self.records = ClusterIndex(), GangStore()
        template = {
            "metadata": {"name": "one", "namespace": "team-a", "resourceVersion": "1"},
            "spec": {"spec": {"devices": shaped_request()}},
        }
        self.served = Served({"deviceclasses": [device_class()], "resourceclaimtemplates": [template]})
        self.informers = {
            (r.group_version, r.plural): Informer(self.served, r, transform=TRIMS.get(r, identity))  # type: ignore[arg-type]
            for r in DRA_RESOURCES
        }  # each trimmed as the controller's caches keep it (run/process.py TRIMS)
        self.watch = DeviceWatch(self.informers, evaluator=device_cel.evaluate_all)  # CEL in process, as offline
        # the gang's pods as the API server gives them (through the webhook's admission): made before the
        # timing starts, as the controller gets them made
        self.pods = {f"team-a/{p['metadata']['name']}": trim_pod(p) for p in gang_pods(gang, claims=with_devices)}
        self.inventory_times: list[float] = []  # of the cold pass and the slices' passes: the devices' part

    def listed(self, slices: list[dict[str, Any]], allocated: list[dict[str, Any]]) -> None:
        """The informers' first lists (their own threads' work, before the controller's first pass)."""
        self.served.lists |= {"resourceslices": slices, "resourceclaims": allocated}
        for informer in self.informers.values():
            informer.relist()

    def devices(self, first: bool = False) -> None:
        """What each pass does first (with a new budget of CEL evaluations) and again once the pods are
        in (run/reconciler.py snapshot)."""
        if first:
            self.watch.memo.new_pass()
        self.index.use_devices(self.watch.inventory(self.index.waiting_claims()))

    def cold(self) -> tuple[str, int]:
        """The controller's first pass, in its order: the devices' picture, the pods, the picture again
        with the templates the waiting pods name, the nodes (each counted with its devices)."""
        started = time.perf_counter()
        if self.with_devices:
            self.devices(first=True)
        self.index.apply_pods(self.pods)
        if self.with_devices:
            self.devices()
        self.index.apply_nodes(self.raw_nodes)
        if self.with_devices:
            self.inventory_times.append(time.perf_counter() - started)
        return one_pass(self.index, self.spec, self.records)

    def node_changed(self, name: str, label: str) -> tuple[str, int]:
        """One node changed (its labels), no device: the gang decided again."""
        if self.with_devices:
            self.devices(first=True)
            self.devices()
        self.index.apply_nodes({f"/{name}": trim_node(node(name, cpu="64", memory="256Gi", labels={"run": label}))})
        return one_pass(self.index, self.spec, self.records)

    def slice_changed(self, per_node: int, version: str) -> tuple[str, int]:
        """One node's slice republished (its watch event, in the informer's thread): its pool gathered
        again, the inventory and that node's devices again (what the other devices select remembered),
        the gang decided again."""
        self.served.events = [{"type": "MODIFIED", "object": node_slice("node-0000", per_node, version=version)}]
        self.informers[(RESOURCE_SLICES.group_version, RESOURCE_SLICES.plural)].watch_once()
        started = time.perf_counter()
        self.devices(first=True)
        self.devices()
        self.inventory_times.append(time.perf_counter() - started)
        return one_pass(self.index, self.spec, self.records)


def run(nodes: int, gang: int, per_node: int, repeats: int) -> None:
    """Each repeat: the cold pass without devices, then with them, then steady passes of the three kinds in
    turn (this VM's speed drifts by half over a minute: the passes compared are taken side by side)."""
    garbage.start()  # the controller's collector thresholds: full collections only between passes
    raw_nodes = {f"/node-{i:04d}": trim_node(node(f"node-{i:04d}", cpu="64", memory="256Gi")) for i in range(nodes)}
    slices = [node_slice(f"node-{i:04d}", per_node) for i in range(nodes)]
    allocated = allocated_claims(nodes)
    plain_runs: list[float] = []
    plain_steady: list[float] = []
    cold: list[float] = []
    steady: list[float] = []
    untouched: list[float] = []
    inventory_cold: list[float] = []
    inventory_steady: list[float] = []
    listing: list[float] = []

    def timed(into: list[float], step: Callable[..., tuple[str, int]], *args: Any) -> None:
        started = time.perf_counter()
        state, released = step(*args)
        into.append(time.perf_counter() - started)
        assert state == "Release" and released == gang, state
        between_passes()

    for repeat in range(repeats):
        plain, with_devices = Cluster(raw_nodes, gang, False), Cluster(raw_nodes, gang, True)
        started = time.perf_counter()
        with_devices.listed(slices, allocated)
        listing.append(time.perf_counter() - started)
        between_passes()
        timed(plain_runs, plain.cold)
        timed(cold, with_devices.cold)
        inventory_cold.append(with_devices.inventory_times.pop())
        for again in range(STEADY_PASSES):
            label = f"{repeat}-{again}"
            timed(plain_steady, plain.node_changed, "node-0000", label)
            timed(untouched, with_devices.node_changed, "node-0001", label)
            timed(steady, with_devices.slice_changed, per_node, str(repeat * STEADY_PASSES + again + 2))
            inventory_steady.append(with_devices.inventory_times.pop())

    def show(name: str, runs: list[float]) -> str:
        return f"{name}: median {statistics.median(runs) * 1000:.0f} ms (min {min(runs) * 1000:.0f})"

    total = nodes * per_node
    print(
        f"{nodes} nodes, {total} devices ({SHAPE}, {ALLOCATED * nodes} held by other claims), a {gang}-pod gang; "
        f"{repeats} cold runs, "
        f"{STEADY_PASSES} steady passes each"
    )
    print(
        "  each first pass (ms), without devices, then with:",
        [round(x * 1000) for x in plain_runs],
        [round(x * 1000) for x in cold],
    )
    print(show("  the informers' first lists, trimmed (their threads)    ", listing))
    print(show("  first pass without devices (index built, gang decided)", plain_runs))
    print(show("  first pass with devices (every device's CEL, cold)     ", cold))
    print(show("     of which the devices' picture, pods and nodes      ", inventory_cold))
    print(show("  steady pass without devices (one node changed)         ", plain_steady))
    print(show("  steady pass with devices (one node changed, no device) ", untouched))
    print(show("  steady pass with devices (one slice changed)           ", steady))
    print(show("     of which the inventory and the nodes' devices       ", inventory_steady))
    first, again = statistics.median(plain_runs), statistics.median(plain_steady)
    print(
        f"  with devices / without: first pass {statistics.median(cold) / first:.2f}x, "
        f"steady pass {statistics.median(untouched) / again:.2f}x with no device changed, "
        f"{statistics.median(steady) / again:.2f}x with a slice changed (target: within 1.5x)"
    )


def unused_templates(nodes: int, gang: int, per_node: int, count: int, repeats: int) -> None:
    """Issue 76: `count` ResourceClaimTemplates in another namespace, each with a selector of its own, that
    no pod names, beside the gang's own: the gang's cold pass (inventory, nodes' devices, decision) and its
    steady pass (one slice republished), with and without them, interleaved in one run. The controller
    counts per node only the selectors of templates that waiting pods name (Inventory.waiting)."""
    garbage.start()
    raw_nodes = {f"/node-{i:04d}": trim_node(node(f"node-{i:04d}", cpu="64", memory="256Gi")) for i in range(nodes)}
    spec = GangSpec(min_member=gang)
    classes, slices = [device_class()], [node_slice(f"node-{i:04d}", per_node) for i in range(nodes)]
    own = {
        "metadata": {"name": "one", "namespace": "team-a", "resourceVersion": "1"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}}},
    }
    others = [
        {
            "metadata": {"name": f"unused-{i}", "namespace": "tenant-x", "resourceVersion": "1"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": "gpu",
                                    "selectors": [
                                        {"cel": {"expression": f'device.attributes["{DRIVER}"].index != {i}'}}
                                    ],
                                },
                            }
                        ]
                    }
                }
            },
        }
        for i in range(count)
    ]
    waiting = frozenset({("template", "team-a", "one")})
    pods = {f"team-a/{p['metadata']['name']}": p for p in gang_pods(gang, claims=True)}
    timings: dict[int, tuple[list[float], list[float]]] = {0: ([], []), count: ([], [])}
    for _ in range(repeats):
        for extra in (0, count):
            memo, book = devices.Memo(), PoolBook()
            started = time.perf_counter()
            book.apply({f"/{s['metadata']['name']}": s for s in slices})
            # as the controller's watch gives it: the templates' list version, unchanged between passes
            inventory = devices.inventory_from(
                classes, (), [], [own, *others[:extra]], memo, book.gathered(), templates_version="1"
            )
            inventory.waiting = waiting
            index = ClusterIndex()
            index.apply_nodes(raw_nodes)
            index.use_devices(inventory)
            index.apply_pods(pods)
            state, released = one_pass(index, spec)
            timings[extra][0].append(time.perf_counter() - started)
            assert state == "Release" and released == gang, state
            between_passes()
            for step in range(STEADY_PASSES):
                republished = node_slice("node-0000", per_node, version=str(step + 2))
                started = time.perf_counter()
                book.apply({"/node-0000-gpus": republished})
                again = devices.inventory_from(
                    classes, (), [], [own, *others[:extra]], memo, book.gathered(), templates_version="1"
                )
                again.waiting = waiting
                index.use_devices(again.remembering(index.devices))
                state, released = one_pass(index, spec)
                timings[extra][1].append(time.perf_counter() - started)
                assert state == "Release" and released == gang, state
                between_passes()
    base, loaded = timings[0], timings[count]
    print(
        f"{nodes} nodes, {nodes * per_node} devices, a {gang}-pod gang; {count} unused templates in another namespace"
    )
    for label, at in (("cold pass", 0), ("steady pass (one slice changed)", 1)):
        without, beside = statistics.median(base[at]), statistics.median(loaded[at])
        print(
            f"  {label}: {without * 1000:.0f} ms without, {beside * 1000:.0f} ms beside them "
            f"({beside / without:.2f}x; target: within 1.10x)"
        )


def runtimes(devices_each: int = 2000) -> None:
    """One evaluation of a usual selector (a driver, a model, a `matches` on the uuid) on cel-cpp and on
    cel-python, side by side in this run, on devices each with a UUID of its own."""
    expression = (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "h100"'
        f' && device.attributes["{DRIVER}"].uuid.matches("^GPU-[0-9a-f-]+$")'
    )
    facts = [
        (DRIVER, {"model": {"string": "h100"}, "uuid": {"string": f"GPU-{i:08x}-{i * 7919:08x}"}}, {}, False)
        for i in range(devices_each)
    ]
    fast = device_cel_fast.fast_selector(expression) if device_cel_fast.cel is not None else None
    took: dict[str, float] = {}
    for runtime in ("cel-cpp", "cel-python"):
        if runtime == "cel-cpp" and fast is None:
            continue
        started = time.perf_counter()
        for driver, attributes, capacity, shared in facts:
            if runtime == "cel-cpp":
                assert fast is not None
                device = device_cel_fast.device_map(fast, driver, attributes, shared)
                assert device is not None and device_cel_fast.evaluate(fast, device, expression) is True
            else:
                device_cel.matches(expression, device_cel.device_variable(driver, attributes, capacity, shared))
        took[runtime] = (time.perf_counter() - started) / devices_each
    shown = ", ".join(f"{name} {seconds * 1e6:.0f} us" for name, seconds in took.items())
    ratio = f" ({took['cel-python'] / took['cel-cpp']:.0f}x)" if len(took) == 2 else ""
    print(f"one selector on one device, {devices_each} devices each with its own UUID: {shown}{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gang", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--unused-templates", type=int, default=0, help="measure the gang beside this many templates no pod names"
    )
    parser.add_argument(
        "--shape", choices=["plain", "alternatives", "constraints", "counters", "capacity"], default="plain"
    )
    parser.add_argument("--allocated", type=int, default=0, help="devices per node held by other teams' claims")
    parser.add_argument("--unique", action="store_true", help="each device with a UUID of its own, as drivers publish")
    parser.add_argument(
        "--cel",
        choices=["cpp", "python"],
        default="cpp",
        help="plain selectors on cel-cpp (decide/device_cel_fast.py, the default) or all on cel-python",
    )
    args = parser.parse_args()
    device_cel_fast.ENABLED = args.cel == "cpp" and device_cel_fast.cel is not None
    runtimes()
    global SHAPE, ALLOCATED, UNIQUE
    SHAPE, ALLOCATED, UNIQUE = args.shape, args.allocated, args.unique
    if ALLOCATED and (SHAPE == "capacity" or args.devices <= ALLOCATED):
        parser.error("--allocated holds whole devices, fewer than --devices, and not with --shape capacity")
    if args.unused_templates:
        unused_templates(args.nodes, args.gang, args.devices, args.unused_templates, args.repeats)
    else:
        run(args.nodes, args.gang, args.devices, args.repeats)


if __name__ == "__main__":
    main()
