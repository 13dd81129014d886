"""The placeholder pods of a gang waiting on an autoscaler (act/placeholders.py makes and deletes them):
their names and objects, which members need one, and what they ask of the NodePools. Pure.

A placeholder is never a member (it carries no gang label, and gangkeeper.io/skip keeps every webhook
off it); it never preempts and is the first thing any scheduler preempts (PriorityClass
gangkeeper-placeholder, value -10: the lowest Cluster Autoscaler still scales up for); it is owned by the
gang's Gang object, so the garbage collector removes it when the gang or gangkeeper goes; the controller
deletes it as soon as its gang is released, deleted, times out, gives up, waits for anything other than
capacity, or its namespace opts out.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from webhook import contract
from webhook.controller.decide.autoscaling import (
    NodePoolRoom,
)
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.shapes import PODS as POD_COUNT
from webhook.controller.decide.shapes import Shape, show
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.observe.books import API_VERSION as GANG_API_VERSION
from webhook.controller.observe.books import KIND as GANG_KIND
from webhook.controller.observe.gangview import GangView
from webhook.gangs.model import Obj

# the states in which a gang waits on capacity alone (not on the queue, its members, a backoff)
WAITS_ON_CAPACITY = (GangState.WAITING_FOR_CAPACITY, GangState.NEVER_FITS)
NODEPOOL_LABEL = "karpenter.sh/nodepool"  # on each node Karpenter made (pkg/apis/v1/labels.go)
# a pause container ends at once on SIGTERM; the grace is a bound, not a wait
PLACEHOLDER_GRACE_SECONDS = 5


@functools.lru_cache(maxsize=4096)
def shape_tag(shape: Shape) -> str:
    """A short, stable name for a pod shape: the gang's pods alike share their placeholders. Kept per
    shape: a waiting gang's members are tagged each pass, and a Shape's repr was an eighth of the
    controller's CPU in bench/cluster.py --scenarios autoscale (py-spy)."""
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:10]


def placeholder_name(owner_uid: str, tag: str, index: int) -> str:
    return f"placeholder-{owner_uid}-{tag}-{index}"


def parse_name(name: str, owner_uid: str) -> tuple[str, int] | None:
    """(shape tag, index) of one of this Gang's placeholders by its name (names are the controller's:
    only it may make a Gang-owned pod), None for any other."""
    prefix, _, rest = name.partition(f"placeholder-{owner_uid}-")
    tag, _, index = rest.partition("-")
    return (tag, int(index)) if not prefix and tag and index.isdigit() else None


