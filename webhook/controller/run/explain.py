"""`gangkeeper explain NAMESPACE/GANG`: why a gang waits, node by node, and where it stands in the queue."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from webhook.controller.act.gangobject import GANGS
from webhook.controller.decide import placement, reasons
from webhook.controller.decide.pods import PodView, gang_priority
from webhook.controller.decide.queue import DEFAULT_POLICY, Policy
from webhook.controller.decide.situation import Decision, GangSpec
from webhook.controller.decide.verdict import model_verdict
from webhook.controller.decide.whole_groups import GROUP_STATES, group_states, role_counts
from webhook.controller.observe.devices import RESOURCES as DRA_RESOURCES
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.source import Listing
from webhook.controller.run.reconciler import Controller
from webhook.informer import Informer
from webhook.kube import Api, ApiError, Resource


class UnknownGang(LookupError):
    """No pod carries the gang's label: a typo, another namespace, or a gang long gone."""


def matching_gangs(reference: str, gangs: list[Mapping[str, Any]]) -> list[str]:
    """The Gang objects `reference` names, as a user writes it: the gang (`job-train`), what they applied
    (`Job/train`, `job/train`, `jobs/train`), or the workload's name alone (`train`). A workload with
    several gangs (a LeaderWorkerSet's groups) or two workloads of one name give several."""
    kind, _, name = reference.rpartition("/")
    kind = kind.lower()
    found = []
    for gang in gangs:
        gang_name = str((gang.get("metadata") or {}).get("name", ""))
        workload = (gang.get("spec") or {}).get("workload") or {}
        workload_kind, workload_name = str(workload.get("kind", "")).lower(), workload.get("name")
        if gang_name == reference:
            return [gang_name]
        if workload_name == name and (not kind or kind in (workload_kind, f"{workload_kind}s", _short(workload_kind))):
            found.append(gang_name)
    return sorted(found)


def listed_once(api: Api, resources: Iterable[Resource]) -> dict[tuple[str, str], Informer]:
    """Caches of these resources, each listed once (a resource the API does not serve is left out)."""
    found = {}
    for resource in resources:
        informer = Informer(api, resource)
        try:
            informer.relist()
        except ApiError:
            continue
        found[(resource.group_version, resource.plural)] = informer
    return found


def _short(kind: str) -> str:
    return {"leaderworkerset": "lws", "statefulset": "sts", "deployment": "deploy", "cronjob": "cj"}.get(kind, kind)


