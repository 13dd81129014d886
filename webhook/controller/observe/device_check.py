"""The devices check a gang's release must pass: every chosen pod's claims allocated on its chosen node,
after the claims of the pods released before it and not allocated yet, as kube-scheduler would allocate
them pod by pod (decide/device_allocator.py).

A gang that waits is decided again at every change of a node or a slice anywhere, and its check
allocated every pod's claims each time (60 ms for a 1,000-pod gang with constraints, bench/devices.py).
With the gang's record the check answers again from it:
- as a whole, while nothing it read changed (`CheckRead`);
- node by node, where every pool is one node's and no claim is shared between pods: then what is
  allocated on one node takes nothing another node could use, and each node's answer holds while its
  own devices, its pods and the pods released before onto it are the same (a slice republished is
  one node's allocations again, not the gang's: only that node's part is looked at).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from webhook.controller.decide.device_alike import nodes_alike_key
from webhook.controller.decide.device_in_turn import allocate_in_turn
from webhook.controller.decide.devices import Allocator, Demand, Inventory
from webhook.controller.decide.shapes import Node
from webhook.controller.observe.cluster import ClusterIndex
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.store import GangRecord
from webhook.gangs.model import Obj

# (the place in the gang's order of the first group that failed; why): a node's answer, None where all fit
NodeAnswer = tuple[int, str] | None
# per node of a placement answered node by node: what its part read, and its answer
NodeAnswers = dict[str, tuple[tuple[object, ...], NodeAnswer]]


@dataclass(frozen=True, eq=False)
class CheckRead:
    """What a devices check read, and its answers node by node when it was answered so (`nodes`): the
    devices' pictures (`devices_epoch`; the index's newest, `generation`: a node whose devices changed
    since has a newer one), the placement and the gang's pods (by uid: a pod's claims never change, nor
    the templates while `devices_epoch` is the same), the chosen nodes not in the index, the pods
    released before that hold a node, and where a pool selects nodes by label, the nodes' epoch."""

    devices_epoch: int
    every_node: int | None
    generation: int
    chosen: Mapping[str, str]
    uids: Mapping[str, str]
    missing: frozenset[str]
    promised: tuple[tuple[str, str, bool, int], ...]
    on: frozenset[str]  # the chosen nodes
    nodes: NodeAnswers | None = None

    @staticmethod
    def of(index: ClusterIndex, inventory: Inventory, uids: Mapping[str, str], chosen: Mapping[str, str]) -> CheckRead:
        on = frozenset(chosen.values())
        return CheckRead(
            index.devices_epoch,
            index.nodes_epoch if inventory.has_node_selecting_pools else None,
            index.device_generation,
            dict(chosen),
            uids,
            frozenset(node for node in on if node not in index.nodes),
            tuple(
                (view.uid, node, node in index.nodes, index.device_epoch(node))
                for view, _, node in index.promised_device_pods()
            ),
            on,
        )

    def changed_nodes(self, index: ClusterIndex, now: CheckRead) -> set[str] | None:
        """The chosen nodes whose devices changed since this was read, where nothing else it read did
        (None where something did)."""
        if (self.devices_epoch, self.every_node, self.missing, self.promised) != (
            now.devices_epoch,
            now.every_node,
            now.missing,
            now.promised,
        ):
            return None
        if self.chosen != now.chosen or self.uids != now.uids:
            return None
        return index.devices_changed_since(self.generation, now.on)


@dataclass
class _Work:
    """What one check allocates: the pods released before, by node, and the gang's chosen pods alike on
    one node (one demand), in name order, each group numbered by its place in that order."""

    promised: list[tuple[str, str, Demand]] = field(default_factory=list)  # (node, uid, demand), in turn
    groups: dict[str, list[tuple[int, Demand, list[str]]]] = field(default_factory=dict)  # node -> groups


def devices_check(
    index: ClusterIndex, gang: GangView, record: GangRecord | None = None
) -> Callable[[Mapping[str, str]], str | None] | None:
    """The check of a gang whose pods claim devices (None for one whose pods claim none)."""
    inventory = index.devices
    if inventory is None or not any(view.claims_devices for view in gang.pods):
        return None
    raw_of = {view.name: raw for view, raw in zip(gang.pods, gang.raw, strict=True)}
    uid_of = {view.name: view.uid for view in gang.pods}

    def work(chosen: Mapping[str, str]) -> _Work:
        found = _Work()
        allocated = inventory.allocated_pods()
        demand = _demands_of(inventory)
        # released before, not allocated yet (kube-scheduler is binding them): their devices come first
        for view, raw, node in index.promised_device_pods():
            if view.uid in allocated or (view.name in chosen and view.namespace == gang.namespace):
                continue
            if node in index.nodes:
                found.promised.append((node, view.uid, demand(view.namespace, raw)))
        alike: dict[tuple[str, int], tuple[Demand, list[str]]] = {}
        for name, node_name in sorted(chosen.items()):
            pod = raw_of.get(name)
            if pod is not None and node_name in index.nodes:
                wanted = demand(gang.namespace, pod)
                alike.setdefault((node_name, id(wanted)), (wanted, []))[1].append(name)
        for at, ((node, _), (wanted, names)) in enumerate(alike.items()):
            found.groups.setdefault(node, []).append((at, wanted, names))
        return found

    def check(chosen: Mapping[str, str]) -> str | None:
        read = CheckRead.of(index, inventory, uid_of, chosen)
        known = record.device_check if record is not None else None
        before = known[0] if known is not None and isinstance(known[0], CheckRead) else None
        changed = before.changed_nodes(index, read) if before is not None else None
        if known is not None and changed is not None and not changed:
            return known[1]
        unanswered = inventory.memo.unanswered
        todo, nodes = work(chosen), None
        if record is None or not _nodes_apart(inventory, todo):
            found = _allocate(index, inventory, todo.groups, todo.promised)
            answer = found[1] if found is not None else None
        else:
            last = before.nodes if before is not None and before.nodes is not None else {}
            nodes = _node_by_node(index, inventory, todo, uid_of, last, changed)
            failed = [answer for _, answer in nodes.values() if answer is not None]
            answer = min(failed)[1] if failed else None
        # a selector no evaluator could answer now (the CEL worker not started) is asked again next time
        if record is not None and inventory.memo.unanswered == unanswered:
            record.device_check = (replace(read, nodes=nodes), answer)
        return answer

    return check


