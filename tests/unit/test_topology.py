"""Topology-aware gangs: the intent read from every dialect, and the gate's domain placement (tables and
a property), without a cluster. The real scheduler's side is tests/real/test_real_topology.py."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook import gangs
from webhook.controller.decide import placement
from webhook.controller.decide.eligibility import Domains
from webhook.controller.decide.placement import Member
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.shapes import Node, Shape
from webhook.controller.decide.situation import GangSpec, GangState
from webhook.controller.decide.state import decide
from webhook.gangs import topology
from webhook.gangs.model import Topology

RACK = "example.com/rack"
BLOCK = "example.com/block"


def job(
    annotations: dict[str, str] | None = None, template_annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    if template_annotations:
        template["metadata"] = {"annotations": template_annotations}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a", "annotations": annotations or {}},
        "spec": {"parallelism": 4, "template": template},
    }


@pytest.mark.parametrize(
    ("annotations", "template_annotations", "expected"),
    [
        ({"gangkeeper.io/topology-required": RACK}, None, (RACK, True)),
        ({"gangkeeper.io/topology-preferred": RACK}, None, (RACK, False)),
        (None, {"kueue.x-k8s.io/podset-required-topology": BLOCK}, (BLOCK, True)),
        (None, {"kueue.x-k8s.io/podset-preferred-topology": BLOCK}, (BLOCK, False)),
        ({"kueue.x-k8s.io/podset-required-topology": BLOCK}, None, (BLOCK, True)),
        ({"kai.scheduler/topology-required-placement": RACK}, None, (RACK, True)),
        ({"kai.scheduler/topology-preferred-placement": RACK}, None, (RACK, False)),
        # the same intent in two dialects is one intent
        ({"gangkeeper.io/topology-required": RACK}, {"kueue.x-k8s.io/podset-required-topology": RACK}, (RACK, True)),
        (None, None, None),
    ],
)
def test_the_intent_is_read_from_every_dialect(
    annotations: dict[str, str] | None, template_annotations: dict[str, str] | None, expected: tuple[str, bool] | None
) -> None:
    plan = gangs.analyze(job(annotations, template_annotations))
    assert plan.errors == []
    intent = plan.gangs[0].topology
    assert (None if intent is None else (intent.key, intent.required)) == expected


@pytest.mark.parametrize(
    ("annotations", "template_annotations", "field", "says"),
    [
        (
            {"gangkeeper.io/topology-required": "Rack Label"},
            None,
            "metadata.annotations[gangkeeper.io/topology-required]",
            "must be a node label key",
        ),
        (
            {"gangkeeper.io/topology-required": "Example.COM/rack"},
            None,
            "metadata.annotations[gangkeeper.io/topology-required]",
            "prefix must be a DNS subdomain",
        ),
        (
            {"gangkeeper.io/topology-required": RACK, "gangkeeper.io/topology-preferred": RACK},
            None,
            "metadata.annotations[gangkeeper.io/topology-preferred]",
            "either required or preferred",
        ),
        (
            {"gangkeeper.io/topology-required": RACK},
            {"kueue.x-k8s.io/podset-required-topology": BLOCK},
            "spec.template.metadata.annotations[kueue.x-k8s.io/podset-required-topology]",
            "one required topology key",
        ),
    ],
)
def test_an_invalid_or_ambiguous_intent_is_refused_naming_the_field(
    annotations: dict[str, str], template_annotations: dict[str, str] | None, field: str, says: str
) -> None:
    plan = gangs.analyze(job(annotations, template_annotations))
    assert [e.path for e in plan.errors] == [field]
    assert says in plan.errors[0].detail


def test_a_key_that_is_not_a_configured_level_is_warned_about() -> None:
    intent = Topology(RACK, True, "metadata.annotations[gangkeeper.io/topology-required]")
    warning = topology.level_warning(intent, topology.DEFAULT_LEVELS)
    assert warning is not None and "topologyLevels" in warning and RACK in warning
    assert topology.level_warning(intent, (BLOCK, RACK, topology.HOSTNAME)) is None


# --- placement ------------------------------------------------------------------------------------

CPU = Shape(requests=(("cpu", 1000), ("pods", 1)))


def racks(
    free_per_rack: dict[str, list[int]], block_of: dict[str, str] | None = None
) -> tuple[list[Node], dict[str, dict[str, int]]]:
    """Nodes of 8 CPUs, by rack, with the given free CPUs each."""
    nodes, free = [], {}
    for rack, frees in free_per_rack.items():
        for i, cpus in enumerate(frees):
            name = f"{rack}-n{i}"
            labels = {RACK: rack, "kubernetes.io/hostname": name}
            if block_of:
                labels[BLOCK] = block_of[rack]
            nodes.append(Node(name, {"cpu": 8000, "pods": 110}, labels))
            free[name] = {"cpu": cpus * 1000, "pods": 110}
    return nodes, free


def members(count: int) -> list[Member]:
    return [Member(f"p{i}", CPU) for i in range(count)]


def rack_of(node: str) -> str:
    return node.rpartition("-n")[0]


@pytest.mark.parametrize(
    ("free_per_rack", "pods", "required", "domain", "complete"),
    [
        # the tightest rack that holds the whole gang: r2 (8 free) rather than r1 (16 free)
        ({"r1": [8, 8], "r2": [4, 4], "r3": [2, 2]}, 8, True, "r2", True),
        # fits in aggregate (12 free) but in no rack: a required gang waits
        ({"r1": [4, 2], "r2": [4, 2]}, 8, True, None, False),
        # preferred, the same cluster: the fewest racks, both
        ({"r1": [4, 2], "r2": [4, 2]}, 8, False, "r1, r2", True),
        # preferred that fits one rack is in one rack
        ({"r1": [8, 8], "r2": [4, 4]}, 8, False, "r2", True),
        # preferred over three racks takes the two roomiest, not all three
        ({"r1": [4, 2], "r2": [4, 2], "r3": [1, 1]}, 10, False, "r1, r2", True),
    ],
)
def test_domain_choice(
    free_per_rack: dict[str, list[int]], pods: int, required: bool, domain: str | None, complete: bool
) -> None:
    nodes, free = racks(free_per_rack)
    result = placement.place(members(pods), nodes, free, domains=Domains(RACK, required))
    assert result.complete is complete
    assert result.domain == domain
    if complete:
        assert ", ".join(sorted({rack_of(n) for n in result.assignments.values()})) == domain
    else:
        assert result.domain_note == f"no {RACK} domain has room for all {pods} pods; the best, r1, has room for 6"


def test_a_replacement_returns_to_the_domain_its_gang_runs_in() -> None:
    nodes, free = racks({"r1": [1, 0], "r2": [8, 8]})
    near = frozenset({"r1-n1"})  # the running members' node
    result = placement.place(members(1), nodes, free, domains=Domains(RACK, True, near))
    assert result.complete and result.domain == "r1" and result.assignments == {"p0": "r1-n0"}
    # no room left in its rack: it waits there, never joins another
    free["r1-n0"]["cpu"] = 0
    result = placement.place(members(1), nodes, free, domains=Domains(RACK, True, near))
    assert not result.complete and result.assignments == {}


def test_nodes_without_the_label_never_take_a_required_gang() -> None:
    nodes = [Node(f"n{i}", {"cpu": 8000, "pods": 110}, {}) for i in range(4)]
    free = {n.name: dict(n.allocatable) for n in nodes}
    result = placement.place(members(2), nodes, free, domains=Domains(RACK, True))
    assert not result.complete and result.domain_note == f"no node has the label {RACK}"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 8), min_size=1, max_size=4), min_size=1, max_size=5),
    st.integers(1, 20),
)
def test_every_required_placement_is_inside_one_domain(frees: list[list[int]], pods: int) -> None:
    nodes, free = racks({f"r{i}": rack for i, rack in enumerate(frees)})
    result = placement.place(members(pods), nodes, free, domains=Domains(RACK, True))
    fits_one_rack = any(sum(rack) >= pods for rack in frees)
    assert result.complete is fits_one_rack
    if result.complete:
        assert len({rack_of(n) for n in result.assignments.values()}) == 1


# --- the decision ---------------------------------------------------------------------------------

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)


def gated(name: str) -> PodView:
    return PodView(
        namespace="team-a",
        name=name,
        uid=name,
        group="train",
        gated=True,
        node_name=None,
        pinned_node=None,
        released_at=None,
        created_at=NOW,
        terminal=False,
        finished=False,
        shape=CPU,
        owner=None,
        resource_version="1",
    )


def test_a_required_gang_that_fits_in_aggregate_but_no_rack_waits_saying_which_rack_is_closest() -> None:
    nodes, free = racks({"r1": [4, 2], "r2": [4, 1]})
    spec = GangSpec(8, topology=Topology(RACK, True, "f"))
    decision = decide([gated(f"p{i}") for i in range(8)], spec, nodes, free, NOW)
    assert decision.state == GangState.WAITING_FOR_CAPACITY
    assert (
        decision.message == f"required topology: no {RACK} domain has room for all 8 pods; the best, r1, has room for 6"
    )
    free["r2-n1"]["cpu"] = 4000
    decision = decide([gated(f"p{i}") for i in range(8)], spec, nodes, free, NOW)
    assert decision.state == GangState.RELEASE and decision.message.endswith(f"in {RACK} r2")
    assert {rack_of(n) for n in decision.release.values()} == {"r2"}


def test_a_required_gang_larger_than_every_rack_never_fits() -> None:
    nodes, free = racks({"r1": [8], "r2": [8]})
    spec = GangSpec(12, topology=Topology(RACK, True, "f"))
    decision = decide([gated(f"p{i}") for i in range(12)], spec, nodes, free, NOW)
    assert decision.state == GangState.NEVER_FITS
    assert f"inside one {RACK} domain" in decision.message


# --- each mechanism's dialect, at apply -----------------------------------------------------------


def rack_job(word: str = "required", key: str = RACK) -> dict[str, Any]:
    from tests import builders as b

    job = b.job(spec=b.pod_spec(b.container("1", "1Gi")))
    job["metadata"]["annotations"] = {f"gangkeeper.io/topology-{word}": key}
    return job


LEVELS = ("topology.kubernetes.io/zone", BLOCK, RACK, "kubernetes.io/hostname")


@pytest.mark.parametrize("version", ["1.36", "1.37"])
def test_native_group_objects_carry_a_required_topology_in_that_versions_shape(version: str) -> None:
    from tests.schemas import validate
    from webhook.admission.decide import admit
    from webhook.backends import make

    outcome = admit(rack_job(), "CREATE", make("native", kubernetes_version=version), "team-a", topology_levels=LEVELS)
    assert outcome.allowed and outcome.warnings == []
    for obj in outcome.group_objects:
        validate(obj, version)
    workload = next(o for o in outcome.group_objects if o["kind"] == "Workload")
    group = next(o for o in outcome.group_objects if o["kind"] == "PodGroup")
    for fields in (workload["spec"]["podGroupTemplates"][0], group["spec"]):
        assert fields["schedulingConstraints"] == {"topology": [{"key": RACK}]}


@pytest.mark.parametrize(
    ("backend", "word", "allowed", "says"),
    [
        (("native", "1.35"), "required", True, "1.35's scheduling.k8s.io/v1alpha1 Workload has no topology"),
        (("native", "1.36"), "preferred", True, "required only"),
        (("coscheduling", ""), "required", False, "coscheduling has no topology constraint"),
        (("coscheduling", ""), "preferred", True, "coscheduling has no topology constraint"),
        (("volcano", ""), "required", False, "serves no HyperNodes"),
        (("volcano", ""), "preferred", True, "serves no HyperNodes"),
    ],
)
def test_a_topology_a_backend_cannot_honour_is_refused_when_required_and_warned_about_when_preferred(
    backend: tuple[str, str], word: str, allowed: bool, says: str
) -> None:
    from webhook.admission.decide import admit
    from webhook.backends import make

    name, version = backend
    chosen = make(name, kubernetes_version=version) if version else make(name)
    outcome = admit(rack_job(word), "CREATE", chosen, "team-a", topology_levels=LEVELS)
    assert outcome.allowed is allowed
    said = outcome.message if not allowed else " ".join(outcome.warnings)
    assert says in said and f"gangkeeper.io/topology-{word}" in said
    if not allowed:
        assert outcome.code == 422 and "gate (any cluster)" in said
        for obj in outcome.group_objects:
            assert "schedulingConstraints" not in str(obj)


@pytest.mark.parametrize(
    ("word", "key", "mode", "tier"), [("required", RACK, "hard", 1), ("preferred", BLOCK, "soft", 2)]
)
def test_volcano_with_hypernodes_gets_network_topology_by_tier(word: str, key: str, mode: str, tier: int) -> None:
    from tests.schemas import validate
    from webhook.admission.decide import admit
    from webhook.backends import make

    volcano = make("volcano", network_topology=True, topology_levels=LEVELS)
    outcome = admit(rack_job(word, key), "CREATE", volcano, "team-a", topology_levels=LEVELS)
    assert outcome.allowed and outcome.warnings == []
    (group,) = outcome.group_objects
    validate(group)
    assert group["spec"]["networkTopology"] == {"mode": mode, "highestTierAllowed": tier}


def test_the_gate_honours_any_key_and_warns_about_one_that_is_not_a_level() -> None:
    from webhook.admission.decide import admit
    from webhook.backends import make

    outcome = admit(rack_job(key="example.com/row"), "CREATE", make("gate"), "team-a", topology_levels=LEVELS)
    assert outcome.allowed
    assert any("not one of this cluster's topology levels" in w for w in outcome.warnings)
    outcome = admit(rack_job(), "CREATE", make("gate"), "team-a", topology_levels=LEVELS)
    assert outcome.allowed and outcome.warnings == []


# --- two levels: a workload's gangs share a block, each gang a rack ------------------------------------


def blocks(per_block: dict[str, dict[str, list[int]]]) -> tuple[list[Node], dict[str, dict[str, int]]]:
    nodes: list[Node] = []
    free: dict[str, dict[str, int]] = {}
    for block, rack_frees in per_block.items():
        more_nodes, more_free = racks(rack_frees, {rack: block for rack in rack_frees})
        nodes += more_nodes
        free |= more_free
    return nodes, free


def test_a_gang_joins_the_block_its_workloads_gangs_hold_in_a_rack_of_its_own() -> None:
    nodes, free = blocks({"b1": {"r1": [0, 0], "r2": [4, 4]}, "b2": {"r3": [8, 8], "r4": [2, 2]}})
    # a sibling gang runs on r1 (block b1): this gang goes to b1's r2, though b2 is roomier
    domains = Domains(RACK, True, frozenset(), Domains(BLOCK, True, frozenset({"r1-n0"})))
    result = placement.place(members(8), nodes, free, domains=domains)
    assert result.complete and result.domain == "b1/r2"
    assert {rack_of(n) for n in result.assignments.values()} == {"r2"}
    # no rack of b1 holds it: it waits, saying where it looked, never crossing to b2
    free["r2-n0"]["cpu"] = 2000
    result = placement.place(members(8), nodes, free, domains=domains)
    assert (
        not result.complete and result.domain_note is not None and result.domain_note.startswith(f"within {BLOCK} b1")
    )


def test_the_first_gang_of_a_workload_takes_the_tightest_block_that_holds_it() -> None:
    nodes, free = blocks({"b1": {"r1": [8, 8], "r2": [8, 8]}, "b2": {"r3": [4, 4], "r4": [1, 1]}})
    domains = Domains(RACK, True, frozenset(), Domains(BLOCK, True))
    result = placement.place(members(8), nodes, free, domains=domains)
    assert result.complete and result.domain == "b2/r3"


def test_the_workload_level_is_read_and_checked_at_apply() -> None:
    from tests import builders as b
    from webhook.admission.decide import admit
    from webhook.backends import make

    job = rack_job()
    job["metadata"]["annotations"]["gangkeeper.io/workload-topology-required"] = BLOCK
    plan = gangs.analyze(job)
    assert plan.gangs[0].workload_topology is not None and plan.gangs[0].workload_topology.key == BLOCK
    outcome = admit(job, "CREATE", make("gate"), "team-a", topology_levels=LEVELS)
    assert outcome.allowed and any("this workload is one gang" in w for w in outcome.warnings)
    for version in ("1.36", "1.37"):  # 1.36 has no CompositePodGroup; this 1.37 serves none
        outcome = admit(job, "CREATE", make("native", kubernetes_version=version), "team-a", topology_levels=LEVELS)
        assert not outcome.allowed and "CompositePodGroup" in outcome.message
        assert "--runtime-config=scheduling.k8s.io/v1alpha3=true" in outcome.message
    # a LeaderWorkerSet of three groups: each group a gang in one rack, all three in one block
    lws = b.lws(size=4, replicas=3, scheduler=None)
    lws["metadata"]["annotations"] = {
        "gangkeeper.io/topology-required": RACK,
        "gangkeeper.io/workload-topology-required": BLOCK,
    }
    plan = gangs.analyze(lws)
    assert len(plan.gangs) == 3
    assert all(g.topology and g.topology.key == RACK and g.workload_topology for g in plan.gangs)
    outcome = admit(lws, "CREATE", make("gate"), "gang-demo", topology_levels=LEVELS)
    assert outcome.allowed and outcome.warnings == []
    swapped = {
        **lws,
        "metadata": {
            **lws["metadata"],
            "annotations": {"gangkeeper.io/topology-required": BLOCK, "gangkeeper.io/workload-topology-required": RACK},
        },
    }
    outcome = admit(swapped, "CREATE", make("gate"), "gang-demo", topology_levels=LEVELS)
    assert any("is not a broader level" in w for w in outcome.warnings)


def composite_lws(word: str = "required") -> dict[str, Any]:
    from tests import builders as b

    lws = b.lws(size=4, replicas=3, scheduler=None)
    lws["metadata"]["annotations"] = {
        "gangkeeper.io/topology-required": RACK,
        f"gangkeeper.io/workload-topology-{word}": BLOCK,
    }
    return lws


def test_native_1_37_keeps_a_workloads_gangs_in_one_domain_with_a_composite_pod_group() -> None:
    """Where 1.37 serves CompositePodGroups: the Workload's gang template moves under one composite
    template carrying the block, one CompositePodGroup (v1alpha3) carries it too, and each group's
    PodGroup keeps its rack and names the CompositePodGroup as its parent; all valid for 1.37's API."""
    from tests.schemas import validate
    from webhook.admission.decide import admit
    from webhook.backends import make

    native = make("native", kubernetes_version="1.37", composite_groups=True)
    assert ("scheduling.k8s.io/v1alpha3", "CompositePodGroup") in native.group_kinds()
    outcome = admit(composite_lws(), "CREATE", native, "gang-demo", topology_levels=LEVELS)
    assert outcome.allowed and outcome.warnings == [], outcome.warnings
    for obj in outcome.group_objects:
        validate(obj, "1.37")
    kinds = [o["kind"] for o in outcome.group_objects]
    assert kinds == ["Workload", "CompositePodGroup", "PodGroup", "PodGroup", "PodGroup"]
    workload, composite, *groups = outcome.group_objects
    (template,) = workload["spec"]["compositePodGroupTemplates"]
    assert "podGroupTemplates" not in workload["spec"]
    assert template["schedulingConstraints"] == {"topology": [{"key": BLOCK}]}
    assert template["schedulingPolicy"] == {"basic": {}}
    (inner,) = template["podGroupTemplates"]
    assert inner["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    assert composite["apiVersion"] == "scheduling.k8s.io/v1alpha3"
    assert composite["spec"]["workloadRef"] == {
        "workloadName": workload["metadata"]["name"],
        "templateName": template["name"],
    }
    assert composite["spec"]["schedulingConstraints"] == {"topology": [{"key": BLOCK}]}
    for group in groups:
        assert group["spec"]["parentCompositePodGroupName"] == composite["metadata"]["name"]
        assert group["spec"]["workloadRef"]["templateName"] == inner["name"]
        assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    # preferred: the composite constraint is required only; warned, and nothing composite written
    outcome = admit(composite_lws("preferred"), "CREATE", native, "gang-demo", topology_levels=LEVELS)
    assert outcome.allowed and any("CompositePodGroupSchedulingConstraints" in w for w in outcome.warnings)
    assert [o["kind"] for o in outcome.group_objects] == ["Workload", "PodGroup", "PodGroup", "PodGroup"]


def test_discovery_finds_composite_pod_groups_only_where_served() -> None:
    from webhook.backends import Native
    from webhook.backends.discovery import Served, choose

    beta = {"scheduling.k8s.io/v1beta1": frozenset({"workloads", "podgroups"})}
    assert choose("native", Served(beta)) == Native("1.37", composite_groups=False)
    served = Served({**beta, "scheduling.k8s.io/v1alpha3": frozenset({"workloads", "compositepodgroups"})})
    assert choose("auto", served) == Native("1.37", composite_groups=True)


def test_a_leaderworkersets_groups_share_a_block_each_in_a_rack_through_the_controller(store: Any, api: Any) -> None:
    """Through the controller and the LeaderWorkerSet controller's simulation (tests/lifecycle.py): two
    groups of four 2-CPU pods. Block b1 (racks of 8 and 4 CPUs) is the tightest that holds a group: the
    first lands in its rack r1. The second fits only in block b2, so it waits, whole, for room in b1,
    never crossing to b2; once r2 grows it joins the first group's block."""
    from tests import builders as b
    from tests.cluster import Clock, default_scheduler, gang_status, node
    from tests.lifecycle import LeaderWorkerSetController, install_admission, kubelet
    from webhook.controller.run.explain import explain
    from webhook.controller.run.reconciler import Controller

    install_admission(store, "gate")
    layout = {("b1", "r1"): "8", ("b1", "r2"): "4", ("b2", "r3"): "8", ("b2", "r4"): "8"}
    for (block, rack), cpu in layout.items():
        store.create("v1", "nodes", "", node(f"{rack}-n0", cpu=cpu, labels={RACK: rack, BLOCK: block}))
    lws = b.lws("serve", size=4, replicas=2, cpu="2", scheduler=None)
    lws["metadata"].update(
        namespace="team-a",
        annotations={"gangkeeper.io/topology-required": RACK, "gangkeeper.io/workload-topology-required": BLOCK},
    )
    store.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "team-a", lws)
    groups, clock = LeaderWorkerSetController(store), Clock()
    gangs = Controller(api, clock=clock)

    def run() -> dict[str, set[str]]:
        for _ in range(3):
            groups.sync("team-a", "serve")
            gangs.reconcile_once()
            default_scheduler(store)
            kubelet(store, "team-a")
            clock.advance(1)
        by_group: dict[str, set[str]] = {}
        for pod in store.list("v1", "pods", "team-a")[0]:
            where = rack_of(pod["spec"]["nodeName"]) if pod["spec"].get("nodeName") else "gated"
            by_group.setdefault(pod["metadata"]["labels"]["gangkeeper.io/group"], set()).add(where)
        return by_group

    assert run() == {"lws-serve-0": {"r1"}, "lws-serve-1": {"gated"}}
    assert f"within {BLOCK} b1" in gang_status(store, "lws-serve-1")["message"]
    said = explain(api, "team-a", "lws-serve-1", clock=clock)
    assert f"topology: its pods in one {RACK} domain, required (metadata.annotations" in said, said
    assert f"topology: its workload's gangs in one {BLOCK} domain, required" in said, said
    grown = store.get("v1", "nodes", "", "r2-n0")
    grown["status"]["allocatable"]["cpu"] = "8"
    store.update("v1", "nodes", "", "r2-n0", grown, None, admit=False)
    assert run() == {"lws-serve-0": {"r1"}, "lws-serve-1": {"r2"}}


