"""What a pod claims: its claims' requests read from their templates or the claims themselves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from webhook.controller.decide.device_constraints import constraints_of
from webhook.gangs.model import Obj

if TYPE_CHECKING:
    from webhook.controller.decide.device_inventory import Inventory
from webhook.controller.decide import device_capacity
from webhook.controller.decide.device_types import (
    ClaimDemand,
    Demand,
    Request,
    Subrequest,
    cel_selectors,
    extended_requests,
)


def templates_by_name(templates: Iterable[Obj]) -> dict[tuple[str, str], Obj]:
    """(namespace, name) -> template (DeviceWatch keeps it while the templates do not change)."""
    found: dict[tuple[str, str], Obj] = {}
    for template in templates:
        meta = template.get("metadata") or {}
        found[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = template
    return found


def _subrequest(name: str, raw: Mapping[str, Any], unmodelled: set[str]) -> Subrequest:
    mode = raw.get("allocationMode") or "ExactCount"
    try:
        capacity = device_capacity.requested(raw.get("capacity"))
    except ValueError as error:  # the API server parses quantities: not from a real cluster
        unmodelled.add(str(error))
        capacity = ()
    return Subrequest(
        name=name,
        device_class=str(raw.get("deviceClassName") or ""),
        selectors=cel_selectors(raw.get("selectors")),
        all=mode == "All",
        count=max(int(raw.get("count") or 1), 1),
        admin=bool(raw.get("adminAccess")),
        capacity=capacity,
        tolerations=tuple(
            tuple(sorted((str(k), str(v)) for k, v in t.items()))
            for t in raw.get("tolerations") or []
            if isinstance(t, dict)
        ),
    )


def selector_payers(specs: Iterable[tuple[tuple[str, str], Mapping[str, Any]]]) -> dict[str, tuple[str, ...]]:
    """Each selector of these claim specs ((namespace, name), spec) -> the namespaces that wrote it: who
    its CEL is charged to (observe/cel_budget.py)."""
    found: dict[str, dict[str, None]] = {}
    for (namespace, _), spec in specs:
        for request in claim_requests(spec, set()):
            for sub in request.alternatives:
                for expression in sub.selectors:
                    found.setdefault(expression, {})[namespace] = None
    return {expression: tuple(namespaces) for expression, namespaces in found.items()}


def claim_requests(claim_spec: Mapping[str, Any], unmodelled: set[str]) -> tuple[Request, ...]:
    """A claim's requests (resource/v1 DeviceClaim): `exactly` or `firstAvailable` each."""
    devices = claim_spec.get("devices") or {}
    requests = []
    for raw in devices.get("requests") or []:
        if not isinstance(raw, dict):
            continue
        name = str(raw.get("name") or "")
        if isinstance(raw.get("exactly"), dict):
            requests.append(Request(name, (_subrequest(name, raw["exactly"], unmodelled),)))
        elif raw.get("firstAvailable"):
            alternatives = tuple(
                _subrequest(f"{name}/{sub.get('name', '')}", sub, unmodelled)
                for sub in raw["firstAvailable"]
                if isinstance(sub, dict)
            )
            if alternatives:
                requests.append(Request(name, alternatives))
    return tuple(requests)


def distinct_shares(requests: Sequence[Request], inventory: Inventory) -> bool:
    """ClaimDemand.distinct_shares: a request of several devices in a cluster with devices that allow
    multiple allocations (one such device counts as several units of its class, but serves one unit
    of a claim's request), so each node counts the claim whole."""
    return any(s.count > 1 for r in requests for s in r.alternatives) and bool(inventory.shared_devices)


def pod_demand(namespace: str, spec: Mapping[str, Any], inventory: Inventory) -> Demand:
    """The claims of a pod (its spec's resourceClaims), read against the inventory."""
    claims: list[ClaimDemand] = []
    problems: list[str] = []
    unmodelled: set[str] = set()
    for entry in spec.get("resourceClaims") or []:
        if not isinstance(entry, dict):
            continue
        if entry.get("resourceClaimTemplateName"):
            name = str(entry["resourceClaimTemplateName"])
            template = inventory.templates.get((namespace, name))
            if template is None:
                problems.append(f"ResourceClaimTemplate {name} does not exist")
                continue
            claim_spec = (template.get("spec") or {}).get("spec") or {}
            requests = claim_requests(claim_spec, unmodelled)
            constraints = constraints_of(claim_spec)
            shares = distinct_shares(requests, inventory)
            claims.append(
                ClaimDemand(f"template {namespace}/{name}", requests, False, None, False, constraints, shares)
            )
        elif entry.get("resourceClaimName"):
            name = str(entry["resourceClaimName"])
            claim = inventory.claims.get((namespace, name))
            if claim is None:
                problems.append(f"ResourceClaim {name} does not exist")
                continue
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                terms = ((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms")) or None
                claims.append(
                    ClaimDemand(f"claim {namespace}/{name}", (), True, allocated_node_terms=terms, allocated=True)
                )
            else:
                spec_of = claim.get("spec") or {}
                requests = claim_requests(spec_of, unmodelled)
                constraints = constraints_of(spec_of)
                shares = distinct_shares(requests, inventory)
                claims.append(
                    ClaimDemand(f"claim {namespace}/{name}", requests, True, None, False, constraints, shares)
                )
    # a DeviceClass's extended resource asked for in the containers (KEP-5004): devices of that class
    wanted = extended_requests(spec)
    for device_class in inventory.classes.values():
        amount = wanted.get(device_class.extended_resource or "")
        if amount:
            request = Request(device_class.name, (Subrequest(device_class.name, device_class.name, count=amount),))
            claims.append(ClaimDemand(f"extended resource {device_class.extended_resource}", (request,)))
    for needed in claims:
        for request in needed.requests:
            for alternative in request.alternatives:
                if alternative.device_class not in inventory.classes:
                    problems.append(f"DeviceClass {alternative.device_class} does not exist ({needed.key})")
    return Demand(tuple(claims), tuple(dict.fromkeys(problems)), tuple(sorted(unmodelled)))
