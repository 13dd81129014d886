"""What the index keeps of each pod (observe/cluster.py): what it holds of its node, enough to undo its
contribution when it changes, and the questions preemption asks of those holds."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from webhook import contract
from webhook.controller.decide.pods import PodView, gang_priority, shape_key
from webhook.controller.decide.preemption import Victim
from webhook.controller.decide.shapes import HostPort, Shape, Units
from webhook.gangs.model import Obj


def add_units(target: dict[str, int], units: Iterable[tuple[str, int]], sign: int) -> None:
    for resource, amount in units:
        target[resource] = target.get(resource, 0) + sign * amount


def placeholder_owner(meta: Obj) -> str | None:
    """The uid of the Gang a placeholder pod is owned by, the Gang its label names (a pod that carries the
    label with no such owner is not one: the label alone is anyone's to write). Only the controller's
    account may make a pod that has either (ValidatingAdmissionPolicy
    gangkeeper-placeholders-made-by-the-controller-only), so the controller counts and deletes its own."""
    name = (meta.get("labels") or {}).get(contract.PLACEHOLDER_LABEL)
    for ref in meta.get("ownerReferences") or []:
        if (
            isinstance(ref, dict)
            and ref.get("apiVersion") == contract.GANG_API_VERSION
            and ref.get("kind") == contract.GANG_KIND
            and ref.get("name") == name
            and ref.get("uid")
        ):
            return str(ref["uid"])
    return None


MAX_SHAPES = 4096  # distinct shapes kept, the oldest out first


class ShapesSeen:
    """The scheduling shapes of the pods the index has seen, by decide/pods.py `shape_key`: a cluster's
    pods are of few shapes (a Job's 1,000 pods one), each worked out once. Bounded: each pod's own PVC
    names (a StatefulSet's volumes) make a shape of its own, and 5,000 such pods left 5,000 entries."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[int, tuple[tuple[str, int | str], ...]], Shape] = {}

    def of(self, spec: Obj) -> Shape:
        """The pod's shape; ValueError where its requests do not parse (Shape.from_pod_spec)."""
        key = shape_key(spec)
        if key is None:
            return Shape.from_pod_spec(spec)
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= MAX_SHAPES:
                del self._shapes[next(iter(self._shapes))]
            shape = self._shapes[key] = Shape.from_pod_spec(spec)
        return shape

    def of_member(self, spec: Obj) -> Shape:
        """The shape a gang member counts with: one pod and nothing more where its requests do not parse."""
        try:
            return self.of(spec)
        except ValueError:
            return Shape(requests=(("pods", 1),))

    def __len__(self) -> int:
        return len(self._shapes)


@dataclass(frozen=True, slots=True)
class Hold:
    """What one pod takes from its node (its requests: the shape's tuple, shared by identical pods)."""

    node: str
    units: tuple[tuple[str, int], ...]
    ports: tuple[HostPort, ...]
    priority: int
    going: bool = False  # being deleted: its capacity is on its way back


@dataclass(frozen=True, slots=True)
class Seen:
    """What is kept of every pod: enough to undo its contribution when it changes. Views and objects are
    kept only for gang members and stray gated pods; the other 95% of a cluster are just capacity."""

    resource_version: str
    gang: str  # "namespace/group", or ""
    gated: bool  # counted among the gated pods
    stray: bool
    placeholder_for: str = ""  # "namespace/group" of the gang a placeholder pod stands for
    claims: tuple[tuple[str, str, str], ...] = ()  # the templates and claims it names while it waits


class PreemptionQueries:
    """What preemption asks of the index (decide/preemption.py): the capacity lower priorities hold, and
    the units that would give it back. Read off the index's own holds; a mixin of ClusterIndex."""

    held_by_priority: dict[int, dict[str, Units]]
    free: dict[str, Units]
    pods: dict[str, Seen]
    _holds: dict[str, Hold]
    _on_node: dict[str, set[str]]
    _members: dict[str, dict[str, tuple[PodView, Obj]]]

    def nodes_below(self, priority: int) -> set[str]:
        """The nodes where pods of lower priority hold capacity, or members of gangs of lower priority."""
        nodes = {node for level, held in self.held_by_priority.items() if level < priority for node in held}
        return nodes | {hold.node for hold in self._lifted_holds(priority)}

    def _lifted_holds(self, priority: int) -> list[Hold]:
        """Holds of pods at or above `priority` whose gang ranks below it (state.gang_priority): their
        gang goes whole, so they go with it."""
        lifted = []
        for members in self._members.values():
            holds = [h for h in (self._holds.get(key) for key in members) if h is not None]
            if holds and gang_priority(h.priority for h in holds) < priority:
                lifted += [h for h in holds if h.priority >= priority]
        return lifted

    def victims_below(
        self, priority: int, nodes: Iterable[str], gate_gang: Callable[[str], bool], limit: int | None = None
    ) -> list[Victim]:
        """Preemption units holding capacity on these nodes (in order, at most `limit` of them), of lower
        priority (a gang's: state.gang_priority): whole gangs the gate releases (`gate_gang`), and pods in
        no gang. A unit with a pod already being deleted is going anyway and is left out, as are pods of
        other mechanisms' gangs (their scheduler preempts them)."""
        units: dict[str, Victim | None] = {}
        for node in nodes:
            if limit is not None and len(units) >= limit:
                break
            for key in self._on_node.get(node, ()):
                hold, seen = self._holds.get(key), self.pods.get(key)
                if hold is None or seen is None or hold.priority >= priority:
                    continue
                unit = seen.gang or key
                if unit not in units:
                    units[unit] = self._victim(key, seen.gang, priority, gate_gang)
        return [v for v in units.values() if v is not None]

    def _victim(self, key: str, gang: str, priority: int, gate_gang: Callable[[str], bool]) -> Victim | None:
        """The pod `key` as a preemption unit (its whole gang, if in one), or None when it may not be one."""
        hold = self._holds[key]
        if not gang:
            return None if hold.going else Victim(key, False, hold.priority, ((hold.node, hold.units),))
        held = [h for h in (self._holds.get(k) for k in self._members.get(gang, {})) if h is not None]
        rank = gang_priority(h.priority for h in held)  # the same rule as for the gang that preempts
        if not gate_gang(gang) or any(h.going for h in held) or rank >= priority:
            return None
        return Victim(gang, True, rank, tuple((h.node, h.units) for h in held))

    def free_without_priorities_below(self, priority: int) -> dict[str, Units] | None:
        """Each node's free capacity if every pod of lower priority were gone; None when there are none."""
        lower = [held for level, held in self.held_by_priority.items() if level < priority]
        lifted = self._lifted_holds(priority)
        if not lifted and not any(any(any(units.values()) for units in held.values()) for held in lower):
            return None
        free = {name: dict(units) for name, units in self.free.items()}
        for held in lower:
            for node, units in held.items():
                if node in free:
                    add_units(free[node], units.items(), +1)
        for hold in lifted:
            if hold.node in free:
                add_units(free[hold.node], hold.units, +1)
        return free


class PlaceholderHolds:
    """The placeholder pods the index sees (controller/act/placeholders.py makes them): each gang's, the
    room each holds, and the room bound ones hold that any pod which may preempt them takes. A mixin of
    ClusterIndex."""

    pods: dict[str, Seen]
    _holds: dict[str, Hold]
    shapes: ShapesSeen
    # "namespace/group" -> placeholder pod key -> (its node or "", its requests)
    placeholders: dict[str, dict[str, tuple[str, tuple[tuple[str, int], ...]]]]
    placeholder_owners: dict[str, tuple[str, str]]  # placeholder pod key -> (its Gang's uid, its own uid)
    # node -> what bound placeholders hold there: room any pod that may preempt them takes (kube-scheduler
    # preempts the lowest priority first, and a placeholder is below every workload's)
    yielding: dict[str, Units]

    if TYPE_CHECKING:  # ClusterIndex's own: the gang's version moves

        def _touch(self, gang: str) -> None: ...

    def placeholders_of(self, gang: str, owner_uid: str) -> dict[str, tuple[str, tuple[tuple[str, int], ...]]]:
        """The gang's placeholders that its Gang now owns (`owner_uid`): those of an earlier Gang of its
        name hold no room of this one's."""
        owners = self.placeholder_owners
        return {
            key: held
            for key, held in self.placeholders.get(gang, {}).items()
            if owner_uid and owners.get(key, ("", ""))[0] == owner_uid
        }

    def _set_placeholder(self, key: str, gang: str, spec: Obj) -> None:
        """A placeholder holds capacity as any pod does (_set_plain); it is also its gang's, whose waiting
        decision it changes when it binds."""
        hold = self._holds.get(key)
        units = hold.units if hold is not None else self.shapes.of(spec).requests
        self.placeholders.setdefault(gang, {})[key] = (hold.node if hold is not None else "", units)
        if hold is not None:
            add_units(self.yielding.setdefault(hold.node, {}), hold.units, +1)
        self.pods[key] = replace(self.pods[key], placeholder_for=gang)
        self._touch(gang)

    def _forget_placeholder(self, key: str, gang: str) -> None:
        self.placeholder_owners.pop(key, None)
        held = self.placeholders.get(gang)
        if held is not None:
            node, units = held.pop(key, ("", ()))
            yielding = self.yielding.get(node)
            if yielding is not None:
                add_units(yielding, units, -1)
                if not any(yielding.values()):
                    del self.yielding[node]
            if not held:
                del self.placeholders[gang]
        self._touch(gang)


def waiting_claims(namespace: str, spec: Obj) -> tuple[tuple[str, str, str], ...]:
    """("template" | "claim", namespace, name) of each ResourceClaimTemplate and ResourceClaim the pod names."""
    found = []
    for entry in spec.get("resourceClaims") or []:
        if isinstance(entry, dict):
            if entry.get("resourceClaimTemplateName"):
                found.append(("template", namespace, str(entry["resourceClaimTemplateName"])))
            elif entry.get("resourceClaimName"):
                found.append(("claim", namespace, str(entry["resourceClaimName"])))
    return tuple(found)
