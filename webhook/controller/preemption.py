"""Whole-gang preemption on the gate backend: which lower-priority pods must go for a waiting gang to fit.

Gated pods never reach kube-scheduler's preemption (PostFilter runs only for a pod that is scheduled),
so the gate controller decides it, as Volcano's and KAI's preempt actions and kube-scheduler's
workload-aware preemption (KEP-5710) do for their gangs: a victim is a whole gate gang or a lone pod
in no gang, always of lower priority than the gang that waits; never part of a gang, never a pod of
equal or higher priority. Pure: the candidates come from the cluster index, the caller acts.

The choice, in order: lowest priority first, then the smallest victim (fewest pods), then the name (a
stable order); victims are added until the gang fits, then any victim it would fit without is given
back (newest first), so no victim is taken in vain. Only victims holding capacity on the nodes the
gang would need (where it would fit with every lower-priority pod gone) are considered, at most
MAX_CANDIDATES of them: the cost of a decision is bounded however large the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from webhook.controller import placement
from webhook.controller.placement import Eligibility, Member, Node

MAX_CANDIDATES = 64


@dataclass(frozen=True)
class Victim:
    """A preemption unit: a whole gate gang (every pod holding capacity) or one pod in no gang."""

    key: str  # "namespace/gang" or "namespace/pod"
    gang: bool
    priority: int
    holds: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # (node, requests) of each of its pods

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
    domains: placement.Domains | None = None,
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
        key=lambda v: (v.priority, v.size, v.key),
    )[:MAX_CANDIDATES]

    def fits(chosen: Sequence[Victim]) -> bool:
        result = placement.place(
            members, nodes, _freed(free, chosen), spread=spread, eligibility=eligibility, domains=domains
        )
        return result.complete

    chosen: list[Victim] = []
    for victim in allowed:
        chosen.append(victim)
        if fits(chosen):
            break
    else:
        return None
    for victim in reversed(list(chosen)):  # give back every victim the gang fits without
        rest = [v for v in chosen if v is not victim]
        if rest and fits(rest):
            chosen = rest
    return tuple(chosen)


def selects(selector: Mapping[str, object] | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (a PodDisruptionBudget's) selects these labels; an empty one selects all
    (policy/v1, as the disruption controller reads it)."""
    if not selector:
        return True
    match = selector.get("matchLabels") or {}
    if isinstance(match, Mapping) and any(labels.get(str(k)) != v for k, v in match.items()):
        return False
    expressions = selector.get("matchExpressions") or []
    for expression in expressions if isinstance(expressions, list) else [None]:
        if not isinstance(expression, Mapping):
            return False
        key, operator = str(expression.get("key", "")), expression.get("operator")
        values = set(expression.get("values") or [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
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
