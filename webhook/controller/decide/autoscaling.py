"""What an autoscaler's node pools could ever hold, pure: the rule that keeps placeholders from asking a
Karpenter NodePool for a pod none of its nodes could take (controller/act/placeholders.py).

Karpenter makes a node for a pod only when the pod's node requirements meet a NodePool's, the pod
tolerates the pool's taints and the pool's limits leave room (karpenter pkg/controllers/provisioning/
scheduling/nodeclaim.go CanAdd; the labels it knows without a pool naming them: pkg/apis/v1/labels.go
WellKnownLabels, and RestrictedLabels: no new node carries a chosen kubernetes.io/hostname). What is
not modelled here (instance types' sizes, requirement operators other than In) is taken as possible:
a pool is ruled out only for what is sure."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.controller.decide.devices import CLASS_RESOURCE_PREFIX
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.shapes import PODS, Shape, Taint, fit_count, show, thaw, tolerates

HOSTNAME = "kubernetes.io/hostname"
# pkg/apis/v1/labels.go WellKnownLabels and NormalizedLabels: values a pool's nodes may carry unnamed
WELL_KNOWN = frozenset(
    {
        "karpenter.sh/nodepool",
        "karpenter.sh/capacity-type",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "node.kubernetes.io/windows-build",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
    }
)
# each cloud provider adds its own (the KWOK provider's karpenter.kwok.sh/..., AWS's karpenter.k8s.aws/...)
PROVIDER_DOMAINS = ("karpenter.kwok.sh/", "karpenter.k8s.aws/", "karpenter.azure.com/", "karpenter.k8s.gcp/")


@dataclass(frozen=True)
class NodePoolRoom:
    """A Karpenter NodePool: what it may still add (`spec.limits` less the capacity it has made,
    `status.resources`, in a shape's units; a resource it does not limit is not listed), the labels its
    nodes carry (a key to the values allowed, None for any) and its nodes' taints."""

    name: str
    limits: Mapping[str, int]
    used: Mapping[str, int]
    labels: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    def short_of(self, need: Mapping[str, int]) -> str | None:
        """The first limited resource this pool cannot add `need` of, None when it can add all of it."""
        for name, amount in sorted(need.items()):
            limit = self.limits.get(name)
            if limit is not None and amount > limit - self.used.get(name, 0):
                return name
        return None

    def values_of(self, key: str) -> frozenset[str] | None:
        """The values this pool's nodes may carry for `key` (None: any; empty: never the label)."""
        if key in self.labels:
            return self.labels[key]
        if key in WELL_KNOWN or key.startswith(PROVIDER_DOMAINS):
            return None
        return frozenset()

    def refusal(self, shape: Shape, claims_devices: bool = False) -> str | None:
        """Why no node this pool could ever make takes a pod of `shape`; None when one might.
        `claims_devices`: its spec names claims, whether or not their devices are in `shape` yet (a
        template the controller has not seen adds none, and the pod still needs a device)."""
        if claims_devices or any(name.startswith(CLASS_RESOURCE_PREFIX) and amount for name, amount in shape.requests):
            # a new node's devices are published by a driver once it runs there; Karpenter simulates DRA
            # only with --ignore-dra-requests=false (v1.14+) and from what its cloud provider declares,
            # which gangkeeper cannot read: a placeholder would bring nodes that may carry no device
            return "the pod claims devices through DRA, which no node it makes is known to carry"
        for key, value in shape.node_selector:
            if key == HOSTNAME:
                return f"nodeSelector {key}={value} names a node, and a new node's name is its own"
            allowed = self.values_of(key)
            if allowed is not None and value not in allowed:
                return f"its nodes never carry {key}={value}"
        terms = thaw(shape.affinity_terms) if shape.affinity_terms is not None else None
        if terms and not any(self._term_possible(term) for term in terms):
            return "its nodes never match the pod's required node affinity"
        tolerations = thaw(shape.tolerations) or []
        for taint in self.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
                return f"its nodes' taint {taint} is not tolerated"
        for name, amount in shape.requests:
            limit = self.limits.get(name)
            if name != PODS and limit is not None and amount > limit:
                return f"one pod's {show(name, amount)} is more than its spec.limits {show(name, limit)}"
        return None

    def _term_possible(self, term: Mapping[str, Any]) -> bool:
        for expression in term.get("matchExpressions") or []:
            key = expression.get("key", "")
            if expression.get("operator") != "In":
                continue  # the other operators are taken as possible (not modelled)
            if key == HOSTNAME:
                return False
            allowed = self.values_of(key)
            if allowed is not None and not allowed & set(expression.get("values") or []):
                return False
        return True


def addable(pools: Sequence[NodePoolRoom]) -> dict[str, int]:
    """What the NodePools may still add, summed, for each resource every one of them limits (one that
    some pool does not limit may grow without bound, and is left out)."""
    if not pools:
        return {}
    names = set.intersection(*(set(pool.limits) for pool in pools))
    return {name: sum(max(0, pool.limits[name] - pool.used.get(name, 0)) for pool in pools) for name in names}


def never_held(
    shapes: Mapping[str, Shape], pools: Sequence[NodePoolRoom], claiming: Collection[str] = ()
) -> str | None:
    """Why no NodePool could ever make a node for one of a gang's pods (pod name -> its shape; `claiming`:
    the pods whose specs name device claims), each pool's reason named; None when every pod has a pool
    that might, or no pool is known."""
    if not pools:
        return None
    # each (shape, claims) judged once, named by its first pod: a gang's pods share a few
    first_of: dict[tuple[Shape, bool], str] = {}
    for name, shape in sorted(shapes.items()):
        first_of.setdefault((shape, name in claiming), name)
    for (shape, claims), name in first_of.items():
        reasons = [(pool.name, pool.refusal(shape, claims)) for pool in pools]
        if all(reason is not None for _, reason in reasons):
            each = "; ".join(f"NodePool {pool}: {reason}" for pool, reason in reasons)
            return f"no NodePool can ever make a node for pod {name} ({each})"
    return None


def beyond_limits(shapes: Sequence[Shape], allocatable: Mapping[str, int], pools: Sequence[NodePoolRoom]) -> str | None:
    """Why a gang's waiting pods could never all have room however the NodePools grow: for a resource
    every pool limits, they need more than the nodes there are could hold (all their allocatable, as if
    nothing else ran) and every pool's remaining limit (`spec.limits` less `status.resources`) could add.
    The nodes a pool made are in both its `used` and `allocatable`, so the bound does not move as nodes
    come and go. None when they might fit, or no pool is known."""
    if not pools or not shapes:
        return None
    need: dict[str, int] = {}
    for shape in shapes:
        for name, amount in shape.requests:
            if name != PODS:
                need[name] = need.get(name, 0) + amount
    for name, amount in sorted(need.items()):
        if any(name not in pool.limits for pool in pools):
            continue  # a pool without a limit on it may add any amount
        addable = {pool.name: max(0, pool.limits[name] - pool.used.get(name, 0)) for pool in pools}
        have = allocatable.get(name, 0)
        if amount > have + sum(addable.values()):
            each = "; ".join(
                f"NodePool {pool.name} may add {show(name, addable[pool.name])} more (spec.limits "
                f"{show(name, pool.limits[name])})"
                for pool in pools
            )
            return (
                f"its {len(shapes)} waiting pods need {show(name, amount)}, more than the nodes there are "
                f"({show(name, have)}) and every NodePool's limits allow: {each}"
            )
    return None


def unseen_by_autoscalers(pods: Sequence[PodView], scheduler: str) -> str | None:
    """What to say of a gang another scheduler holds, none of it bound, when the scheduler marked some of
    its pending pods Unschedulable and not the others: autoscalers add nodes only for Unschedulable pods
    (Karpenter pkg/utils/pod/scheduling.go FailedToSchedule), and count the free room the others would
    have taken as room for these, so no node comes. Volcano's gang plugin marks the tasks it could place
    `Schedulable` while the gang waits (volcano-sh/volcano#3976; seen on the real tier with Karpenter)."""
    live = [p for p in pods if not p.terminal]
    if any(p.node_name for p in live):
        return None
    refused = sum(1 for p in live if p.unschedulable)
    # a pod the scheduler has not looked at yet (no PodScheduled condition) is not counted: it may still be refused
    unseen = sum(1 for p in live if p.passed_over)
    if not refused or not unseen:
        return None
    return (
        f"{unseen} of its {len(live)} pending pods are not marked Unschedulable by the {scheduler} scheduler, so "
        "no autoscaler adds nodes for them and the free room they would take is counted for the others: the "
        "gang waits until room frees; on an autoscaled cluster the gate backend brings nodes for the whole gang"
    )


# a provider's well-known labels for an instance type's size (karpenter kwok/apis/v1alpha1/labels.go;
# the AWS provider's karpenter.k8s.aws/instance-cpu and instance-memory): cores, and MiB
INSTANCE_CPU = ("karpenter.kwok.sh/instance-cpu", "karpenter.k8s.aws/instance-cpu")
INSTANCE_MEMORY = ("karpenter.kwok.sh/instance-memory", "karpenter.k8s.aws/instance-memory")
# what a node keeps for itself out of its instance type's size, taken above what the providers reserve
# (the KWOK provider 100m and 10Mi, cloudprovider/helpers.go; AWS under one core below ~370 cores, and
# 11Mi per pod + 255Mi + a 100Mi eviction threshold): a placeholder sized to the rest fits the node
KEPT_CPU = 1000
KEPT_MEMORY_SHARE = 0.10
KEPT_MEMORY_LEAST = 2 * 1024**3
# the least memory an instance type has per CPU among the usual families (compute-optimized: AWS c5 to
# c7, the KWOK provider's c family in kwok/cloudprovider/instance_types.json: 2 GiB a CPU)
LEAST_MEMORY_PER_CPU = 2 * 1024**3


def instance_room(pool: NodePoolRoom) -> dict[str, int]:
    """What one node of `pool` is sure to hold, from the instance size its requirements pin (`In`; the
    smallest value): cpu in millicores, memory in bytes; a resource it does not pin is not listed. A pool
    that pins its CPUs but not its memory is taken at the least memory a CPU comes with."""
    cpus = [int(v) for key in INSTANCE_CPU for v in pool.labels.get(key) or () if v.isdigit()]
    mebibytes = [int(v) for key in INSTANCE_MEMORY for v in pool.labels.get(key) or () if v.isdigit()]
    room: dict[str, int] = {}
    if cpus:
        room["cpu"] = min(cpus) * 1000 - KEPT_CPU
    memory = min(mebibytes) * 1024**2 if mebibytes else min(cpus) * LEAST_MEMORY_PER_CPU if cpus else 0
    if memory:
        room["memory"] = memory - max(int(memory * KEPT_MEMORY_SHARE), KEPT_MEMORY_LEAST)
    return room


def pods_per_node(shape: Shape, room: Mapping[str, int]) -> int:
    """How many pods of `shape` one node with `room` holds; 1 when the room does not bound every resource
    the pod asks for (an unknown size is never guessed: a placeholder too large for every node would
    bring none)."""
    counts: list[int] = []
    for name, amount in shape.requests:
        if name == PODS or amount <= 0:
            continue
        if name not in room:
            return 1
        counts.append(room[name] // amount)
    if PODS in room:
        counts.append(room[PODS])
    return max(1, min(counts)) if counts else 1


def node_room(pool: NodePoolRoom, made: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """One node of `pool`: the smallest of what the nodes it made can hold (their allocatable, each
    resource's least), else what its pinned instance size is sure to hold."""
    if made:
        names = set.intersection(*(set(node) for node in made))
        return {name: min(node[name] for node in made) for name in names}
    return instance_room(pool)


def pods_per_placeholder(
    shape: Shape, pools: Sequence[NodePoolRoom], made: Mapping[str, Sequence[Mapping[str, int]]]
) -> int:
    """How many of a gang's pods of `shape` one placeholder stands for: as many as one node of every
    NodePool that could hold them takes, so each placeholder brings one node and the gang's pods fill it
    (`made`: a pool's name -> the allocatable of the nodes it made); 1 when no pool's node size is known."""
    fitting = [pool for pool in pools if pool.refusal(shape) is None]
    if not fitting:
        return 1
    return min(pods_per_node(shape, node_room(pool, made.get(pool.name, ()))) for pool in fitting)


def batches(pods: int, per_placeholder: int) -> list[int]:
    """`pods` split into the fewest placeholders of at most `per_placeholder` each, their sizes even (so
    none is small enough to slip into a gap on the nodes there are and leave a node's worth unasked)."""
    if pods <= 0:
        return []
    count = -(-pods // max(1, per_placeholder))
    base, larger = divmod(pods, count)
    return [base + 1] * larger + [base] * (count - larger)


def on_free_room(
    waiting: Mapping[Shape, int],
    eligible: Callable[[Shape], Iterable[str]],
    free: Mapping[str, Mapping[str, int]],
) -> dict[Shape, int]:
    """How many of a gang's waiting pods of each shape the free room there is holds now, each shape in
    turn on the nodes it may go to (what one takes is gone for the next): those need no placeholder."""
    taken: dict[str, dict[str, int]] = {}
    held: dict[Shape, int] = {}
    for shape, count in waiting.items():
        got = 0
        for node in eligible(shape):
            if got >= count:
                break
            room = taken.get(node) or free.get(node)
            if room is None:
                continue
            fits = min(fit_count(shape, room), count - got)
            if fits:
                left = dict(room)
                for name, amount in shape.requests:
                    left[name] = left.get(name, 0) - amount * fits
                taken[node] = left
                got += fits
        held[shape] = got
    return held
