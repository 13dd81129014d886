"""The devices of the index's nodes (observe/cluster.py): each node's devices counted as resources of
its allocatable (per DeviceClass, `decide/devices.py` class_resource), counted again as the cluster's devices
change, and the gang pods whose allocated devices are gone. A mixin of ClusterIndex."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import TYPE_CHECKING

from webhook.controller.decide import devices
from webhook.controller.decide.device_alike import class_totals_of
from webhook.controller.decide.devices import Inventory
from webhook.controller.decide.pods import PodView, Release
from webhook.controller.decide.shapes import Node
from webhook.controller.observe.holds import ShapesSeen, waiting_claims
from webhook.gangs.model import Obj

DEVICE_GENERATIONS = itertools.count(1)  # the devices' pictures, numbered across every index


class DeviceNodes:
    devices: Inventory | None  # the cluster's devices (observe/devices.py), None: no DRA
    _device_units: dict[str, Mapping[str, int]]  # node -> its devices as resources (read only)
    _api_nodes: dict[str, Node]  # the nodes as the API has them, before their devices are added
    _devices_lost: set[str]  # bound gang pods whose allocated devices no slice has now
    _devices_unsure: set[str]  # nodes whose devices were counted while CEL could not answer
    # the generation of the devices' picture since which any node's devices may differ (a class, a
    # template, a shared pool changed), and per node the one since which its own may: what a devices
    # check read (observe/devices.py); from one count for all indexes, so no two pictures share a number
    devices_epoch: int
    _device_epochs: dict[str, int]
    device_generation: int  # the newest of them: a node whose devices change after it gets a newer one
    _members: dict[str, dict[str, tuple[PodView, Obj]]]
    _promised: dict[str, tuple[PodView, Obj, str]]  # promised_device_pods, by pod key
    # ("template" | "claim", namespace, name) -> gang members naming it that wait (gated, or released and
    # not bound yet): the only templates and claims whose selectors the devices' count per node evaluates
    # (Inventory.waiting)
    _waiting_claims: Counter[tuple[str, str, str]]
    _waiting_frozen: frozenset[tuple[str, str, str]] | None
    _version: int  # ClusterIndex's: changes with any gang's pods
    _member_uids_of: tuple[int, frozenset[str]] | None  # (`_version`, `_member_uids`)
    shapes: ShapesSeen  # ClusterIndex's

    if TYPE_CHECKING:  # ClusterIndex's own: a node or a pod looked at again

        def _rebuild_node(self, name: str) -> None: ...
        def _set_pod(self, key: str, pod: Obj | None) -> None: ...
        def _touch(self, gang: str) -> None: ...

    def _class_totals(self, inventory: Inventory, name: str, members: frozenset[str]) -> Mapping[str, int]:
        """The node's devices as resources; a node some of whose selectors no evaluator could answer (the
        CEL worker not started) is counted again at the next pass, not left short."""
        unanswered = inventory.memo.unanswered
        units = inventory.class_totals(self._api_nodes[name], members)
        if inventory.memo.unanswered != unanswered:
            self._devices_unsure.add(name)
        else:
            self._devices_unsure.discard(name)
        return units

    def _member_view(self, key: str, pod: Obj, release: Release | None, group: str | None) -> PodView:
        """A gang member as the start rules read it, its shape holding its devices."""
        spec = pod.get("spec") or {}
        inventory = self.devices if self.devices is not None and devices.claims_devices(spec) else None
        demand = inventory.demand((pod.get("metadata") or {}).get("namespace", ""), spec) if inventory else None
        view = PodView.from_api(
            pod, release, group, demand.shaped if demand is not None else None, self.shapes.of_member(spec)
        )
        self._devices_lost.discard(key)
        if demand is not None and view.node_name and self._lost(view, pod):
            # bound, and a device of its claims is in no slice now (its driver gone, its node lost):
            # no working member, so a gang that ran whole is short and recovers or is requeued whole
            view = replace(view, terminal=True)
            self._devices_lost.add(key)
        return view

    def _claims_waiting(self, view: PodView, spec: Obj) -> tuple[tuple[str, str, str], ...]:
        """The templates and claims a gang member names while it waits (`waiting_claims`), counted in: gated,
        or released to a node and not bound yet (kube-scheduler is binding it: what its shape holds stays
        counted per node, else a pass in between read the node as overcommitted: start.py node_taken)."""
        waits = view.gated or (view.pinned_node is not None and not view.node_name)
        claims = waiting_claims(view.namespace, spec) if waits and not view.terminal and view.claims_devices else ()
        if claims:
            self._waiting_claims.update(claims)
            self._waiting_frozen = None
        return claims

    def _nodes_class_totals(self, nodes: Sequence[Node]) -> dict[str, Mapping[str, int]]:
        """`_class_totals` of nodes changed together (a cold start's 5,000), read only; when some selector
        could not be answered, each of them is counted again at the next pass."""
        inventory = self.devices
        if inventory is None:
            return {}
        unanswered = inventory.memo.unanswered
        found = class_totals_of(inventory, nodes, self._member_uids())
        if inventory.memo.unanswered != unanswered:
            self._devices_unsure.update(found)
        else:
            self._devices_unsure.difference_update(found)
        return found

    def use_devices(self, inventory: Inventory | None) -> None:
        """A new picture of the cluster's devices: each node's devices as resources again, and the gang
        pods that claim devices looked at again (their claims' templates may have changed)."""
        if inventory is self.devices and not (inventory is not None and self._devices_unsure):
            return
        before = self.devices
        changed = inventory.changed_nodes(before) if inventory is not None else None
        self.devices = inventory
        generation = self.device_generation = next(DEVICE_GENERATIONS)
        if changed is None or before is None or inventory is None or before.demand_basis != inventory.demand_basis:
            self.devices_epoch, self._device_epochs = generation, {}
        else:
            self._device_epochs.update(dict.fromkeys(changed | self._devices_unsure, generation))
        members = self._member_uids()
        if changed is not None:
            changed |= self._devices_unsure
        for name in self._api_nodes.keys() if changed is None else changed & self._api_nodes.keys():
            units = self._class_totals(inventory, name, members) if inventory is not None else {}
            if units != self._device_units.get(name, {}):
                self._device_units[name] = units
                self._rebuild_node(name)
        if before is not None and inventory is not None and before.demand_basis == inventory.demand_basis:
            # no pod claims anything else than it did; the gangs that wait are looked at again (their
            # devices check may answer otherwise now), and the bound pods whose devices went or came back
            for members_of in list(self._members.values()):
                for key, (view, raw) in list(members_of.items()):
                    if view.node_name and (key in self._devices_lost) != self._lost(view, raw):
                        self._set_pod(key, raw)
            for gang, members_of in self._members.items():
                if any(view.gated and view.claims_devices for view, _ in members_of.values()):
                    self._touch(gang)
            return
        for members_of in list(self._members.values()):
            for key, (view, raw) in list(members_of.items()):
                if view.claims_devices:
                    self._set_pod(key, raw)

    def device_epoch(self, node: str) -> int:
        """Since which generation the node's devices are as they are (`devices_epoch` at the latest)."""
        return self._device_epochs.get(node, self.devices_epoch)

    def devices_changed_since(self, generation: int, nodes: AbstractSet[str]) -> set[str] | None:
        """Those of `nodes` whose devices changed after `generation` (a `device_generation`); None when
        any node's may have (a class, a template, a shared pool changed since)."""
        if self.devices_epoch > generation:
            return None
        epochs = self._device_epochs  # only the nodes changed since `devices_epoch`: a few, or every node
        if len(epochs) < len(nodes):
            return {node for node, epoch in epochs.items() if epoch > generation and node in nodes}
        return {node for node in nodes if epochs.get(node, 0) > generation}

    def promised_device_pods(self) -> Iterable[tuple[PodView, Obj, str]]:
        """Gang pods that claim devices and hold a node (released or bound): (view, pod, node). Kept as
        pods come and go: every gang's devices check reads them, and walking all gangs' pods for it made
        a pass cost gangs times pods."""
        return self._promised.values()

    def _lost(self, view: PodView, pod: Obj) -> bool:
        inventory = self.devices
        return inventory is not None and bool(inventory.lost_devices(view.uid, view.namespace, pod.get("spec") or {}))

    def _member_uids(self) -> frozenset[str]:
        """The gang pods whose shapes carry their devices: their own claims are counted by them. Read only,
        kept while no gang changes (`_version`): each node changed asks it (5,000 at a cold start). A frozenset:
        what claims hold is kept by it (device_usage.py), which made a set of 1,000 uids frozen per node."""
        known = self._member_uids_of
        if known is None or known[0] != self._version:
            uids = frozenset(view.uid for members in self._members.values() for view, _ in members.values())
            known = self._member_uids_of = (self._version, uids)
        return known[1]

    def waiting_claims(self) -> frozenset[tuple[str, str, str]]:
        """The templates and claims waiting gang members name (the same object while none changes)."""
        if self._waiting_frozen is None:
            self._waiting_frozen = frozenset(self._waiting_claims)
        return self._waiting_frozen

    def _forget_claims(self, claims: tuple[tuple[str, str, str], ...]) -> None:
        self._waiting_claims.subtract(claims)
        for ref in claims:
            if self._waiting_claims[ref] <= 0:
                del self._waiting_claims[ref]
        self._waiting_frozen = None
