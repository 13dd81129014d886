"""Groups of a gang's pods that are useful only whole (a KubeRay multi-host replica: numOfHosts pods, one
slice of TPUs or GPUs each; gangs/model.py WholeGroups): the gate releases a group's pods together or
none of them, above the gang's minimum too, where a release would otherwise take any pods that fit.

A group is releasable when all its pods exist (KubeRay creates a replica's pods in one reconcile, but a
pass may see part of them) and every one of them not released yet is in the release. Pure: values in,
the release kept out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from webhook.controller.decide.pods import PodView
from webhook.gangs.model import WholeGroups


def grouped(pods: Sequence[PodView], rule: WholeGroups | None) -> list[PodView]:
    """The pods with each group's together, in the order of each group's first pod: placement fills a
    shape's members in order (placement.place), so at most one group of a shape is placed in part."""
    if rule is None:
        return list(pods)
    order: dict[str, list[PodView]] = {}
    for pod in pods:
        found = rule.size_of(pod.labels)
        order.setdefault(found[0] if found else f"\x00{pod.name}", []).append(pod)
    return [pod for members in order.values() for pod in members]


def whole(chosen: Mapping[str, str], live: Sequence[PodView], rule: WholeGroups | None) -> dict[str, str]:
    """`chosen` (pod name -> node) without the pods of any group not released whole by it: a group some
    of whose pods do not exist yet, or whose pods not released yet are not all chosen."""
    if rule is None:
        return dict(chosen)
    members: dict[str, list[PodView]] = {}
    sizes: dict[str, int] = {}
    for pod in live:
        found = rule.size_of(pod.labels)
        if found is not None:
            members.setdefault(found[0], []).append(pod)
            sizes[found[0]] = found[1]
    held = {
        pod.name
        for group, pods in members.items()
        if len(pods) < sizes[group] or not all(p.name in chosen for p in pods if p.gated)
        for pod in pods
    }
    return {name: node for name, node in chosen.items() if name not in held}


def _units(pods: Sequence[PodView], rule: WholeGroups) -> dict[tuple[str, str], tuple[int, list[PodView]]]:
    """(role, group) -> (its size, its pods here), in the order of each group's first pod."""
    units: dict[tuple[str, str], tuple[int, list[PodView]]] = {}
    for pod in pods:
        if (found := rule.unit_of(pod.name, pod.labels)) is not None:
            units.setdefault((found[0], found[1]), (found[2], []))[1].append(pod)
    return units


def minimum_first(live: Sequence[PodView], rule: WholeGroups | None) -> tuple[list[PodView], list[PodView]]:
    """The gated pods split in two: those that complete every role's minimum (the pods of no role, and
    for each role as many whole groups as its minimum lacks beyond the groups already released, in
    order), and the rest (groups above the minimums). Placed in that order, a group above a role's
    minimum never takes room another role's minimum needs (start.py places the first part alone)."""
    gated = [p for p in live if p.gated]
    if rule is None or not rule.minimums:
        return gated, []
    units = _units([p for p in live if not p.terminal], rule)
    held: dict[str, int] = {}
    for (role, _), (size, pods) in units.items():
        if len(pods) >= size and not any(p.gated for p in pods):
            held[role] = held.get(role, 0) + 1
    lacking = {role: max(minimum - held.get(role, 0), 0) for role, minimum in rule.minimums}
    in_roles = {p.name for _, pods in units.values() for p in pods}
    first: list[PodView] = [p for p in gated if p.name not in in_roles]
    rest: list[PodView] = []
    for (role, _), (size, pods) in units.items():
        waiting = [p for p in pods if p.gated]
        if not waiting:
            continue
        if lacking[role] and len(pods) >= size:
            lacking[role] -= 1
            first += waiting
        else:
            rest += waiting
    return first, rest


def roles_short(chosen: Mapping[str, str], live: Sequence[PodView], rule: WholeGroups | None) -> list[str]:
    """Each role whose whole groups, counting those released and those `chosen` releases, are fewer than
    its minimum: "prefill 1 of 2" (none: every role's minimum holds)."""
    if rule is None or not rule.minimums:
        return []
    whole: dict[str, int] = {}
    for (role, _), (size, pods) in _units([p for p in live if not p.terminal], rule).items():
        if len(pods) >= size and all(not p.gated or p.name in chosen for p in pods):
            whole[role] = whole.get(role, 0) + 1
    return [
        f"{role} {whole.get(role, 0)} of {minimum}" for role, minimum in rule.minimums if whole.get(role, 0) < minimum
    ]


def role_counts(live: Sequence[PodView], rule: WholeGroups) -> list[tuple[str, int, int, int]]:
    """(role, its minimum, its groups present, those bound whole) for every role, in the rule's order."""
    present: dict[str, int] = {}
    bound: dict[str, int] = {}
    for (role, _), (size, pods) in _units([p for p in live if not p.terminal], rule).items():
        present[role] = present.get(role, 0) + 1
        if len(pods) >= size and all(p.node_name for p in pods):
            bound[role] = bound.get(role, 0) + 1
    return [(role, minimum, present.get(role, 0), bound.get(role, 0)) for role, minimum in rule.minimums]


GROUP_STATES = ("waiting", "running", "partly_bound")


def group_states(gangs: Iterable[tuple[str, Sequence[PodView], WholeGroups | None]]) -> dict[tuple[str, str], int]:
    """(mechanism, state) -> the groups of these gangs in it: waiting (none of its live pods bound),
    running (all its pods there and bound), partly_bound (some bound, not all)."""
    found: dict[tuple[str, str], int] = {}
    for mechanism, pods, rule in gangs:
        if rule is None:
            continue
        members: dict[str, list[PodView]] = {}
        sizes: dict[str, int] = {}
        for pod in pods:
            if not pod.terminal and (found_in := rule.size_of(pod.labels)) is not None:
                members.setdefault(found_in[0], []).append(pod)
                sizes[found_in[0]] = found_in[1]
        for name, live in members.items():
            bound = sum(1 for p in live if p.node_name)
            state = "waiting" if not bound else "running" if bound >= sizes[name] else "partly_bound"
            found[(mechanism, state)] = found.get((mechanism, state), 0) + 1
    return found
