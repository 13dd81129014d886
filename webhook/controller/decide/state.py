"""What to do next with one gang (`decide`: the start rules, then recovery), and each pod's release patch:
pure functions, no API calls.

A release is a two-phase commit. Phase one decides nodes for the whole gang at once and records them,
with the release time, in the gang's Gang object; phase two pins each pod to its node (a required node affinity
term on metadata.name, `pin_terms`) and lifts its gate in one PATCH per pod. A controller that dies between two
PATCHes loses nothing: pods already released are recognised by their record, their capacity counts as
taken, and the rest of the gang is placed around them on the next pass.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from webhook import contract
from webhook.controller.decide.eligibility import Eligibility
from webhook.controller.decide.placement import Member, Placement
from webhook.controller.decide.pods import EMPTY_RECORDS, PodView, Release, pin_terms, required_terms
from webhook.controller.decide.recovery import recover, stranded_since
from webhook.controller.decide.shapes import HostPort, Node
from webhook.controller.decide.situation import Decision, GangSpec, History
from webhook.controller.decide.start import start_decision

NO_HISTORY = History()  # a gang that never ran and was never requeued


def decide(
    pods: Sequence[PodView],
    spec: GangSpec,
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    now: dt.datetime,
    not_before: dt.datetime | None = None,
    *,
    used_ports: Mapping[str, Iterable[HostPort]] | None = None,
    eligibility: Eligibility | None = None,
    without_lower_priority: Callable[[int], Mapping[str, Mapping[str, int]] | None] | None = None,
    room: Mapping[str, Mapping[str, int]] | None = None,
    ever: Callable[[Sequence[Member]], Placement] | None = None,
    history: History = NO_HISTORY,
    records: Mapping[str, Release] = EMPTY_RECORDS,
    workload_nodes: frozenset[str] = frozenset(),
    devices_fit: Callable[[Mapping[str, str]], str | None] | None = None,
    going: Mapping[str, Mapping[str, int]] | None = None,
    yielding: Mapping[str, Mapping[str, int]] | None = None,
) -> Decision:
    """The next step for one gang: the start rules (`start_decision`), then recovery (`recover`)."""
    decision = start_decision(
        pods,
        spec,
        nodes,
        free,
        now,
        not_before,
        used_ports=used_ports,
        eligibility=eligibility,
        without_lower_priority=without_lower_priority,
        room=room,
        ever=ever,
        records=records,
        workload_nodes=workload_nodes,
        devices_fit=devices_fit,
        going=going,
        yielding=yielding,
    )
    if stranded_since([p for p in pods if not p.terminal], spec, records) is not None:
        decision.timed = True
    return recover(decision, pods, spec, history, now, records, not_before)


def release_patch(pod: PodView, node: str | None, spec: Mapping[str, Any]) -> dict[str, Any]:
    """One strategic merge patch: pin to the node (None: no pin, the capacity held where the Gang's
    record says), take gangkeeper's gate out of the list by its name (`schedulingGates` merges by name,
    k8s.io/api core/v1 types.go PodSpec), other gates left as they are; guarded by resourceVersion so
    a pod changed since it was read is left for the next pass (the terms it extends are the ones it
    read). A strategic patch is applied to the stored pod as a map; a JSON merge patch goes through
    the pod's JSON and back, half again as much of kube-apiserver's time per release (its profile,
    bench/cluster.py autoscale). The release itself is recorded in the Gang's status before this is
    sent."""
    patch: dict[str, Any] = {"schedulingGates": [{"name": contract.GATE, "$patch": "delete"}]}
    if node is not None:
        terms = pin_terms(required_terms(spec), node)
        # nodeSelectorTerms has no merge key, so the patch replaces the list; the maps around it merge
        required = {"nodeSelectorTerms": terms}
        patch["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    return {"metadata": {"resourceVersion": pod.resource_version}, "spec": patch}


DEFAULT_BACKOFF_BASE_SECONDS = 30.0
MAX_BACKOFF_SECONDS = 900


def backoff_seconds(
    attempts: int, base: float = DEFAULT_BACKOFF_BASE_SECONDS, cap: float = MAX_BACKOFF_SECONDS
) -> float:
    return float(min(cap, base * 2 ** max(attempts - 1, 0)))
