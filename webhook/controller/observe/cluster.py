"""The controller's running picture of the cluster, kept up to date by changes rather than rebuilt.

A pass used to turn every pod into a view and add up every node's free capacity: seconds at 150,000
pods, on every watch event. Here each changed pod is looked at once: its old contribution (capacity
held, host ports, gang membership) is taken back and its new one added. What a pass reads is then as
cheap as the number of gangs, not the number of pods.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from webhook import contract
from webhook.controller.decide import devices
from webhook.controller.decide.eligibility import Eligibility
from webhook.controller.decide.placement import Member, Placement
from webhook.controller.decide.pods import PodView, Release
from webhook.controller.decide.recovery import ever_placement
from webhook.controller.decide.shapes import HostPort, Node, Shape, Units
from webhook.controller.observe.device_nodes import DEVICE_GENERATIONS, DeviceNodes
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.holds import (
    Hold,
    PlaceholderHolds,
    PreemptionQueries,
    Seen,
    ShapesSeen,
    add_units,
    placeholder_owner,
)
from webhook.gangs.model import Obj
from webhook.gangs.pod import member_group


class ClusterIndex(PreemptionQueries, DeviceNodes, PlaceholderHolds):
    """Pods, nodes, each node's free capacity and host ports, and the gangs, updated by changes."""

    def __init__(
        self,
        releases: Callable[[str, str], Mapping[str, Release]] = lambda namespace, gang: {},
        mechanism_of: Callable[[Obj], str] = lambda pod: "gate",
    ) -> None:
        # the controller's release records of a gang (namespace, gang name): pod name -> record
        self.releases = releases
        # the name of the mechanism whose marks a member carries (backends Mechanisms.of_pod)
        self.mechanism_of = mechanism_of
        # gang -> its members' mechanisms and workload uids, counted as they change: a pass reads a
        # 1,000-pod gang's in one look, not one per pod each time one of them changed
        self._tallies: dict[str, tuple[Counter[str], Counter[str]]] = {}
        self._tallied: dict[str, tuple[str, str, str]] = {}  # member pod key -> (gang, mechanism, workload uid)
        self.pods: dict[str, Seen] = {}
        self.shapes = ShapesSeen()  # the pods' scheduling shapes, each worked out once
        self.nodes: dict[str, Node] = {}
        self.held: dict[str, Units] = {}  # node -> requests of the pods holding it (known node or not)
        self.free: dict[str, Units] = {}  # known nodes: allocatable minus what is held
        # node -> what pods being deleted there still hold: room on its way back (in `free`, held until gone)
        self.going: dict[str, Units] = {}
        self.yielding: dict[str, Units] = {}
        self.ports: dict[str, Counter[HostPort]] = {}
        self.held_by_priority: dict[int, dict[str, Units]] = {}
        self.nodes_epoch = 0  # changes whenever a node does: static fits must be checked again
        self._grown: set[str] = set()  # nodes with more room than at the last take_grown()
        self.room_epoch = 0  # changes whenever a node gains room or changes: what a verdict is stamped with
        self._holds: dict[str, Hold] = {}
        self._on_node: dict[str, set[str]] = {}  # node -> keys of the pods holding it (preemption's candidates)
        self._members: dict[str, dict[str, tuple[PodView, Obj]]] = {}
        self.gang_versions: dict[str, int] = {}  # changes with any change of a gang's pods
        # changes only when a gang gains or loses a pod, or one of its pods ends: what its queue place and
        # its members' order rest on (a 1,000-pod gang's events each sorted its pods again, bench/cluster.py)
        self.roster_versions: dict[str, int] = {}
        self._gang_views: dict[str, tuple[int, GangView]] = {}
        self._orders: dict[str, tuple[int, list[str]]] = {}  # gang -> (roster version, its pods' keys sorted)
        self.stray_gated: dict[str, tuple[PodView, Obj]] = {}  # gated, in no gang
        self.placeholders: dict[str, dict[str, tuple[str, tuple[tuple[str, int], ...]]]] = {}
        self.placeholder_owners: dict[str, tuple[str, str]] = {}
        self.gated = 0
        self._version = 0
        self._node_list: list[Node] | None = None
        self._eligibility: Eligibility | None = None
        self._ever: dict[tuple[tuple[Shape, int], ...], Placement] = {}
        # the mixins' fields (holds.py, device_nodes.py say what each holds)
        self.devices: devices.Inventory | None = None
        self._device_units: dict[str, Mapping[str, int]] = {}
        self._api_nodes: dict[str, Node] = {}
        self._devices_lost: set[str] = set()
        self._promised: dict[str, tuple[PodView, Obj, str]] = {}
        self._devices_unsure: set[str] = set()
        self.devices_epoch, self._device_epochs = next(DEVICE_GENERATIONS), {}
        self.device_generation = self.devices_epoch
        self._waiting_claims: Counter[tuple[str, str, str]] = Counter()
        self._waiting_frozen: frozenset[tuple[str, str, str]] | None = frozenset()
        self._member_uids_of: tuple[int, frozenset[str]] | None = None

    # --- changes in ---------------------------------------------------------------------------------
    def apply_pods(self, changes: Mapping[str, Obj | None]) -> None:
        """Watch events. A pod already indexed at the event's resourceVersion is left as it is, as in a
        relist: the controller's own release PATCHes are indexed as answered (`own_writes`), and the
        watch then brings each again."""
        for key, pod in changes.items():
            if pod is not None:
                current = self.pods.get(key)
                version = (pod.get("metadata") or {}).get("resourceVersion")
                if current is not None and version and current.resource_version == version:
                    continue
            self._set_pod(key, pod)

    def replace_pods(self, pods: Iterable[Obj]) -> None:
        """A full list: pods whose resourceVersion did not change are left as they are."""
        seen: set[str] = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            seen.add(key)
            current = self.pods.get(key)
            if current is None or current.resource_version != meta.get("resourceVersion", ""):
                self._set_pod(key, pod)
        for key in self.pods.keys() - seen:
            self._set_pod(key, None)

    def apply_nodes(self, changes: Mapping[str, Obj | None]) -> None:
        self._set_nodes(
            {key.rpartition("/")[2]: Node.from_api(n) if n is not None else None for key, n in changes.items()}
        )

    def own_writes(self, written: Iterable[tuple[str, Obj]]) -> None:
        """Pods this controller just wrote, as the API server answered, each with the version the write
        was made over: known now, not when the watch delivers them. A pass in between saw a released pod
        still gated, so it released it again (a 409 each: 93 pod PATCHes for a 64-pod gang in
        bench/cluster.py) and counted the node it was promised as free. Applied only over the version
        written over; the index already holding a later one keeps it."""
        for before, pod in written:
            meta = pod.get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            seen = self.pods.get(key)
            if seen is not None and seen.resource_version == before:
                self._set_pod(key, pod)

    def replace_nodes(self, nodes: Iterable[Obj]) -> None:
        fresh = {(n.get("metadata") or {}).get("name", ""): Node.from_api(n) for n in nodes}
        changed: dict[str, Node | None] = dict.fromkeys(self.nodes.keys() - fresh.keys())
        changed.update((name, node) for name, node in fresh.items() if node != self._api_nodes.get(name))
        self._set_nodes(changed)

    def _set_nodes(self, nodes: Mapping[str, Node | None]) -> None:
        """Nodes as the API has them now (None: gone), their devices counted together (device_nodes.py)."""
        units = self._nodes_class_totals([n for n in nodes.values() if n is not None]) if self.devices else {}
        for name, node in nodes.items():
            self._set_node(name, node, units.get(name))

    def _set_node(self, name: str, node: Node | None, units: Mapping[str, int] | None = None) -> None:
        if node is None:
            self.nodes_epoch += 1
            self._node_list = self._eligibility = None
            self._ever = {}
            self.nodes.pop(name, None)
            self._api_nodes.pop(name, None)
            self._device_epochs.pop(name, None)
            self.free.pop(name, None)
            return
        self._api_nodes[name] = node
        if units is not None:
            self._device_units[name] = units
        self._rebuild_node(name)

    def _rebuild_node(self, name: str) -> None:
        """The node as placement sees it: its allocatable, and its devices as resources of it."""
        self.nodes_epoch += 1
        self._node_list = self._eligibility = None
        self._ever = {}
        parsed = self._api_nodes[name]
        units = self._device_units.get(name)
        if units:
            parsed = parsed.with_units(units)
        self.nodes[name] = parsed
        free = dict(parsed.allocatable)
        add_units(free, self.held.get(name, {}).items(), -1)
        self.free[name] = free
        self._grown.add(name)
        self.room_epoch += 1

    def _set_pod(self, key: str, pod: Obj | None) -> None:
        old = self.pods.pop(key, None)
        before = self._roster_mark(key, old)
        if old is not None:
            self._forget(key, old)
        after = self._store_pod(key, pod) if pod is not None else None
        if after != before:
            for mark in (before, after):
                if mark is not None:
                    self.roster_versions[mark[0]] = self._version = self._version + 1

    def _roster_mark(self, key: str, seen: Seen | None) -> tuple[str, str, bool] | None:
        """(gang, uid, ended) of a member: what its gang's roster version follows."""
        if seen is None or not seen.gang:
            return None
        member = self._members.get(seen.gang, {}).get(key)
        return (seen.gang, member[0].uid, member[0].terminal) if member is not None else None

    def _store_pod(self, key: str, pod: Obj) -> tuple[str, str, bool] | None:
        """The pod indexed (what it holds, its gang's member); its roster mark when it is a member."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        labels = meta.get("labels") or {}
        if not spec.get("schedulingGates") and contract.GROUP_LABEL not in labels:
            self._set_plain(key, meta, spec, (pod.get("status") or {}).get("phase"))
            stands_for = labels.get(contract.PLACEHOLDER_LABEL)
            owner = placeholder_owner(meta) if stands_for else None
            if owner is not None and not meta.get("deletionTimestamp"):
                self.placeholder_owners[key] = (owner, str(meta.get("uid") or ""))
                self._set_placeholder(key, f"{meta.get('namespace', '')}/{stands_for}", spec)
            return None
        group = member_group(pod)
        release = self.releases(meta.get("namespace", ""), group).get(meta.get("name", "")) if group else None
        view = self._member_view(key, pod, release, group)
        node = view.holds_node
        if node is not None:
            going = bool(meta.get("deletionTimestamp"))
            hold = self._holds[key] = Hold(node, view.shape.requests, view.shape.host_ports, view.priority, going)
            self._take(hold, +1, key)
        gated = view.gated and not view.terminal
        if gated:
            self.gated += 1
        gang = f"{view.namespace}/{view.group}" if view.group else ""
        if gang:
            self._members.setdefault(gang, {})[key] = (view, pod)
            if node is not None and not view.terminal and view.claims_devices:
                self._promised[key] = (view, pod, node)
            self._tally(key, gang, self.mechanism_of(pod), view.workload_uid, +1)
            self._touch(gang)
        elif view.gated:
            self.stray_gated[key] = (view, pod)
        claims = self._claims_waiting(view, spec) if gang else ()
        self.pods[key] = Seen(view.resource_version, gang, gated, not gang and view.gated, claims=claims)
        return (gang, view.uid, view.terminal) if gang else None

    def _set_plain(self, key: str, meta: Obj, spec: Obj, phase: str | None) -> None:
        """A pod in no gang and without a gate (most of a cluster): only the capacity it holds matters,
        so no view is made (what PodView.holds_node says of such a pod: its node until it finishes)."""
        node = spec.get("nodeName")
        if node and phase not in ("Succeeded", "Failed"):
            shape = self.shapes.of_member(spec)
            going = bool(meta.get("deletionTimestamp"))
            priority = int(spec.get("priority") or 0)
            hold = self._holds[key] = Hold(node, shape.requests, shape.host_ports, priority, going)
            self._take(hold, +1, key)
        self.pods[key] = Seen(meta.get("resourceVersion", ""), "", False, False)

    def _forget(self, key: str, old: Seen) -> None:
        """The pod's contribution taken back: its hold, its place in its gang, its claims."""
        if old.placeholder_for:
            self._forget_placeholder(key, old.placeholder_for)
        hold = self._holds.pop(key, None)
        if hold is not None:
            self._take(hold, -1, key)
        if old.gated:
            self.gated -= 1
        if old.gang:
            tallied = self._tallied.get(key)
            if tallied is not None:
                self._tally(key, *tallied, -1)
            self._promised.pop(key, None)
            members = self._members.get(old.gang)
            if members is not None:
                members.pop(key, None)
                if not members:
                    del self._members[old.gang]
            self._touch(old.gang)
        if old.stray:
            self.stray_gated.pop(key, None)
        if old.claims:
            self._forget_claims(old.claims)

    def _take(self, hold: Hold, sign: int, key: str) -> None:
        """sign +1: the pod holds its node now; -1: it no longer does."""
        add_units(self.held.setdefault(hold.node, {}), hold.units, sign)
        on_node = self._on_node.setdefault(hold.node, set())
        if sign > 0:
            on_node.add(key)
        else:
            on_node.discard(key)
        add_units(self.held_by_priority.setdefault(hold.priority, {}).setdefault(hold.node, {}), hold.units, sign)
        if hold.going:
            going = self.going.setdefault(hold.node, {})
            add_units(going, hold.units, sign)
            if not any(going.values()):
                del self.going[hold.node]
        free = self.free.get(hold.node)
        if free is not None:
            add_units(free, hold.units, -sign)
            if sign < 0:
                self._grown.add(hold.node)
                self.room_epoch += 1
        if hold.ports:
            ports = self.ports.setdefault(hold.node, Counter())
            ports.update({port: sign for port in hold.ports})
            for port in [p for p, count in ports.items() if count <= 0]:
                del ports[port]
            if not ports:
                del self.ports[hold.node]

    def _touch(self, gang: str) -> None:
        self._version += 1
        self.gang_versions[gang] = self._version

    def _tally(self, key: str, gang: str, mechanism: str, workload_uid: str, sign: int) -> None:
        mechanisms, workloads = self._tallies.setdefault(gang, (Counter(), Counter()))
        for counted, value in ((mechanisms, mechanism), (workloads, workload_uid)):
            counted[value] += sign
            if counted[value] <= 0:
                del counted[value]
        if sign > 0:
            self._tallied[key] = (gang, mechanism, workload_uid)
        else:
            self._tallied.pop(key, None)
            if not mechanisms and not workloads:
                del self._tallies[gang]

    def reclassify(self, mechanism_of: Callable[[Obj], str]) -> None:
        """Every member's mechanism told anew (the mechanisms changed: a native API of another generation)."""
        self.mechanism_of = mechanism_of
        self._tallies, self._tallied = {}, {}
        for gang, members in self._members.items():
            for key, (view, pod) in members.items():
                self._tally(key, gang, mechanism_of(pod), view.workload_uid, +1)
            self._touch(gang)

    # --- what a pass reads ----------------------------------------------------------------------
    def node_list(self) -> list[Node]:
        if self._node_list is None:
            self._node_list = sorted(self.nodes.values(), key=lambda n: n.name)
        return self._node_list

    def eligibility(self) -> Eligibility:
        """Static fits per shape, remembered until a node changes."""
        if self._eligibility is None:
            self._eligibility = Eligibility(self.node_list())
        return self._eligibility

    def gangs(self) -> dict[str, GangView]:
        views: dict[str, GangView] = {}
        for key, members in self._members.items():
            version = self.gang_versions[key]
            cached = self._gang_views.get(key)
            if cached is None or cached[0] != version:
                namespace, _, name = key.partition("/")
                # by name: the keys ("namespace/name", one namespace) sort as the names do, with no key
                # function called per pod; sorted again only when the gang gains or loses a pod
                roster = self.roster_versions.get(key, 0)
                order = self._orders.get(key)
                if order is None or order[0] != roster:
                    order = self._orders[key] = (roster, sorted(members))
                ordered = [members[pod_key] for pod_key in order[1]]
                mechanisms, workloads = self._tallies.get(key, (Counter(), Counter()))
                view = GangView(
                    namespace,
                    name,
                    [v for v, _ in ordered],
                    [raw for _, raw in ordered],
                    mechanisms=frozenset(mechanisms),
                    workload_uids=frozenset(workloads),
                    roster=roster,
                )
                cached = self._gang_views[key] = (version, view)
            views[key] = cached[1]
        for key in self._gang_views.keys() - views.keys():
            del self._gang_views[key]
            self._orders.pop(key, None)
            self.roster_versions.pop(key, None)
            self.gang_versions.pop(key, None)  # a gang back later gets a newer version: the counter is shared
        return views

    def ever(self, members: Sequence[Member]) -> Placement:
        """state.ever_placement, remembered per multiset of shapes until a node changes: gangs of one
        kind share it."""
        counts: dict[Shape, int] = {}
        for member in members:
            counts[member.shape] = counts.get(member.shape, 0) + 1
        key = tuple(sorted(counts.items(), key=lambda item: repr(item[0])))
        found = self._ever.get(key)
        if found is None:
            found = self._ever[key] = ever_placement(
                [Member(f"{i}-{j}", shape) for i, (shape, count) in enumerate(key) for j in range(count)],
                self.node_list(),
            )
        return found

    def take_grown(self) -> set[str]:
        """Nodes that gained room since the last call: only gangs that could use them are placed again."""
        grown, self._grown = self._grown, set()
        return grown
