"""Devices claimed through Dynamic Resource Allocation, as kube-scheduler's DynamicResources plugin
allocates them: which devices a pod's claims take on a node, all or nothing.

The rules, each from kube-scheduler's structured allocator (k8s.io/dynamic-resource-allocation
structured/internal/stable: allocator_stable.go, pools_stable.go; the v1 API in k8s.io/api resource/v1):
- a ResourceSlice applies to a node by `nodeName`, `allNodes` or `nodeSelector` (pools_stable.go
  NodeMatches); only the newest generation of a pool counts, and a pool is complete when all its
  `resourceSliceCount` slices of that generation are there (GatherPools, checkSlicesInPool); an
  incomplete pool's devices are still offered to an ExactCount request, never to `All`
  (validateDeviceRequest);
- a device is taken once allocated to any claim (`status.allocation.devices.results`), or picked for
  another claim being allocated in the same pass (allocatedstate.go; deviceInUse);
- a device fits a request when every selector of its DeviceClass and of the request matches
  (selectorsMatch: a CEL runtime error fails the allocation on that node, it is no "no") and no taint
  it carries with effect NoSchedule or NoExecute goes untolerated (taintPreventsAllocation);
- `exactly` with `allocationMode: ExactCount` takes `count` devices (default 1), `All` every matching
  device of the node's pools, at least one, none of them taken, no pool incomplete; `firstAvailable`
  tries its subrequests in order and takes the first that can be allocated (allocateOne);
- a claim is allocated once: a pod's own claims come from its ResourceClaimTemplates, a claim named by
  `resourceClaimName` is shared, and once allocated its pods go only where its
  `status.allocation.nodeSelector` lets them (the DynamicResources plugin's Filter).

- a claim's matchAttribute and distinctAttribute constraints (device_constraints.py);
- partitionable devices: shared counters, consumed by the devices allocated and picked (device_counters.py).

The model is split as upstream splits it: the values (device_types.py), slices gathered into pools
(device_pools.py), what a pod claims (device_demand.py), the inventory counted per node
(device_inventory.py), the allocator (device_allocator.py), CEL (device_cel.py), the claims parsed once
per list (device_claims.py), what they consume (device_usage.py), and what outlives an inventory
(device_memo.py). This module is their entry: `inventory_from`, and the names callers use.

- consumable capacity: devices that allow multiple allocations, shared by claims within their capacity,
  requests rounded up by the device's policy (device_capacity.py); admin access (a device in use may be
  taken, an admin allocation holds nothing); per-device node selection (a device offered only on the
  nodes it names: device_pools.py).

What this model does not judge is named (`Demand.unmodelled`), never guessed: constraints on attributes of
list type (alpha, off by default in 1.36). A gang whose pods need those is never released by the gate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from webhook.controller.decide.device_allocator import Allocator
from webhook.controller.decide.device_claims import Claims, claims_of
from webhook.controller.decide.device_demand import pod_demand, templates_by_name
from webhook.controller.decide.device_inventory import MAX_SELECTOR_SETS_PER_NAMESPACE, Inventory
from webhook.controller.decide.device_memo import MAX_REMEMBERED_MATCHES, BoundedMap, Memo
from webhook.controller.decide.device_pools import Gathered, gather_pools
from webhook.controller.decide.device_types import (
    CLASS_RESOURCE_PREFIX,
    ClaimDemand,
    Demand,
    Device,
    DeviceClass,
    DeviceId,
    Pool,
    PoolIndex,
    Request,
    Subrequest,
    claim_resource,
    claims_devices,
    class_resource,
    with_demand,
)
from webhook.gangs.model import Obj

__all__ = [
    "CLASS_RESOURCE_PREFIX",
    "MAX_REMEMBERED_MATCHES",
    "MAX_SELECTOR_SETS_PER_NAMESPACE",
    "Allocator",
    "BoundedMap",
    "ClaimDemand",
    "Claims",
    "Demand",
    "Device",
    "DeviceClass",
    "DeviceId",
    "Gathered",
    "Inventory",
    "Memo",
    "Pool",
    "PoolIndex",
    "Request",
    "Subrequest",
    "claim_resource",
    "claims_devices",
    "claims_of",
    "class_resource",
    "gather_pools",
    "inventory_from",
    "pod_demand",
    "templates_by_name",
    "with_demand",
]


def inventory_from(
    classes: Iterable[Obj],
    slices: Iterable[Obj],
    claims: Iterable[Obj] | Claims,
    templates: Iterable[Obj] | Mapping[tuple[str, str], Obj],
    memo: Memo | None = None,
    gathered: Gathered | None = None,
    templates_version: str | None = None,
) -> Inventory:
    """The inventory of these objects; a PoolBook's pools (`gathered`) instead of the slices', and claims
    parsed before (`claims_of`, shared while their list is the same) instead of the claims."""
    inventory = Inventory(memo=memo or Memo(), templates_version=templates_version)
    for obj in classes:
        device_class = DeviceClass.from_api(obj)
        if device_class.name:
            inventory.classes[device_class.name] = device_class
    if gathered is None:
        inventory.pools = gather_pools(slices, inventory.problems, inventory.memo)
    else:
        inventory.pools, inventory.problems, inventory.pool_index = gathered.pools, gathered.problems, gathered.index
    inventory.parsed = claims if isinstance(claims, Claims) else claims_of(claims)
    inventory.templates = dict(templates) if isinstance(templates, Mapping) else templates_by_name(templates)
    return inventory
