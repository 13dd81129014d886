"""What the controller knows of one pod (`PodView`, built from the API object once per change), its
scheduling shape, a release's record, and the time format of the Gang's books: pure, no API calls."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from webhook import contract
from webhook.controller import interning
from webhook.controller.decide.devices import claims_devices
from webhook.controller.decide.shapes import Shape
from webhook.gangs.pod import member_group, workload_uid

HOSTNAME_LABEL = "kubernetes.io/hostname"


DEFAULT_TIMEOUT_SECONDS = 300  # what the native gang scheduler waits at Permit


# how long a gang that ran whole may run short of minMember before it is requeued whole (the role of
# Kueue's waitForPodsReady.recoveryTimeout, apis/config/v1beta1/configuration_types.go)
DEFAULT_RECOVERY_SECONDS = 120


# Release PATCHes in flight at once: each waits on the API server, not on the controller. On the real
# one (bench/cluster.py, 5,000 KWOK nodes, 1.36.3, 3 rounds each) 64 lifted a 1,000-pod gang's gates
# over 8.7-11.1 s against 11.1-12.9 s at 16, and ran 50 gangs of 20 in 19.7-20.5 s against 21.1-21.5 s.
RELEASE_CONCURRENCY = 64


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    # a time without a zone (written by hand) cannot be compared with the clock's: unreadable
    return moment if moment.tzinfo is not None else None


def format_time(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_EMPTY: Mapping[str, str] = MappingProxyType({})


EMPTY_RECORDS: Mapping[str, Release] = MappingProxyType({})


# besides the containers, what Shape.from_pod_spec reads: two pods with the same containers and
# different affinity, selectors or tolerations have different shapes
_CONSTRAINT_FIELDS = (
    "affinity",
    "nodeSelector",
    "tolerations",
    "topologySpreadConstraints",
    "hostNetwork",
    "volumes",
    "resourceClaims",
)


def shape_key(spec: Mapping[str, Any]) -> tuple[int, tuple[tuple[str, int | str], ...]] | None:
    """What tells two pods' shapes equal without working them out, where that is cheap: the identity of
    their canonical containers (interning) and of the other fields placement reads (any not canonical as
    JSON). None where the pod has more (init containers, overhead, pod-level resources)."""
    containers = spec.get("containers")
    plain = not (spec.get("initContainers") or spec.get("overhead") or spec.get("resources"))
    if not (plain and containers is not None and interning.is_canonical(containers)):
        return None
    # a pod's claims are canonical too (informer.py): a gang claiming devices is not written out per pod
    return (
        id(containers),
        tuple(
            (f, id(value) if interning.is_canonical(value) else json.dumps(value, sort_keys=True))
            for f in _CONSTRAINT_FIELDS
            if (value := spec.get(f))
        ),
    )


def shape_or_one_pod(spec: Mapping[str, Any]) -> Shape:
    """The pod's scheduling shape; one pod and nothing more where its requests do not parse."""
    try:
        return Shape.from_pod_spec(spec)
    except ValueError:
        return Shape(requests=(("pods", 1),))


@dataclass(frozen=True, slots=True)
class Release:
    """The controller's record of one released pod (its Gang's status): where its capacity is held, since when."""

    uid: str
    node: str
    at: dt.datetime


def _gated(spec: Mapping[str, Any]) -> bool:
    return any(g.get("name") == contract.GATE for g in spec.get("schedulingGates") or [])


def _other_gates(spec: Mapping[str, Any]) -> tuple[str, ...]:
    names = (str(g.get("name", "")) for g in spec.get("schedulingGates") or [])
    return tuple(sorted(name for name in names if name != contract.GATE))


def _controller_ref(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None)


def _shaped(spec: Mapping[str, Any], shape: Shape | None, shaped: Callable[[Shape], Shape] | None) -> Shape:
    found = shape if shape is not None else shape_or_one_pod(spec)
    return found if shaped is None else shaped(found)


