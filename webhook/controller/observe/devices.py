"""The cluster's DRA devices for the gate: DeviceClasses, ResourceSlices, ResourceClaims and
ResourceClaimTemplates (resource.k8s.io/v1, the four kube-scheduler's DynamicResources plugin reads),
watched, and read as one Inventory a pass (rebuilt only when one of them changed); and the devices check
a gang's release must pass: every chosen pod's claims allocated on its chosen node, after the claims
of the pods released before it and not allocated yet."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from webhook.controller import metrics
from webhook.controller.decide import device_cel, device_reads, devices
from webhook.controller.decide.device_types import ClaimDemand
from webhook.controller.decide.devices import Allocator, Inventory
from webhook.controller.decide.shapes import term_matches
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.observe.cel_budget import TenantBudget
from webhook.controller.observe.cel_sandbox import CPU_BUDGET_SECONDS, CelSandbox
from webhook.controller.observe.cluster import ClusterIndex
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.pool_book import PoolBook
from webhook.gangs.model import Obj
from webhook.informer import Informer
from webhook.kube import Resource

GROUP_VERSION = "resource.k8s.io/v1"
DEVICE_CLASSES = Resource(GROUP_VERSION, "deviceclasses", namespaced=False)
RESOURCE_SLICES = Resource(GROUP_VERSION, "resourceslices", namespaced=False)
RESOURCE_CLAIMS = Resource(GROUP_VERSION, "resourceclaims")
CLAIM_TEMPLATES = Resource(GROUP_VERSION, "resourceclaimtemplates")
RESOURCES = (DEVICE_CLASSES, RESOURCE_SLICES, RESOURCE_CLAIMS, CLAIM_TEMPLATES)


class DeviceWatch:
    """The Inventory of the four informers, the same object while none of them changed."""

    def __init__(
        self, informers: Mapping[tuple[str, str], Informer], evaluator: device_cel.Evaluator | None = None
    ) -> None:
        self._all = informers  # the controller's: the four join it once discovery finds them served
        self._versions: tuple[str, ...] | None = None
        self._inventory: Inventory | None = None
        # tenants' selectors out of process, each evaluation within a CPU budget (cel_sandbox.py), and
        # all of a namespace's within its share of the pass, in the workers' CPU time (cel_budget.py);
        # another evaluator (the bench, in process) is charged to no one
        if evaluator is None:
            sandbox = CelSandbox()
            self.memo = devices.Memo(sandbox, TenantBudget(CPU_BUDGET_SECONDS, lambda: sandbox.cpu_spent))
        else:
            self.memo = devices.Memo(evaluator)
        self._pools = PoolBook()  # the slices followed by their changes, not read whole each time
        self._pools_of: Informer | None = None  # the slices' informer the book follows
        self._templates: tuple[str, dict[tuple[str, str], Obj]] | None = None
        self._claims: tuple[str, devices.Claims] | None = None  # parsed for the claims' list version
        # the attributes any selector or constraint has read since the start (device_reads.attributes_read):
        # it only grows, and None (all) stays, so every slice is parsed again at most MAX_ATTRIBUTES_READ
        # times however a tenant's selectors come and go
        self._read: frozenset[str] | None = frozenset()
        self._read_of: tuple[str, ...] | None = None  # the lists' versions it was read from

    @property
    def _informers(self) -> list[Informer | None]:
        return [self._all.get((r.group_version, r.plural)) for r in RESOURCES]

    def _templates_of(self, informer: Informer) -> dict[tuple[str, str], Obj]:
        """The templates by name, read again only when the list changed (a tenant's thousand templates
        are not walked on every pass)."""
        version = informer.resource_version
        if self._templates is None or self._templates[0] != version or not version:
            self._templates = (version, devices.templates_by_name(informer.items()))
        return self._templates[1]

    def _claims_of(self, informer: Informer) -> devices.Claims:
        """The claims parsed, again only when the list changed: every inventory built meanwhile (a slice
        republished) shares them, and tells a claim changed by their identity (device_pools.changed_nodes)."""
        version = informer.resource_version
        if self._claims is None or self._claims[0] != version or not version:
            self._claims = (version, devices.claims_of(informer.items()))
        return self._claims[1]

    def _attributes_read(
        self, classes: Informer, claims: Informer, templates: Informer, versions: tuple[str, ...]
    ) -> frozenset[str] | None:
        if versions == self._read_of and all(versions):
            return self._read
        self._read_of = versions
        if self._read is None:
            return None
        specs = [*((t.get("spec") or {}).get("spec") or {} for t in templates.items())]
        specs.extend(c.get("spec") or {} for c in claims.items())
        now = device_reads.attributes_read(classes.items(), specs)
        grown = None if now is None else self._read | now
        self._read = grown if grown is not None and len(grown) <= device_reads.MAX_ATTRIBUTES_READ else None
        return self._read

    def inventory(self, waiting: frozenset[tuple[str, str, str]] = frozenset()) -> Inventory | None:
        """None until all four are watched and listed (the API may not serve them: DRA off, or before
        1.34). `waiting`: the templates and claims waiting gang members name (ClusterIndex.waiting_claims),
        the only ones whose selectors each node's devices are counted by."""
        informers = [i for i in self._informers if i is not None and i.synced.is_set()]
        if len(informers) < len(RESOURCES):
            return None
        classes, slices, claims, templates = informers
        versions = tuple(informer.resource_version for informer in (classes, claims, templates))
        if slices is not self._pools_of:  # a new informer (discovery again): its first changes are all
            self._pools, self._pools_of = PoolBook(), slices
        self._pools.reading(self._attributes_read(classes, claims, templates, versions))  # before the changes:
        changed = slices.follow("devices")  # a cold start's slices parsed once, as what is read says
        if changed:
            self._pools.apply(changed)
        if changed or versions != self._versions:
            inventory = devices.inventory_from(
                classes.items(),
                (),
                self._claims_of(claims),
                self._templates_of(templates),
                self.memo,
                self._pools.gathered(),
                templates.resource_version or None,
            )
            inventory.waiting = waiting
            self._inventory = inventory.remembering(self._inventory)
            self._versions = versions
        elif self._inventory is not None and waiting != self._inventory.waiting:
            # other pods wait: a new inventory only when the selector sets counted per node change
            narrowed = replace(self._inventory, waiting=waiting, deferred={})
            same = narrowed.narrowed == self._inventory.narrowed
            same = same and narrowed.counted_claims.keys() == self._inventory.counted_claims.keys()
            if same and narrowed.deferred == self._inventory.deferred:
                self._inventory.waiting = waiting
            else:
                self._inventory = narrowed
        return self._inventory