def stands_for(shape: Shape, units: tuple[tuple[str, int], ...]) -> int:
    """How many pods of `shape` a placeholder of `units` stands for (it asks for that many times theirs)."""
    have = dict(units)
    counts = [have.get(name, 0) // amount for name, amount in shape.requests if name != POD_COUNT and amount > 0]
    return max(1, min(counts)) if counts else 1


def quantities(requests: tuple[tuple[str, int], ...], times: int = 1) -> dict[str, str]:
    """A shape's units (cpu in millicores, the rest in whole units), `times` over, as resource quantities."""
    return {
        name: f"{amount * times}m" if name == "cpu" else str(amount * times)
        for name, amount in requests
        if name != "pods"
    }


def placeholder_for(
    member: PodView,
    raw: Mapping[str, Any],
    gang_object: Mapping[str, Any],
    image: str,
    name: str,
    pods: int = 1,
    on_pools: Sequence[str] = (),
) -> Obj:
    """The pause pod that stands in for `pods` pods shaped like `member` (raw: its pod as the informer
    keeps it): their requests summed, the member's node selector, node affinity and tolerations; with
    `on_pools`, only on those NodePools' nodes (`on_nodepools`)."""
    spec = raw.get("spec") or {}
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity")
    if on_pools:
        node_affinity = on_nodepools(node_affinity, on_pools)
    requests = quantities(member.shape.requests, pods)
    pod = pause_pod(name, member.namespace, gang_object, image, {"requests": requests, "limits": requests})
    for key in ("nodeSelector", "tolerations"):
        if spec.get(key):
            pod["spec"][key] = spec[key]
    if node_affinity:
        pod["spec"]["affinity"] = {"nodeAffinity": node_affinity}
    return pod


def pause_pod(
    name: str,
    namespace: str,
    gang_object: Mapping[str, Any],
    image: str,
    resources: Obj,
    stands_for: str | None = None,
    container: str = "placeholder",
) -> Obj:
    """A pause pod of the gang's Gang, as the controller's self-protection policy allows it to create
    one (gangkeeper-controller-creates-placeholders-only): the placeholder label (`stands_for`, by default
    the Gang's name), gangkeeper.io/skip, the placeholder PriorityClass, the configured image, owned by
    the Gang, no service account token, unprivileged."""
    meta = gang_object.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                contract.PLACEHOLDER_LABEL: stands_for or str(meta.get("name", "")),
                contract.SKIP_LABEL: "true",
            },
            "ownerReferences": [
                {
                    "apiVersion": GANG_API_VERSION,
                    "kind": GANG_KIND,
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {
            "priorityClassName": contract.PLACEHOLDER_PRIORITY_CLASS,
            "terminationGracePeriodSeconds": PLACEHOLDER_GRACE_SECONDS,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65535,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": container,
                    "image": image,
                    "resources": resources,
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def on_nodepools(node_affinity: Mapping[str, Any] | None, pools: Sequence[str]) -> Obj:
    """A pod's node affinity narrowed to the nodes of `pools` (the label Karpenter puts on each node it
    makes, pkg/apis/v1/labels.go): every required term also asks for it (the terms are ORed)."""
    narrowed: Obj = copy.deepcopy(dict(node_affinity or {}))
    required = narrowed.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    wanted = {"key": NODEPOOL_LABEL, "operator": "In", "values": sorted(pools)}
    required["nodeSelectorTerms"] = [
        {**term, "matchExpressions": [*(term.get("matchExpressions") or []), wanted]} for term in terms
    ]
    return narrowed


def waiting_members(gang: GangView, decision: Decision, autoscaled: bool) -> list[tuple[PodView, Obj]]:
    """The gated members with their pods, while the gang waits on capacity alone on an autoscaled
    cluster; none otherwise."""
    if not autoscaled or decision.state not in WAITS_ON_CAPACITY:
        return []
    return [(view, raw) for view, raw in zip(gang.pods, gang.raw, strict=True) if view.gated and not view.terminal]


def refused_whole(gang: GangView) -> list[tuple[PodView, Obj]]:
    """The pending pods of a gang another gang scheduler places, while none of it is bound and that
    scheduler refused some (PodScheduled False, Unschedulable): it waits on capacity; none otherwise."""
    live = [(view, raw) for view, raw in zip(gang.pods, gang.raw, strict=True) if not view.terminal]
    if any(view.node_name for view, _ in live) or not any(view.unschedulable for view, _ in live):
        return []
    return live


def asked_of_pools(
    own: Mapping[str, tuple[str, tuple[tuple[str, int], ...]]],
    keep: set[str],
    make: Sequence[tuple[str, int, tuple[PodView, Obj]]],
    node: Mapping[str, int],
) -> dict[str, int]:
    """What a gang's placeholders ask the autoscaler to add: those kept that are not bound yet, and the
    new ones; each at least one node's room (`node`, when known: a placeholder sized for a node brings a
    whole one, and a NodePool's limit counts nodes' capacity)."""
    asks: dict[str, int] = {}

    def add(units: Mapping[str, int]) -> None:
        for name in units.keys() | node.keys():
            if name != POD_COUNT:
                asks[name] = asks.get(name, 0) + max(units.get(name, 0), node.get(name, 0))

    for key in keep:
        bound_to, units = own.get(key, ("", ()))
        if not bound_to:
            add(dict(units))
    for _, pods, (view, _) in make:
        add({name: amount * pods for name, amount in view.shape.requests})
    return asks


# a gang's waiting pods, counted by shape -> how many of each the free room there is holds now
FreeRoom = Callable[[Mapping[Shape, int]], Mapping[Shape, int]]


def on_free_room_counts(waiting: Sequence[tuple[PodView, Obj]], free_room: FreeRoom) -> Mapping[Shape, int]:
    """How many of the waiting pods of each shape `free_room` holds."""
    counts: dict[Shape, int] = {}
    for view, _ in waiting:
        counts[view.shape] = counts.get(view.shape, 0) + 1
    return free_room(counts) if counts else {}


def on_free(waiting: Sequence[tuple[PodView, Obj]], free_room: FreeRoom) -> set[str]:
    """The waiting members free room takes (by name, the first of each shape): they need no placeholder,
    and the room is not held for them (anyone may take it; if someone does, they get one then)."""
    held = dict(on_free_room_counts(waiting, free_room))
    free: set[str] = set()
    for view, _ in sorted(waiting, key=lambda member: member[0].name):
        if held.get(view.shape, 0) > 0:
            held[view.shape] -= 1
            free.add(view.name)
    return free


def progress(
    provisioned: int,
    waiting: int,
    own: Mapping[str, tuple[str, tuple[tuple[str, int], ...]]],
    pools: Sequence[NodePoolRoom] = (),
) -> str:
    """What the Gang says while the autoscaler works: how many of its waiting pods have room (free, or
    its placeholders' bound), and the NodePool limits that stop the rest, if every NodePool's does."""
    said = f"waiting for the autoscaler: capacity for {provisioned} of {waiting} pods provisioned"
    need: dict[str, int] = {}
    for node, units in own.values():
        for name, amount in units if not node else ():
            if name != POD_COUNT:
                need[name] = need.get(name, 0) + amount
    stopped = limits_in_the_way(pools, need)
    return f"{said}; {stopped}" if stopped else said


def limits_in_the_way(pools: Sequence[NodePoolRoom], need: Mapping[str, int]) -> str | None:
    """Why no NodePool adds what the gang's pods without room need: each one's limit, named; None when
    one of them may add it all (or none is known)."""
    shorts = [(pool, pool.short_of(need)) for pool in pools]
    if not need or not shorts or any(name is None for _, name in shorts):
        return None
    asked = ", ".join(show(name, amount) for name, amount in sorted(need.items()))
    each = "; ".join(
        f"NodePool {pool.name} may add {show(name, max(0, pool.limits[name] - pool.used.get(name, 0)))} more "
        f"(spec.limits {show(name, pool.limits[name])})"
        for pool, name in shorts
        if name is not None
    )
    return f"its pods without room need {asked}, more than any NodePool's limits allow: {each}"