def _copied(strings: Mapping[str, str] | None) -> Mapping[str, str]:
    return dict(strings) if strings else _EMPTY


def _not_scheduled_reason(status: Mapping[str, Any]) -> str | None:
    """The reason of a PodScheduled=False condition (Unschedulable: refused; Volcano's Schedulable: it
    could be placed once its gang can); None when the scheduler has not written one yet. A refusal for
    a moment is none: the pod's shared claim was being allocated for another pod, and kube-scheduler
    tries it again once that lands (dynamicresources.go PreFilter)."""
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            if CLAIM_IN_FLIGHT in str(c.get("message") or ""):
                return None
            return str(c.get("reason") or "")
    return None


# kube-scheduler refuses a pod whose shared claim is being allocated for another pod right now, and tries
# it again when that allocation lands (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go,
# PreFilter: "resource claim %s is in the process of being allocated"): no verdict on the pod's node
CLAIM_IN_FLIGHT = "is in the process of being allocated"


def gang_priority(priorities: Iterable[int]) -> int:
    """A gang's priority is its least important member's: it may preempt only what each of its pods could
    (one pod in a rationed PriorityClass lends the gang nothing), and it is preempted, and queued, at
    that priority too. kube-scheduler preempts each pod at its own priority; a gang goes whole, so its
    one priority is the one every member has at least."""
    return min(priorities, default=0)


