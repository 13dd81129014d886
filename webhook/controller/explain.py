"""`gangkeeper explain NAMESPACE/GANG`: why a gang waits, node by node."""

from __future__ import annotations

from webhook.controller import placement
from webhook.controller.kube import Api
from webhook.controller.reconciler import Controller, Listing


def explain(api: Api, namespace: str, gang_name: str) -> str:
    controller = Controller(api, Listing(api))
    snapshot = controller.snapshot()
    gang = snapshot.gangs.get(f"{namespace}/{gang_name}")
    if gang is None:
        return f"gang {namespace}/{gang_name}: no pods carry gangkeeper.io/group={gang_name}"
    resolved = controller.resolve(gang, {})
    lines = [f"gang {namespace}/{gang_name}"]
    if resolved.spec is None:
        return "\n".join([*lines, f"  cannot size the gang: {resolved.problem}"])
    live = [p for p in gang.pods if not p.terminal]
    gated = [p for p in live if p.gated]
    # the controller's own decision, backoff included: explain and the controller never disagree
    decision = controller.decide_for(gang, resolved, snapshot.nodes, snapshot.free, controller.clock())
    lines += [
        f"  members: {len(live)} present of minMember {resolved.spec.min_member} ({len(gated)} gated)",
        f"  state: {decision.state}: {decision.message}",
    ]
    if gated:
        needs = gated[0].shape.describe_requests()
        lines.append(f"  each gated pod needs: {needs}; the gang needs {len(gated)} such pods")
    if decision.placement is not None and decision.placement.assignments:
        per_node: dict[str, int] = {}
        for node in decision.placement.assignments.values():
            per_node[node] = per_node.get(node, 0) + 1
        best = ", ".join(f"{node}: {count}" for node, count in sorted(per_node.items()))
        lines.append(f"  best placement found: {best}")
    if decision.placement is not None and decision.placement.reasons:
        lines.append("  what blocks the rest:")
        lines += [f"    {line}" for line in placement.summarize(decision.placement.reasons)]
    return "\n".join(lines)