def explain(
    api: Api,
    namespace: str,
    gang_name: str,
    policy: Policy = DEFAULT_POLICY,
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> str:
    # the controller's own pass, every gang in queue order, with its writes dropped: explain and the
    # controller never disagree, and the queue position and reservation are the ones it would use
    readonly = Api(api.client, read_only=True)
    controller = Controller(readonly, Listing(readonly), queue_policy=policy, clock=clock)
    controller.informers.update(listed_once(readonly, DRA_RESOURCES))  # the devices, as the controller sees them
    decisions = controller.reconcile_once()
    gang = controller.index.gangs().get(f"{namespace}/{gang_name}")
    if gang is None:
        raise UnknownGang(
            f"gang {namespace}/{gang_name}: no pods carry gangkeeper.io/group={gang_name} (kubectl get gangs -n "
            f"{namespace} lists the gangs; or name what you applied: {namespace}/Job/NAME)"
        )
    resolved = controller.resolved(gang.key)
    lines = [f"gang {namespace}/{gang_name}"]
    if resolved is None or resolved.spec is None:
        problem = resolved.problem if resolved is not None else "its workload was not read"
        return "\n".join([*lines, f"  cannot size the gang: {problem}"])
    live = [p for p in gang.pods if not p.terminal]
    gated = [p for p in live if p.gated]
    decision = decisions.get(gang.key)
    if decision is None:
        return "\n".join([*lines, *other_mechanism_lines(controller, gang, resolved.spec.min_member)])
    lines += [
        f"  members: {len(live)} present of minMember {resolved.spec.min_member} ({len(gated)} gated)",
        f"  state: {decision.state}: {decision.message}",
    ]
    if decision.preempt_nodes:  # named here only: explain's reader may list nodes
        lines.append(f"  preemption would free: {', '.join(decision.preempt_nodes)}")
    lines += topology_lines(resolved.spec, decision.placement)
    lines += group_lines(resolved.spec, live)
    lines += queue_lines(decision, decisions, gated, controller.queue_policy)
    if gated:
        needs = gated[0].shape.describe_requests()
        lines.append(f"  each gated pod needs: {needs}; the gang needs {len(gated)} such pods")
    lines += placement_lines(decision.placement)
    return "\n".join(lines)


def other_mechanism_lines(controller: Controller, gang: GangView, min_member: int) -> list[str]:
    """A gang another mechanism places: its members, gangkeeper's model's verdict on it (as its Gang says
    it, decide/verdict.py), and, node by node, where its waiting pods fit and what blocks the rest."""
    index = controller.index
    live = [p for p in gang.pods if not p.terminal]
    bound = sum(1 for p in live if p.node_name)
    mechanism = min(gang.mechanisms or {"another"})
    lines = [
        f"  members: {len(live)} present of minMember {min_member}, {bound} bound by the {mechanism} gang scheduler",
    ]
    nodes, eligibility = index.node_list(), index.eligibility()
    verdict = model_verdict(gang.pods, min_member, nodes, index.free, index.ports, eligibility)
    lines.append(f"  {verdict}" if verdict else f"  {'running whole' if bound >= min_member else 'short'}")
    waiting = [placement.Member(p.name, p.shape) for p in live if not p.node_name]
    if waiting and not bound:
        found = placement.place(waiting, nodes, index.free, used_ports=index.ports, eligibility=eligibility)
        lines += placement_lines(found)
    return lines


def queue_lines(
    decision: Decision, decisions: Mapping[str, Decision], gated: list[PodView], policy: Policy
) -> list[str]:
    """Where the gang stands in the queue, and what is reserved for it."""
    lines = []
    if decision.position:
        waiting = sum(1 for d in decisions.values() if d.position)
        priority = gang_priority(p.priority for p in gated)
        lines.append(
            f"  queue: position {decision.position} of {waiting} waiting (policy {policy}; "
            f"priority {priority}, then arrival)"
        )
    if decision.reservation:
        lines.append(f"  reservation: {decision.reservation}")
    return lines


def placement_lines(found: placement.Placement | None) -> list[str]:
    """The best placement found, node by node, and what blocks the rest."""
    if found is None:
        return []
    lines = []
    if found.assignments:
        per_node: dict[str, int] = {}
        for node in found.assignments.values():
            per_node[node] = per_node.get(node, 0) + 1
        best = ", ".join(f"{node}: {count}" for node, count in sorted(per_node.items()))
        lines.append(f"  best placement found: {best}")
    if found.why:
        lines.append("  what blocks the rest:")
        lines += [f"    {line}" for line in reasons.summarize(found.why)]
    return lines


def group_lines(spec: GangSpec, live: Sequence[PodView]) -> list[str]:
    """The gang's groups released only whole (a KubeRay multi-host replica), by state, beside its minimum."""
    rule = spec.whole_groups
    if rule is None:
        return []
    lines = []
    if rule.sizes:
        states = group_states([("", live, rule)])
        sizes = ", ".join(f"{role} {size} pods each" for role, size in rule.sizes)
        counted = ", ".join(f"{states.get(('', state), 0)} {state.replace('_', ' ')}" for state in GROUP_STATES)
        lines.append(f"  groups released whole ({sizes}, by {rule.label}): {counted}")
    for role, minimum, groups, bound in role_counts(live, rule):
        lines.append(
            f"  role {role}: minimum {minimum} whole groups, {groups} present, {bound} bound whole"
            + (" (below its minimum)" if bound < minimum else "")
        )
    return lines


def topology_lines(spec: GangSpec, found: placement.Placement | None) -> list[str]:
    """The gang's topology intent as the controller reads it (key, required or preferred, where the user
    wrote it), and the domain of the best placement found."""
    lines = []
    for scope, intent in (("its pods", spec.topology), ("its workload's gangs", spec.workload_topology)):
        if intent is not None:
            lines.append(f"  topology: {scope} in one {intent.key} domain, {intent.word} ({intent.field})")
    if spec.topology is not None and found is not None and found.domain:
        lines.append(f"  best {spec.topology.key} domain: {found.domain}")
    return lines


def explain_from_gang(api: Api, namespace: str, gang_name: str) -> str:
    """What a tenant with read access to its namespace only can see: the Gang object's status, as the
    controller last wrote it (no node-by-node placement, which needs every pod and node)."""
    try:
        gang = api.get(GANGS.path(namespace, gang_name))
    except ApiError as error:
        if error.status == 404:
            raise UnknownGang(
                f"gang {namespace}/{gang_name}: no Gang object (kubectl get gangs -n {namespace})"
            ) from None
        raise
    spec, status = gang.get("spec") or {}, gang.get("status") or {}
    lines = [
        f"gang {namespace}/{gang_name} (from its Gang object; placement details need cluster-wide read access)",
        f"  backend: {spec.get('backend', '?')}; members: {status.get('present', 0)} present of minMember "
        f"{spec.get('minMember', '?')} ({status.get('gated', 0)} gated, {status.get('running', 0)} running)",
        f"  state: {status.get('state', 'unknown')}: {status.get('message', '')}",
    ]
    if status.get("domain"):
        lines.append(f"  topology domain: {status['domain']}")
    if status.get("queuePosition"):
        lines.append(f"  queue: position {status['queuePosition']}")
    if status.get("attempts"):
        lines.append(f"  requeued: {status['attempts']} times; not before {status.get('notBefore', '-')}")
    for condition in status.get("conditions") or []:
        lines.append(
            f"  condition {condition.get('type')}={condition.get('status')} since "
            f"{condition.get('lastTransitionTime')}: {condition.get('reason')}"
        )
    return "\n".join(lines)
