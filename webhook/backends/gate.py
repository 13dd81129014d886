"""gate: pods wait behind the scheduling gate gangkeeper.io/gang-gate until gangkeeper's controller
has found room for the whole gang. The default scheduler keeps the pods; no group object is needed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from webhook import contract
from webhook.backends.base import Gap, NamespaceInfo, Served, Settings, Target, stamp_common
from webhook.gangs.model import Gang, GangId, Obj, Topology


@dataclass(frozen=True)
class Gate:
    name: ClassVar[str] = "gate"
    group_versions: ClassVar[tuple[str, ...]] = ()
    needs: ClassVar[str] = "gangkeeper's controller"
    how_to_enable: ClassVar[str] = "run gangkeeper's controller"
    scheduler_name: ClassVar[None] = None
    gangkeeper_places: ClassVar[bool] = True  # its controller places and releases the gang itself
    autoscaler_sees_part: ClassVar[bool] = False
    stops_retrying: ClassVar[bool] = False
    steers_shared_claims: ClassVar[bool] = False
    shared_claims_allocated_first: ClassVar[bool] = False
    hands_over_all_at_once: ClassVar[bool] = False

    @classmethod
    def configured(cls, settings: Settings) -> Gate:
        return cls()

    @classmethod
    def discover(cls, served: Served, settings: Settings) -> Gate:
        return cls()  # needs nothing the API server serves

    def stamp(self, target: Target, gang: GangId | None, is_pod: bool) -> None:
        stamp_common(target, gang)
        spec = target.pod_spec()
        # The gate goes on pods only, at their admission, never into a template: a template's gate would
        # outlive the decision (an uninstall, a backend switch, no controller) and hold every new pod.
        if spec is None or gang is None or not is_pod:
            return
        gates = spec.setdefault("schedulingGates", [])
        if not any(g.get("name") == contract.GATE for g in gates):
            gates.append({"name": contract.GATE})

    def group_kinds(self) -> list[tuple[str, str]]:
        return []

    def marks(self, pod: Obj) -> bool:
        return contract.GROUP_LABEL in ((pod.get("metadata") or {}).get("labels") or {})

    def group_objects(self, gangs: list[Gang], namespace: NamespaceInfo) -> list[Obj]:
        return []

    def topology_gap(self, topology: Topology) -> Gap | None:
        return None  # the controller places the whole gang in one domain itself

    def workload_topology_gap(self, topology: Topology) -> Gap | None:
        return None  # the controller places each gang inside the domain its workload's gangs hold
