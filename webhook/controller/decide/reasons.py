"""Why a gang does not fit, node by node (`Why`), said two ways: in full for the cluster's operators
(`summarize`: `gangkeeper explain`), and counted by kind for the workload's owner (`summarize_for_tenant`:
events and the Gang object, which name no node, taint or free capacity of the cluster's)."""

from __future__ import annotations

from collections.abc import Mapping

from webhook.controller.decide.shapes import (
    PODS,
    Shape,
    show,
)

# why a node takes no more pods: a sentence, or (shape, its free capacity, pods that fit, pods wanted),
# written out only when someone reads it (most passes only need to know that a gang does not fit)
Why = str | tuple["Shape", Mapping[str, int], int, int]


# what a tenant is told of a node that can never take its pods: the kind of reason, never the node,
# its taint or its labels (those are the cluster's, and other tenants', to see in `gangkeeper explain`)
STATIC_KINDS = (
    ("taint ", "a taint its pods do not tolerate"),
    ("nodeSelector ", "its nodeSelector does not match"),
    ("required node affinity", "its required node affinity does not match"),
    ("cordoned", "cordoned"),
)


def summarize_for_tenant(why: Mapping[str, Why]) -> list[str]:
    """Nodes counted by kind of reason, largest group first: ["3 nodes: a taint its pods do not tolerate",
    "2 nodes: 1 of 4 pods fit (short of cpu)"]: no node's name, taint or free capacity, which belong
    to the cluster and to other tenants (events and the Gang object are read by the workload's owner)."""
    counted: dict[str, int] = {}
    for reason in why.values():
        if isinstance(reason, str):
            said = next((text for prefix, text in STATIC_KINDS if reason.startswith(prefix)), "cannot take its pods")
        else:
            shape, free, fits, wanted = reason
            short = [name for name, amount in shape.positive if free.get(name, 0) // amount == fits]
            said = f"{fits} of {wanted} pods fit (short of {', '.join(short) or 'room'})"
        counted[said] = counted.get(said, 0) + 1
    ranked = sorted(counted.items(), key=lambda item: (-item[1], item[0]))
    return [f"{count} node{'s' if count != 1 else ''}: {said}" for said, count in ranked]


def summarize(why: Mapping[str, Why], limit: int = 6) -> list[str]:
    """Nodes grouped by reason, largest group first: ["worker1, worker2: taint ... not tolerated", ...].
    Capacity reasons are grouped by what limits the node, with the most any of them has free, so that
    5,000 nodes each a little short make one line, not 5,000."""
    said: dict[str, list[str]] = {}
    short: dict[tuple[int, int, tuple[tuple[str, int], ...]], tuple[list[str], dict[str, int]]] = {}
    for node, reason in sorted(why.items()):
        if isinstance(reason, str):
            said.setdefault(reason, []).append(node)
            continue
        shape, free, fits, wanted = reason
        limits = tuple((name, amount) for name, amount in shape.positive if free.get(name, 0) // amount == fits)
        names, most = short.setdefault((fits, wanted, limits), ([], {}))
        names.append(node)
        for name, _ in limits:
            most[name] = max(most.get(name, -(2**62)), free.get(name, 0))
    groups: list[tuple[list[str], str]] = [(names, reason) for reason, names in said.items()]
    for (fits, wanted, limits), (names, most) in short.items():
        parts = [
            "pod count at its limit"
            if name == PODS
            else f"needs {show(name, amount)} each, {'' if len(names) == 1 else 'at most '}"
            f"{show(name, max(most.get(name, 0), 0))} free"
            for name, amount in limits
        ]
        groups.append((names, f"{fits} of {wanted} pods fit ({'; '.join(parts) or 'no requests'})"))
    lines = []
    for names, reason in sorted(groups, key=lambda item: (-len(item[0]), item[1])):
        shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        lines.append(f"{shown}: {reason}")
    return lines
