"""Whole-gang preemption on the gate backend: which lower-priority pods must go for a waiting gang to fit.

Gated pods never reach kube-scheduler's preemption (PostFilter runs only for a pod that is scheduled),
so the gate controller decides it, as Volcano's and KAI's preempt actions and kube-scheduler's
workload-aware preemption (KEP-5710) do for their gangs: a victim is a whole gate gang or a lone pod
in no gang, always of lower priority than the gang that waits; never part of a gang, never a pod of
equal or higher priority. Pure: the candidates come from the cluster index, the caller acts.

The choice: the victims in order (lowest priority first, then the fewest pods, then the most recently
released, whose going loses the least work, then the name), the gang is placed as if the shortest run of
them that suffices were gone (found by bisection); what each of those nodes lacks now is covered by
victims in that order, then any victim the cover holds without is given back (the last taken first), so
no victim is taken in vain, and one placement with exactly those gone confirms it. kube-scheduler's
DefaultPreemption picks likewise: the fewest victims, then the latest start among them (pkg/scheduler/
framework/preemption/preemption.go, pickOneNodeForPreemption). Only victims holding capacity on the
nodes the gang would need are considered, at most MAX_CANDIDATES of them: a dozen placements and
arithmetic per candidate, however large the cluster (bench/controller.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from webhook.controller.decide import placement
from webhook.controller.decide.eligibility import Domains, Eligibility
from webhook.controller.decide.placement import Member
from webhook.controller.decide.shapes import Node

MAX_CANDIDATES = 4096  # the choice is arithmetic per candidate
# a gate gang released less than this long ago is nobody's victim (the controller's --min-runtime-seconds,
# KAI's preemptMinRuntime): no thrash between two gangs taking turns
DEFAULT_MIN_RUNTIME_SECONDS = 60.0


@dataclass(frozen=True)
class Victim:
    """A preemption unit: a whole gate gang (every pod holding capacity) or one pod in no gang."""

    key: str  # "namespace/gang" or "namespace/pod"
    gang: bool
    priority: int
    holds: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # (node, requests) of each of its pods
    # when it was last released (epoch s; -inf: not known, a pod in no gang): the newest loses least work
    released: float = float("-inf")

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def size(self) -> int:
        return len(self.holds)

    def describe(self) -> str:
        return f"{'gang' if self.gang else 'pod'} {self.key} (priority {self.priority})"


def _freed(free: Mapping[str, Mapping[str, int]], victims: Sequence[Victim]) -> dict[str, dict[str, int]]:
    """`free` with the victims' capacity given back (only the nodes they hold are copied)."""
    result: dict[str, dict[str, int]] = dict(free)  # type: ignore[arg-type]
    for victim in victims:
        for node, units in victim.holds:
            if node not in result:
                continue
            if result[node] is free.get(node):
                result[node] = dict(result[node])
            for resource, amount in units:
                result[node][resource] = result[node].get(resource, 0) + amount
    return result


def choose_victims(
    members: Sequence[Member],
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    candidates: Sequence[Victim],
    priority: int,
    needed_nodes: Sequence[str],
    *,
    spread: bool = False,
    eligibility: Eligibility | None = None,
    domains: Domains | None = None,
    protected: Callable[[Victim], bool] = lambda victim: False,
) -> tuple[Victim, ...] | None:
    """The victims whose going lets the whole gang fit, or None when no allowed set of them does."""
    needed = set(needed_nodes)
    allowed = sorted(
        (
            v
            for v in candidates
            if v.priority < priority and any(node in needed for node, _ in v.holds) and not protected(v)
        ),
        key=lambda v: (v.priority, v.size, -v.released, v.key),
    )[:MAX_CANDIDATES]

    def place(victims: Sequence[Victim]) -> placement.Placement:
        return placement.place(
            members, nodes, _freed(free, victims), spread=spread, eligibility=eligibility, domains=domains
        )

    shortest = _shortest_run_that_suffices(allowed, place)
    if shortest is None:
        return None
    allowed, hoped = shortest
    deficit = _deficit(members, hoped.assignments, free)
    chosen = _cover(allowed, deficit)
    # one full placement confirms the choice (the cover is per node, the placement's own)
    return tuple(chosen) if chosen is not None and place(chosen).complete else None