def test_the_controller_writes_the_composite_pod_group_before_the_pod_groups_that_name_it(store: Any, api: Any) -> None:
    """Through the controller on a fake 1.37 API serving CompositePodGroups: a native Job whose gangs
    share a zone gets its CompositePodGroup (owned by the Job, like its Workload and PodGroup), and the
    PodGroup names it as its parent."""
    from tests.cluster import add_job, add_job_pods
    from webhook.controller.run.reconciler import Controller

    store.served["scheduling.k8s.io/v1beta1"] = {"podgroups", "workloads"}
    store.served["scheduling.k8s.io/v1alpha3"] = {"compositepodgroups"}
    shared = {"gangkeeper.io/workload-topology-required": "topology.kubernetes.io/zone"}
    job = add_job(store, "zoned", parallelism=2, cpu="1", annotations=shared)
    add_job_pods(store, job, backend="native")
    Controller(api, native_composite=True).reconcile_once()
    composite = store.get("scheduling.k8s.io/v1alpha3", "compositepodgroups", "team-a", "job-zoned")
    group = store.get("scheduling.k8s.io/v1beta1", "podgroups", "team-a", "job-zoned")
    assert composite["spec"]["schedulingConstraints"] == {"topology": [{"key": "topology.kubernetes.io/zone"}]}
    assert composite["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert group["spec"]["parentCompositePodGroupName"] == "job-zoned"


def test_a_jobsets_stages_share_one_native_workload_written_whole_by_the_first(store: Any, api: Any) -> None:
    """A JobSet started InOrder is a gang per stage; only the first stage's pods exist at first. Its
    v1beta1 Workload (one composite template over both stages' templates) is written whole by the first
    gang's sync: the API server would refuse a template added later (`+k8s:update=NoAddItem`)."""
    from tests import lifecycle
    from tests.cluster import Clock, node
    from tests.fake.test_lifecycle import NS, example
    from webhook.backends import make
    from webhook.controller.run.reconciler import Controller

    store.served["scheduling.k8s.io/v1beta1"] = {"podgroups", "workloads"}
    store.served["scheduling.k8s.io/v1alpha3"] = {"compositepodgroups"}
    native = make("native", composite_groups=True)
    lifecycle.install_admission(store, "native", configured=native)
    store.create("v1", "nodes", "", node("worker1", cpu="16"))
    jobset = example("jobset/paralleljobs.yaml")  # workers (4), then driver (1)
    jobset["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    jobset["metadata"].setdefault("annotations", {})["gangkeeper.io/workload-topology-required"] = BLOCK
    store.create("jobset.x-k8s.io/v1alpha2", "jobsets", NS, jobset)
    jobsets, jobs = lifecycle.JobSetController(store), lifecycle.JobController(store)
    for name in jobsets.sync(NS, "paralleljobs"):
        jobs.sync(NS, name)
    Controller(api, clock=Clock(), native_composite=True).reconcile_once()
    groups = store.list("scheduling.k8s.io/v1beta1", "podgroups", NS)[0]
    assert [g["metadata"]["name"] for g in groups] == ["jobset-paralleljobs-workers"]  # the driver's not yet
    workload = store.get("scheduling.k8s.io/v1beta1", "workloads", NS, "jobset-paralleljobs")
    (composite,) = workload["spec"]["compositePodGroupTemplates"]
    assert [t["name"] for t in composite["podGroupTemplates"]] == ["workers", "driver"]


@pytest.mark.parametrize("mixed", [False, True])
def test_domains_that_cannot_hold_the_gang_are_never_tried(monkeypatch: pytest.MonkeyPatch, mixed: bool) -> None:
    """A required hostname topology on 50 nodes with 4 CPUs free each, for a gang of 12 CPUs: no node
    can hold it, and only the closest miss is placed (for the status), not all 50 (115 ms a gang at
    5,000 nodes before: bench/controller.py --only topology). Gangs of mixed shapes are judged by their
    summed requests."""
    nodes = [Node(f"n{i:02d}", {"cpu": 8000, "pods": 110}, {"kubernetes.io/hostname": f"n{i:02d}"}) for i in range(50)]
    free = {n.name: {"cpu": 4000, "pods": 110} for n in nodes}
    shapes = [Shape((("cpu", 3000), ("pods", 1))), Shape((("cpu", 2000), ("pods", 1)))]
    members = [Member(f"p{i}", shapes[i % 2] if mixed else shapes[0]) for i in range(5 if mixed else 4)]
    tried = []
    real = placement._place
    monkeypatch.setattr(placement, "_place", lambda *a, **k: tried.append(1) or real(*a, **k))
    result = placement.place(members, nodes, free, domains=Domains("kubernetes.io/hostname", True))
    assert not result.complete and len(tried) == 1
    assert "the best, n00, has room for 1" in (result.domain_note or ""), result.domain_note