def watch_costs(watch: DeviceWatch) -> None:
    """The metrics of what tenants' device objects cost, read from this watch when scraped."""
    memo = watch.memo
    metrics.CEL_EVALUATIONS.set_function(lambda: memo.evaluations)
    sandbox = memo.evaluator
    if isinstance(sandbox, CelSandbox):
        metrics.CEL_OVER_BUDGET.set_function(lambda: len(sandbox.over_budget))
    metrics.CEL_DEFERRED.set_function(lambda: memo.deferred)
    ledger = memo.ledger
    if isinstance(ledger, TenantBudget):
        metrics.CEL_NAMESPACES_DEFERRED.set_function(lambda: len(ledger.deferred_since))
        metrics.CEL_SECONDS.set_function(lambda: sum(ledger.spent.values()))
    metrics.CACHE_ENTRIES.labels("cel_results").set_function(lambda: len(memo.matched))
    metrics.CACHE_EVICTIONS.labels("cel_results").set_function(lambda: memo.matched.evicted)


def with_selector_problems(index: ClusterIndex, gang: GangView, decision: Decision) -> Decision:
    """A waiting gang's decision naming what keeps its pods' device selectors from being counted: one over
    its CEL budget, or one deferred (its namespace's share of selector sets)."""
    inventory = index.devices
    if decision.state == GangState.RELEASE or inventory is None or not any(v.claims_devices for v in gang.pods):
        return decision
    problems: dict[str, None] = {}
    demands = {id(d): d for d in (inventory.demand(gang.namespace, raw.get("spec") or {}) for raw in gang.raw)}
    for demand in demands.values():
        for claim in demand.claims:
            if (postponed := inventory.memo.postponed.get(claim.key)) is not None:  # its searches' share spent
                problems[f"{claim.key}: {postponed}"] = None
            for request in claim.requests:
                for sub in request.alternatives:
                    for problem in inventory.selector_problems(sub):
                        problems[f"{claim.key} request {sub.name}: {problem}"] = None
    if not problems:
        return decision
    return replace(decision, message=f"{decision.message}; " + "; ".join(list(problems)[:3]))


MAX_REACHES = 16  # places tried for a gang's shared claim, in node order


def the_shared_claim(index: ClusterIndex, gang: GangView) -> ClaimDemand | None:
    """The one ResourceClaim a gang's pods share, None for a gang with none or several."""
    inventory = index.devices
    if inventory is None or not any(view.claims_devices for view in gang.pods):
        return None
    shared = {
        claim.key: claim
        for raw in gang.raw
        for claim in inventory.demand(gang.namespace, raw.get("spec") or {}).claims
        if claim.shared
    }
    return next(iter(shared.values())) if len(shared) == 1 else None


def shared_reaches(index: ClusterIndex, gang: GangView) -> list[frozenset[str]] | None:
    """Where a gang whose pods share one claim may go: the nodes its allocation reaches. Allocated, that is
    its nodeSelector's nodes; not allocated yet, each way of allocating it (on each node in turn) reaches
    some nodes (one node for node-local devices, more for a pool with a nodeSelector or allNodes), and the
    gang must be placed inside one of them. None for a gang with no shared claim, or with several (the
    devices check then judges the placement as it is)."""
    inventory, claim = index.devices, the_shared_claim(index, gang)
    if inventory is None or claim is None:
        return None
    nodes = list(index.nodes.values())
    if claim.allocated:
        if claim.allocated_node_terms is None:
            return None
        return [frozenset(n.name for n in nodes if any(term_matches(t, n) for t in claim.allocated_node_terms))]
    reaches: list[frozenset[str]] = []
    for node in nodes:
        allocator = Allocator(inventory, nodes=nodes)
        if allocator.allocate(devices.Demand((claim,)), node) is not None:
            continue
        reach = allocator.shared[claim.key][1]
        reach = frozenset(n.name for n in nodes) if reach is None else reach
        if reach not in reaches:
            reaches.append(reach)
            if len(reaches) >= MAX_REACHES:
                break
    return reaches