def _shortest_run_that_suffices(
    allowed: Sequence[Victim], place: Callable[[Sequence[Victim]], placement.Placement]
) -> tuple[list[Victim], placement.Placement] | None:
    """The shortest run of the allowed victims, in their order, whose going lets the gang fit, and where
    it would go: by bisection (more victims gone never makes it fit less), log2 of their number placements."""
    if not allowed:
        return None
    whole = place(allowed)
    if not whole.complete:
        return None
    low, high, best = 0, len(allowed), whole  # a run of `high` suffices, of `low` does not (none: it waits)
    while high - low > 1:
        middle = (low + high) // 2
        hoped = place(allowed[:middle])
        if hoped.complete:
            high, best = middle, hoped
        else:
            low = middle
    return list(allowed[:high]), best


def _deficit(
    members: Sequence[Member], assignments: Mapping[str, str], free: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """What each node of the hoped-for placement lacks now."""
    shape_of = {m.name: m.shape for m in members}
    deficit: dict[str, dict[str, int]] = {}
    for name, node in assignments.items():
        for resource, amount in shape_of[name].requests:
            deficit.setdefault(node, {})[resource] = deficit.get(node, {}).get(resource, 0) + amount
    for node, units in deficit.items():
        for resource in list(units):
            units[resource] -= max(free.get(node, {}).get(resource, 0), 0)
    return deficit


def _cover(allowed: Sequence[Victim], deficit: dict[str, dict[str, int]]) -> list[Victim] | None:
    """Victims in order until every lack is covered (arithmetic, however many candidates), then every one
    the gang fits without given back; None when they cannot cover it."""
    chosen: list[Victim] = []
    for victim in allowed:
        if not _lacking(deficit):
            break
        if _covers(victim, deficit):
            chosen.append(victim)
            _give(victim, deficit, -1)
    if _lacking(deficit):
        return None
    for victim in reversed(list(chosen)):
        _give(victim, deficit, +1)
        if _lacking(deficit):
            _give(victim, deficit, -1)
        else:
            chosen.remove(victim)
    return chosen


def _lacking(deficit: Mapping[str, Mapping[str, int]]) -> bool:
    return any(amount > 0 for units in deficit.values() for amount in units.values())


def _covers(victim: Victim, deficit: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether the victim frees something a node of the gang still lacks."""
    return any(
        amount > 0 and deficit.get(node, {}).get(resource, 0) > 0
        for node, units in victim.holds
        for resource, amount in units
    )


def _give(victim: Victim, deficit: dict[str, dict[str, int]], sign: int) -> None:
    """The victim's capacity taken from (-1: it goes) or put back into (+1) the nodes' lack."""
    for node, units in victim.holds:
        lack = deficit.get(node)
        if lack is None:
            continue
        for resource, amount in units:
            if resource in lack:
                lack[resource] += sign * amount


def selects(selector: Mapping[str, object] | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (a PodDisruptionBudget's) selects these labels; an empty one selects all
    (policy/v1, as the disruption controller reads it)."""
    if not selector:
        return True
    match = selector.get("matchLabels") or {}
    if isinstance(match, Mapping) and any(labels.get(str(k)) != v for k, v in match.items()):
        return False
    expressions = selector.get("matchExpressions") or []
    return all(_matches(e, labels) for e in (expressions if isinstance(expressions, list) else [None]))


def _matches(expression: object, labels: Mapping[str, str]) -> bool:
    """One matchExpressions entry (In, NotIn, Exists, DoesNotExist); a malformed one matches nothing."""
    if not isinstance(expression, Mapping):
        return False
    key, operator = str(expression.get("key", "")), expression.get("operator")
    values = set(expression.get("values") or [])
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not (present and labels[key] in values)
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    return True


def budget_blocks(budgets: Sequence[Mapping[str, object]], pod_labels: Sequence[Mapping[str, str]]) -> bool:
    """Whether some PodDisruptionBudget of the victim's namespace would refuse its pods going: it
    selects more of them than it allows disruptions now (status.disruptionsAllowed)."""
    for budget in budgets:
        spec = budget.get("spec") or {}
        status = budget.get("status") or {}
        selector = spec.get("selector") if isinstance(spec, Mapping) else None
        if selector is None:
            continue  # policy/v1: a null selector selects no pod
        covered = sum(1 for labels in pod_labels if isinstance(selector, Mapping) and selects(selector, labels))
        allowed = status.get("disruptionsAllowed", 0) if isinstance(status, Mapping) else 0
        if covered and covered > (allowed if isinstance(allowed, int) else 0):
            return True
    return False
