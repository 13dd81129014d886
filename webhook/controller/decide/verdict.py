"""gangkeeper's own verdict on a gang another mechanism places (Volcano, coscheduling, native), from its
model of the cluster: the Gang of such a gang says, beside what its mechanism did, whether the gang fits
now, how much of it the free capacity holds and why not the rest, or that it never fits this cluster,
as a gate gang's Gang does (issue 78: one verdict per gang, on every mechanism). Tenant-safe: counted by
kind of reason, never naming another tenant's node or capacity (reasons.summarize_for_tenant)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.controller.decide import placement
from webhook.controller.decide.eligibility import Eligibility
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.reasons import summarize_for_tenant
from webhook.controller.decide.shapes import Node

PREFIX = "gangkeeper's model"


def model_verdict(
    pods: Sequence[PodView],
    min_member: int,
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    used_ports: Mapping[str, Iterable[Any]] | None,
    eligibility: Eligibility,
    grows: bool = False,
) -> str | None:
    """What the model says of a gang with fewer than `min_member` members bound; None once it has them
    (running whole, or short: the supervisor says that). On a cluster an autoscaler grows (`grows`), only
    that it fits now: what the nodes there now cannot hold, the autoscaler's verdict says."""
    live = [p for p in pods if not p.terminal]
    bound = sum(1 for p in live if p.node_name)
    if bound:
        return None  # running, or partly: recovery's and the partial start's messages say it
    members = [placement.Member(p.name, p.shape) for p in live]
    if len(members) < min_member:
        return f"{PREFIX}: waiting for members ({len(members)} of {min_member} exist)"
    if any(p.shape.unmodelled for p in live):
        return None  # what the model cannot judge (devices through DRA on these mechanisms): no guess
    if grows:
        found = placement.place(members, nodes, free, used_ports=used_ports, eligibility=eligibility)
        return f"{PREFIX}: fits now" if len(found.assignments) >= min_member else None
    if placement.on_empty_cluster(eligibility, members[:min_member]) is None:
        return f"{PREFIX}: never fits this cluster ({min_member} pods: not even on its nodes emptied)"
    found = placement.place(members, nodes, free, used_ports=used_ports, eligibility=eligibility)
    if len(found.assignments) >= min_member:
        return f"{PREFIX}: fits now"
    why = "; ".join(summarize_for_tenant(found.why)[:3])
    return f"{PREFIX}: waiting for capacity, room for {len(found.assignments)} of {min_member} ({why})"