def _demands_of(inventory: Inventory) -> Callable[[str, Obj], Demand]:
    """`Inventory.demand` for the pods of one check, asked once per spec parts alike: a gang's pods share
    their template's claims and containers (one object each in the controller's cache, interning.py),
    and those objects live while the check does, so their ids name them."""
    seen: dict[tuple[str, int, int], Demand] = {}

    def demand(namespace: str, pod: Obj) -> Demand:
        spec = pod.get("spec") or {}
        key = (namespace, id(spec.get("resourceClaims")), id(spec.get("containers")))
        found = seen.get(key)
        if found is None:
            found = seen[key] = inventory.demand(namespace, spec)
        return found

    return demand


def _node_by_node(
    index: ClusterIndex,
    inventory: Inventory,
    todo: _Work,
    uid_of: Mapping[str, str],
    known: NodeAnswers,
    changed: set[str] | None,
) -> NodeAnswers:
    """Each node's part answered again from the last check (`known`) while what it read is the same;
    where only the devices of the nodes `changed` did since (nothing else the check reads), the other
    nodes' answers kept without reading their parts again; a node alike in its devices to one whose pods
    were all allocated in this check, with pods alike, answered by it (5,000 nodes of one model, a gang
    of 1,000: one allocation, not 250)."""
    answers: NodeAnswers = {}
    fitted: set[tuple[object, ...]] = set()
    promised_on: dict[str, list[tuple[str, str, Demand]]] = {}
    for entry in todo.promised:  # in turn, per node
        promised_on.setdefault(entry[0], []).append(entry)
    for node, groups in todo.groups.items():
        mine = known.get(node) if changed is not None and node not in changed else None
        if mine is not None:
            answers[node] = mine
            continue
        promised = promised_on.get(node, [])
        # a pod's claims never change (its uid says which pod), nor do the templates while `devices_epoch`
        # is the same
        read = (
            index.devices_epoch,
            index.device_epoch(node),
            tuple((at, tuple((n, uid_of.get(n)) for n in names)) for at, _, names in groups),
            tuple(uid for _, uid, _ in promised),
        )
        mine = known.get(node)
        if mine is None or mine[0] != read:
            kind = _kind_of(inventory, index.nodes[node], groups, promised)
            if kind is not None and kind in fitted:
                mine = (read, None)
            else:
                unanswered = inventory.memo.unanswered
                answer = _allocate(index, inventory, {node: groups}, promised)
                # a selector no evaluator could answer now is asked again next time
                answered = inventory.memo.unanswered == unanswered
                mine = (read if answered else (), answer)
                if kind is not None and answered and answer is None:
                    fitted.add(kind)
        answers[node] = mine
    return answers  # the nodes of this placement only


def _kind_of(
    inventory: Inventory,
    node: Node,
    groups: Sequence[tuple[int, Demand, list[str]]],
    promised: Sequence[tuple[str, str, Demand]],
) -> tuple[object, ...] | None:
    """What one node's allocation depends on, where its devices count as a kind's (device_alike.py: its own
    slice, parsed as every slice alike, with the same devices taken): its pods' demands in turn. A node's
    answer on its own devices differs from another's of the kind only by names (a failure names them: only
    success is shared). None where the node is not of a kind."""
    alike = nodes_alike_key(inventory, node, ())
    if alike is None:
        return None
    return (
        alike,
        tuple((id(demand), len(names)) for _, demand, names in groups),
        tuple(id(demand) for _, _, demand in promised),
    )


def _nodes_apart(inventory: Inventory, todo: _Work) -> bool:
    """Whether each node's allocations take nothing another's could: every pool one node's, and no claim
    shared between pods (allocated once, where its devices reach)."""
    if inventory.has_node_selecting_pools:
        return False
    demands = [d for groups in todo.groups.values() for _, d, _ in groups]
    demands += [d for _, _, d in todo.promised]
    return not any(claim.shared for demand in demands for claim in demand.claims)


def _allocate(
    index: ClusterIndex,
    inventory: Inventory,
    groups: Mapping[str, Sequence[tuple[int, Demand, list[str]]]],
    promised: Sequence[tuple[str, str, Demand]],
) -> NodeAnswer:
    """The pods released before, then the groups in the gang's order: allocated together where nothing
    else can take the same devices (Allocator.allocate_alike), else one by one. The first pod that
    cannot be, and why."""
    allocator = Allocator(inventory, nodes=index.node_list())  # the reach of shared claims: read when one is
    for node, _, demand in promised:
        allocator.allocate(demand, index.nodes[node])
    ordered = sorted((at, node, demand, names) for node, found in groups.items() for at, demand, names in found)
    for at, node, demand, names in ordered:
        target = index.nodes[node]
        if len(names) > 1 and allocator.allocate_alike(demand, target, len(names)):
            continue
        done = allocate_in_turn(allocator, demand, target, len(names)) if len(names) > 1 else 0
        for name in names[done:]:
            why = allocator.allocate(demand, target)
            if why is not None:
                return at, f"pod {name} on {node}: {why}"
    return None