@dataclass(frozen=True, slots=True)
class PodView:
    """The parts of a pod the controller acts on."""

    namespace: str
    name: str
    uid: str
    group: str
    gated: bool  # still behind gangkeeper's gate
    node_name: str | None  # bound to this node
    pinned_node: str | None  # the node its release pinned it to (`pinned_to`)
    released_at: dt.datetime | None
    created_at: dt.datetime | None
    terminal: bool  # Succeeded, Failed, or being deleted: no longer a member of its gang
    finished: bool  # Succeeded or Failed: no longer holds its node
    shape: Shape
    owner: Mapping[str, Any] | None
    resource_version: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0  # spec.priority, resolved from priorityClassName at admission
    unschedulable: bool = False  # PodScheduled=False, reason Unschedulable: the scheduler refused it
    planned_node: str | None = None  # where its release promised it capacity (the Gang's record)
    succeeded: bool = False  # phase Succeeded: its work is done (a Job's wave ends), not lost
    preempts: bool = True  # spec.preemptionPolicy (from its PriorityClass) is not Never
    other_gates: tuple[str, ...] = ()  # scheduling gates not gangkeeper's (Kueue's topology gate)
    workload_uid: str = ""  # the uid of the workload it was made for, where that can be told
    passed_over: bool = False  # PodScheduled=False, looked at and not refused (Volcano's Schedulable); not gated
    # it claims devices (resourceClaims, or an extended resource a DeviceClass may stand for): read once per
    # change of the pod, not on each pass's devices check (a twentieth of the controller's CPU, py-spy)
    claims_devices: bool = False

    @staticmethod
    def from_api(
        pod: Mapping[str, Any],
        release: Release | None = None,
        group: str | None = None,
        shaped: Callable[[Shape], Shape] | None = None,
        shape: Shape | None = None,
    ) -> PodView:
        """The pod as the controller sees it. Released or not, and where, is the controller's own record
        (its Gang's status), matched by uid: nothing the pod's owner writes on it can say so. Its gang is
        the one it is a member of by identity (`member_group`, given when already worked out), never
        the one its labels name alone. `shape`: its shape as worked out before (observe/holds.py
        ShapesSeen), else worked out here; `shaped`: its shape as placement counts it (its claims'
        devices added: Demand.shaped)."""
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        gated = _gated(spec)
        # a record of an earlier pod of the same name (a StatefulSet's), or of a pod gated again, is not this one's
        mine = release if release is not None and release.uid == meta.get("uid") and not gated else None
        phase = status.get("phase")
        verdict = _not_scheduled_reason(status)
        return PodView(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            group=member_group(dict(pod)) if group is None else group,
            gated=gated,
            node_name=spec.get("nodeName") or None,
            pinned_node=pinned_to(spec),
            released_at=mine.at if mine is not None else None,
            created_at=parse_time(meta.get("creationTimestamp")),
            terminal=phase in ("Succeeded", "Failed") or bool(meta.get("deletionTimestamp")),
            finished=phase in ("Succeeded", "Failed"),
            shape=_shaped(spec, shape, shaped),
            owner=_controller_ref(meta),
            resource_version=meta.get("resourceVersion", ""),
            annotations=_copied(meta.get("annotations")),
            labels=_copied(meta.get("labels")),
            priority=int(spec.get("priority") or 0),
            unschedulable=verdict == "Unschedulable",
            passed_over=verdict not in (None, "Unschedulable", "SchedulingGated"),
            planned_node=mine.node if mine is not None else None,
            succeeded=phase == "Succeeded",
            preempts=spec.get("preemptionPolicy") != "Never",
            other_gates=_other_gates(spec),
            workload_uid=workload_uid(dict(pod)),
            claims_devices=claims_devices(spec),
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def units(self) -> dict[str, int]:
        return dict(self.shape.requests)

    @property
    def holds_node(self) -> str | None:
        """The node whose capacity this pod takes: where it is bound, or where it was promised. A pod being
        deleted still holds its node until it is gone, as in kube-scheduler's cache."""
        if self.finished:
            return None
        if self.terminal and not self.node_name:
            return None
        if self.node_name:
            return self.node_name
        if not self.gated and self.released_at is not None:
            # promised: where placement planned it (pinned there, or its capacity reserved there)
            return self.planned_node or self.pinned_node
        return None


# the pin: node affinity on the node's name. kube-scheduler's NodeAffinity PreFilter narrows the nodes it
# filters to the names every required term lists this way, and for nothing else (a nodeSelector on
# kubernetes.io/hostname is checked on every node: 5,000 Filter calls per pinned pod on 5,000 nodes);
# k8s.io/kubernetes pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go, PreFilter
NODE_NAME_FIELD = "metadata.name"


def _pins(requirement: Mapping[str, Any]) -> str | None:
    values = requirement.get("values") or []
    if requirement.get("key") == NODE_NAME_FIELD and requirement.get("operator") == "In" and len(values) == 1:
        return str(values[0])
    return None


def required_terms(spec: Mapping[str, Any]) -> list[Any]:
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    return list((affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])


def pin_terms(terms: Sequence[Mapping[str, Any]], node: str) -> list[dict[str, Any]]:
    """The pod's required node terms with the pin added. A gated pod's terms may only grow (KEP-3838,
    pkg/apis/core/validation/validation.go validateNodeAffinityMutation): none become one term of the
    pin alone; each term gets the pin ANDed in; a term with no requirement (it matches no node, and may
    gain none) stays as it is."""
    pin = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    if not terms:
        return [{"matchFields": [pin]}]
    pinned = []
    for term in terms:
        term = dict(term)
        if term.get("matchExpressions") or term.get("matchFields"):
            term["matchFields"] = [*(term.get("matchFields") or []), pin]
        pinned.append(term)
    return pinned


def pinned_to(spec: Mapping[str, Any]) -> str | None:
    """The node a release pinned the pod to: the one node every required term with a requirement names
    by its last metadata.name requirement (what `pin_terms` appends); a pod pinned by an earlier version
    carries nodeSelector kubernetes.io/hostname instead."""
    named = {
        _pins((term.get("matchFields") or [{}])[-1])
        for term in required_terms(spec)
        if term.get("matchExpressions") or term.get("matchFields")
    }
    if len(named) == 1 and None not in named:
        return named.pop()
    return (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL)
