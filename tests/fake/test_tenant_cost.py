"""What a tenant's objects may cost the controller (issue 76): CEL bounded out of process, selectors
counted only for what waits, caches bounded and evicted per entry."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from tests.fake.test_devices import (
    DRIVER,
    device_class,
    dra_controller,
    exactly,
    gpus,
    job_claiming,
    node,
    node_slice,
    template,
)
from webhook.controller.decide import device_cel, device_inventory, device_memo, devices
from webhook.controller.observe.cel_sandbox import CelSandbox

# cel-python's duration() parses with a backtracking regular expression: about 2^N steps for N letters
# and a character it cannot end on (2^30 is minutes in one call that holds the GIL)
SLOW = 'duration("' + "a" * 30 + '" + "!") > duration("1s")'
FAST = f'device.driver == "{DRIVER}"'
FACTS = (DRIVER, {"model": {"string": "h100"}}, {}, False)


def in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    obj["metadata"]["namespace"] = namespace
    return obj


def test_a_selector_over_its_cpu_budget_is_stopped_never_holds_the_gil_and_is_not_evaluated_again() -> None:
    sandbox = CelSandbox(cpu_budget=0.3)
    ticks = 0
    stop = threading.Event()

    def other_thread() -> None:  # the informers, the health endpoints and the Lease, while CEL runs
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    try:
        assert sandbox([(FAST, FACTS)]) == [True]  # the worker started (its imports) before the clock runs
        thread = threading.Thread(target=other_thread)
        thread.start()
        started = time.monotonic()
        outcomes = sandbox([(FAST, FACTS), (SLOW, FACTS), (FAST, (DRIVER, {}, {})), (SLOW, (DRIVER, {}, {}))])
        took = time.monotonic() - started
        stop.set()
        thread.join()
        assert outcomes[0] is True and outcomes[2] is True
        for over in (outcomes[1], outcomes[3]):
            assert isinstance(over, device_cel.SelectorError) and "ran over its budget" in str(over)
        # the budget, a worker's start and slack for a loaded machine: not the minutes the call takes
        assert took < 10, took
        assert ticks > 50, "another thread of the controller's process was held while the selector ran"
        assert sandbox.stopped == 1  # the second device with the same expression was not evaluated
        again = time.monotonic()
        assert isinstance(sandbox([(SLOW, FACTS)])[0], device_cel.SelectorError)
        assert time.monotonic() - again < 0.05
    finally:
        sandbox.close()


def test_what_a_stopped_worker_answered_before_is_kept_and_not_asked_again() -> None:
    """The worker hands its outcomes over in pieces (cel_worker.PIECE_SECONDS), and writes each true or
    false as a byte the controller reads when it stops it: a batch whose pair runs over budget after 20
    others (answered in a few ms, before any piece), and after 20 errors (each handed over at once), loses
    none of theirs, and only the pairs after it are sent again."""
    bound = f'cel.bind(m, device.attributes["{DRIVER}"].model, m.matches("^(a+)+$"))'  # cel-python: a bool
    overflow = 'duration("' + "a" * 15 + '" + "!") > duration("1s")'  # cel-python: an error, in ~10 ms
    sandbox = CelSandbox(cpu_budget=0.3)
    sent: list[int] = []
    run = sandbox._run

    def counted(batch: list[Any], places: list[int], outcomes: list[Any]) -> list[int]:
        sent.append(len(batch))
        return run(batch, places, outcomes)

    sandbox._run = counted  # type: ignore[method-assign]
    try:
        assert sandbox([(FAST, FACTS)]) == [True]
        sent.clear()
        devices = [(DRIVER, {"model": {"string": f"m{i}"}}, {}, False) for i in range(20)]
        for medium, answered in ((bound, lambda o: o is False), (overflow, _not_over_budget)):
            sent.clear()
            slow = SLOW.replace("1s", f"{len(medium)}s")  # one the sandbox has not stopped on yet
            outcomes = sandbox([(medium, d) for d in devices] + [(slow, FACTS)] + [(FAST, FACTS)] * 3)
            assert all(answered(o) for o in outcomes[:20]), outcomes[:20]
            assert "ran over its budget" in str(outcomes[20]) and outcomes[21:] == [True] * 3
            assert sent == [24, 3], sent  # the 20 answered before the stop were not sent again
    finally:
        sandbox.close()


def _not_over_budget(outcome: Any) -> bool:
    return isinstance(outcome, device_cel.SelectorError) and "budget" not in str(outcome)


def test_the_sandbox_answers_as_the_in_process_evaluator_does() -> None:
    pairs: list[tuple[str, device_cel.DeviceFacts]] = [
        (FAST, FACTS),
        ('device.attributes["gpu.example.com"].model == "a100"', FACTS),
        ('device.attributes["gpu.example.com"].nothing == 1', FACTS),
        ("cel.bind(x, 1, x == 1)", FACTS),
        ('device.attributes["gpu.example.com"].model == "h100"', (DRIVER, {"model": {"weird": 1}}, {}, False)),
        ("device.allowMultipleAllocations", (DRIVER, {}, {}, True)),
        ("x" * (device_cel.MAX_EXPRESSION_LENGTH + 1), FACTS),
    ]
    sandbox = CelSandbox()
    try:
        remote, local = sandbox(pairs), device_cel.evaluate_all(pairs)
    finally:
        sandbox.close()

    def picture(outcomes: Sequence[device_cel.Outcome]) -> list[Any]:
        return [(type(o).__name__, getattr(o, "unreadable", None)) if isinstance(o, Exception) else o for o in outcomes]

    assert picture(remote) == picture(local)
    assert picture(local)[:2] == [True, False]


class Recording:
    """An in-process evaluator that remembers what it was asked."""

    def __init__(self) -> None:
        self.expressions: list[str] = []

    def __call__(self, pairs: Sequence[tuple[str, device_cel.DeviceFacts]]) -> list[device_cel.Outcome]:
        self.expressions += [expression for expression, _ in pairs]
        return device_cel.evaluate_all(pairs)


def test_only_the_templates_of_pods_that_wait_are_evaluated_per_node() -> None:
    """A template no waiting pod names costs nothing, in any namespace; one a gated pod names is counted."""
    narrow = 'device.attributes["gpu.example.com"].model == "h100"'
    slices = [node_slice(f"n{i}", gpus(4, "h100")) for i in range(3)]
    templates = [
        template("mine", exactly("gpu", 1, "gpu", narrow)),
        in_namespace(template("unused", exactly("gpu", 1, "gpu", 'device.attributes["gpu.example.com"].x == 1')), "x"),
    ]
    asked = Recording()
    inventory = devices.inventory_from([device_class()], slices, [], templates, devices.Memo(asked))
    inventory.waiting = frozenset({("template", "team-a", "mine")})
    totals = inventory.class_totals(node("n0"))
    assert totals[devices.class_resource("gpu", (narrow,))] == 4
    assert set(asked.expressions) == {FAST, narrow}
    # nothing waits: only the DeviceClass's own selector is counted per node
    idle = devices.inventory_from([device_class()], slices, [], templates, devices.Memo(asked))
    idle.waiting = frozenset()
    assert idle.narrowed == {}
    assert set(idle.class_totals(node("n1"))) == {devices.class_resource("gpu")}


def test_one_namespaces_selector_sets_counted_per_node_are_bounded() -> None:
    many = [
        template(f"t{i}", exactly("gpu", 1, "gpu", f'device.attributes["gpu.example.com"].index == {i}'))
        for i in range(devices.MAX_SELECTOR_SETS_PER_NAMESPACE + 5)
    ]
    other = in_namespace(
        template("theirs", exactly("gpu", 1, "gpu", 'device.attributes["gpu.example.com"].index >= 0')), "team-b"
    )
    inventory = devices.inventory_from([device_class()], [node_slice("n0", gpus(2))], [], [*many, other])
    inventory.waiting = frozenset(
        {("template", "team-a", f"t{i}") for i in range(len(many))} | {("template", "team-b", "theirs")}
    )
    counted = inventory.narrowed["gpu"]
    assert len(counted) == devices.MAX_SELECTOR_SETS_PER_NAMESPACE + 1  # team-a's share, and team-b's own
    assert ('device.attributes["gpu.example.com"].index >= 0',) in counted
    assert len(inventory.deferred) == 5 and all("team-a" in why for why in inventory.deferred.values())


def test_caches_keyed_by_tenant_input_evict_one_entry_at_a_time() -> None:
    bounded: devices.BoundedMap[str, int] = devices.BoundedMap(3)
    for i in range(3):
        bounded[f"k{i}"] = i
    assert bounded.get("k0") == 0  # read: the most recent now
    bounded["k3"] = 3
    assert "k1" not in bounded and all(k in bounded for k in ("k0", "k2", "k3"))
    assert bounded.evicted == 1 and len(bounded) == 3
    memo = devices.Memo()
    assert memo.matched.bound == devices.MAX_REMEMBERED_MATCHES


def test_demands_are_bounded_per_inventory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_inventory, "MAX_REMEMBERED_DEMANDS", 4)
    inventory = devices.inventory_from([device_class()], [], [], [template("t", exactly())])
    for i in range(10):
        spec = {
            "containers": [{"name": "c", "image": f"x{i}"}],
            "resourceClaims": [{"name": f"g{i}", "resourceClaimTemplateName": "t"}],
        }
        inventory.demand("team-a", spec)
    assert len(inventory._demands) == 4


def test_a_hostile_template_elsewhere_costs_another_teams_dra_gang_nothing(apiserver: Any, api: Any) -> None:
    """Team x's template with the slow selector, named by no pod, then by a gang of its own: team-a's gang
    is released in its first pass either way; team x's gang waits naming the selector and why."""
    from tests.cluster import node as api_node
    from tests.cluster import pods

    store = apiserver.store
    for name in ("w0", "w1"):
        store.create("v1", "nodes", "", api_node(name, cpu="64"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w0", gpus(4)))
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w1", gpus(4)))
    store.create(
        "resource.k8s.io/v1",
        "resourceclaimtemplates",
        "team-x",
        in_namespace(template("slow", exactly("gpu", 1, "gpu", SLOW)), "team-x"),
    )
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("gpu", exactly()))
    job_claiming(store, "train", 2, "gpu")
    controller, _relist = dra_controller(apiserver, api)
    sandbox = controller.device_watch.memo.evaluator
    assert isinstance(sandbox, CelSandbox)
    try:
        started = time.monotonic()
        decision = controller.reconcile_once()["team-a/job-train"]
        assert decision.state == "Release", decision.message
        assert time.monotonic() - started < 10
        assert sandbox.stopped == 0 and not sandbox.over_budget  # never evaluated: no pod of its named it

        from tests.cluster import add_job, add_job_pods

        job = add_job(store, "hostile", parallelism=1, cpu="1", namespace="team-x")
        job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "slow"}]
        add_job_pods(store, job)
        job_claiming(store, "second", 2, "gpu")
        started = time.monotonic()
        decisions = controller.reconcile_once()
        assert time.monotonic() - started < 15
        assert decisions["team-a/job-second"].state == "Release", decisions["team-a/job-second"].message
        hostile = decisions["team-x/job-hostile"]
        assert hostile.state != "Release" and "ran over its budget" in hostile.message, hostile.message
        assert sandbox.stopped == 1
        controller.reconcile_once()
        assert sandbox.stopped == 1  # remembered: never evaluated again while unchanged
        assert (
            sum(
                1
                for p in pods(store)
                if p["metadata"]["namespace"] == "team-a" and not p["spec"].get("schedulingGates")
            )
            == 4
        )
    finally:
        sandbox.close()


def test_another_namespaces_pods_claiming_a_workloads_uid_do_not_hand_its_kueue_workload_back(
    api: Any, store: Any
) -> None:
    """Team x's bare pods annotated with team b's Job's uid (and a 1 s timeout) do not make team b's
    admitted Workload be handed back: the join is by namespace and uid, and a pod no workload controls
    stands for no workload."""
    from tests import builders as b
    from tests.cluster import add_job
    from tests.cluster import node as api_node
    from tests.fake.test_kueue_check import CHECK, admitted
    from webhook import contract
    from webhook.admission.decide import admit
    from webhook.backends import make
    from webhook.controller.run.reconciler import Controller
    from webhook.gangs.pod import workload_uid

    store.served["kueue.x-k8s.io/v1beta2"] = {"admissionchecks", "workloads"}
    check = {"metadata": {"name": CHECK}, "spec": {"controllerName": "gangkeeper.io/gang-fits"}}
    store.create("kueue.x-k8s.io/v1beta2", "admissionchecks", "", check)
    store.create("v1", "nodes", "", api_node("n1", cpu="2"))
    job = add_job(store, "j", parallelism=4, cpu="1", namespace="team-b")
    w = admitted("2000-01-01T00:00:00Z", Admitted="True")
    w["metadata"]["namespace"] = "team-b"
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job["metadata"]["uid"], "controller": True}
    w["metadata"]["ownerReferences"] = [owner]
    store.create("kueue.x-k8s.io/v1beta2", "workloads", "team-b", w)
    forged = {
        contract.WORKLOAD_UID_ANNOTATION: job["metadata"]["uid"],
        "gangkeeper.io/timeout-seconds": "1",
        "gangkeeper.io/group-size": "2",
    }
    for i in range(2):
        pod = b.pod(f"x{i}", labels={"gangkeeper.io/group-name": "steal"}, annotations=dict(forged), namespace="team-x")
        pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4"}}  # never fits: stays gated
        outcome = admit(pod, "CREATE", make("gate"), "team-x")
        assert outcome.mutated is not None, outcome.reason
        assert workload_uid(outcome.mutated) == ""  # no controller: the annotation speaks for nothing
        store.create("v1", "pods", "team-x", outcome.mutated)
    controller = Controller(api)
    for _ in range(2):
        controller.reconcile_once()
    state = store.get("kueue.x-k8s.io/v1beta2", "workloads", "team-b", "w")["status"]["admissionChecks"][0]
    assert state["state"] != "Retry", state


def test_the_placeholder_caps_hold_within_a_pass_and_leave_other_teams_their_share(apiserver: Any, api: Any) -> None:
    """Five gangs of one team waiting in one pass: never more placeholders than maxPlaceholderPods, and
    one namespace holds at most its share, so another team's gang still gets its own."""
    from tests.cluster import Clock, add_job, add_job_pods
    from tests.cluster import node as api_node
    from tests.fake.test_placeholders import karpenter
    from tests.recorder import ListRecorder

    def placeholders(store: Any) -> list[dict[str, Any]]:
        every = store.list("v1", "pods", "team-a")[0] + store.list("v1", "pods", "team-b")[0]
        return [p for p in every if "gangkeeper.io/placeholder-for" in p["metadata"].get("labels", {})]

    from webhook.controller.run.reconciler import Controller

    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", api_node("small", cpu="1"))
    for i in range(5):
        add_job_pods(store, add_job(store, f"a{i}", parallelism=3, cpu="2"))
    add_job_pods(store, add_job(store, "b", parallelism=3, cpu="2", namespace="team-b"))
    controller = Controller(
        api,
        recorder=ListRecorder(),
        clock=Clock(),
        max_placeholder_pods=12,
        max_placeholder_pods_per_namespace=6,
    )
    decisions = {}
    for _ in range(3):
        decisions = controller.reconcile_once()
        made = placeholders(store)
        assert len(made) <= 12
        assert sum(1 for p in made if p["metadata"]["namespace"] == "team-a") <= 6
    made = placeholders(store)
    assert sum(1 for p in made if p["metadata"]["namespace"] == "team-a") == 6  # two gangs of three
    assert sum(1 for p in made if p["metadata"]["namespace"] == "team-b") == 3
    said = [d.message for key, d in decisions.items() if key.startswith("team-a/") and "PerNamespace" in d.message]
    assert len(said) == 3 and "namespace team-a holds 6 for its other gangs" in said[0], decisions


def test_pods_naming_absent_workloads_cost_a_bounded_number_of_reads_and_the_cache_evicts_per_entry(
    apiserver: Any, api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant whose every pod names another absent Job costs at most the namespace's budget of GETs,
    not one per pod; another namespace's reads are its own; the uid cache evicts one entry at a time."""
    from tests.cluster import add_job
    from webhook.admission import workloads

    store, now = apiserver.store, [0.0]
    uid = add_job(store, parallelism=2, cpu="1", namespace="team-b")["metadata"]["uid"]
    uids = workloads.WorkloadUids(api, clock=lambda: now[0])

    def reads(namespace: str) -> int:
        return sum(1 for method, path in store.requests if method == "GET" and f"/namespaces/{namespace}/jobs/" in path)

    assert all(uids("Job", "team-x", f"absent-{i}", "any") in (None, workloads.ABSENT) for i in range(500))
    assert reads("team-x") == workloads.READ_BURST_PER_NAMESPACE
    assert uids("Job", "team-b", "train", uid) == uid  # another namespace still reads its own
    now[0] += 1.0
    uids("Job", "team-x", "absent-again", "any")
    assert reads("team-x") <= workloads.READ_BURST_PER_NAMESPACE + workloads.READS_PER_SECOND_PER_NAMESPACE
    monkeypatch.setattr(workloads, "MAX_CACHED", 3)
    small = workloads.WorkloadUids(api, clock=lambda: now[0])
    assert small("Job", "team-b", "train", uid) == uid
    for i in range(3):
        small("Job", "team-y", f"gone-{i}", "any")
    assert len(small._read) == 3 and ("Job", "team-b", "train") not in small._read  # the oldest went alone


def test_a_node_counted_while_cel_could_not_answer_is_counted_again() -> None:
    """No evaluator answer (the CEL worker not started) is never remembered as the selector's: the node
    is counted again at the next look, and its devices come back."""
    from tests.cluster import node as api_node
    from webhook.controller.observe.cluster import ClusterIndex

    answering = [False]

    def flaky(pairs: Sequence[tuple[str, device_cel.DeviceFacts]]) -> list[device_cel.Outcome]:
        if not answering[0]:
            return [device_cel.SelectorError("no worker", transient=True) for _ in pairs]
        return device_cel.evaluate_all(pairs)

    inventory = devices.inventory_from([device_class()], [node_slice("n0", gpus(4))], [], [], devices.Memo(flaky))
    index = ClusterIndex()
    index.apply_nodes({"/n0": api_node("n0", cpu="8")})
    index.use_devices(inventory)
    assert devices.class_resource("gpu") not in index.nodes["n0"].allocatable
    answering[0] = True
    index.use_devices(inventory)  # the same inventory: the node is counted again all the same
    assert index.nodes["n0"].allocatable[devices.class_resource("gpu")] == 4


def placeholders_held(apiserver: Any, namespace: str) -> int:
    every = apiserver.store.list("v1", "pods", namespace)[0]
    return sum(1 for p in every if "gangkeeper.io/placeholder-for" in p["metadata"].get("labels", {}))


def placeholder_controller(api: Any, cap: int) -> tuple[Any, list[float]]:
    """A controller with the placeholder caps (`cap` in all, 3 a namespace) and its placeholders' clock."""
    from tests.cluster import Clock
    from tests.recorder import ListRecorder
    from webhook.controller.run.reconciler import Controller

    controller = Controller(
        api, recorder=ListRecorder(), clock=Clock(), max_placeholder_pods=cap, max_placeholder_pods_per_namespace=3
    )
    now = [1000.0]
    assert controller.cycle.placeholders is not None
    controller.cycle.placeholders.monotonic = lambda: now[0]
    return controller, now


def test_a_gang_that_held_placeholders_long_gives_them_back_to_another_teams(apiserver: Any, api: Any) -> None:
    """The first team to fill maxPlaceholderPods does not keep it: once its gang has held placeholders
    for HOLD_SECONDS while another namespace's gang got none for the caps, it gives them back, and the
    other team's gang gets its own."""
    from tests.cluster import add_job, add_job_pods
    from tests.cluster import node as api_node
    from tests.fake.test_placeholders import karpenter
    from webhook.controller.act import placeholders as module

    held = functools.partial(placeholders_held, apiserver)
    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", api_node("small", cpu="1"))
    add_job_pods(store, add_job(store, "first", parallelism=3, cpu="2"))
    controller, now = placeholder_controller(api, 3)
    for _ in range(2):
        controller.reconcile_once()
    assert held("team-a") == 3
    add_job_pods(store, add_job(store, "second", parallelism=3, cpu="2", namespace="team-b"))
    for _ in range(2):
        controller.reconcile_once()
    assert (held("team-a"), held("team-b")) == (3, 0)  # the caps: team b's gang waits for them
    now[0] += module.HOLD_SECONDS + 1
    first = controller.reconcile_once()["team-a/job-first"]
    assert "while other teams' gangs got none for the caps: given back" in first.message, first.message
    for _ in range(2):
        controller.reconcile_once()
    assert (held("team-a"), held("team-b")) == (0, 3)


def test_a_pass_evaluates_at_most_its_budget_and_the_rest_is_counted_next_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten devices unlike each other on one node, a budget of four evaluations a pass: the node is counted
    short, then again at each pass until every device was evaluated; nothing is remembered as a failure."""
    from tests.cluster import node as api_node
    from webhook.controller.observe.cluster import ClusterIndex

    monkeypatch.setattr(device_memo, "MAX_EVALUATIONS_PER_PASS", 4)
    # unlike in what the selector reads too (it reads the driver, which one slice's devices share)
    monkeypatch.setattr(device_memo.device_reads, "reads", lambda expression: None)
    memo = devices.Memo()
    inventory = devices.inventory_from([device_class()], [node_slice("n0", gpus(10))], [], [], memo)
    index = ClusterIndex()
    index.apply_nodes({"/n0": api_node("n0", cpu="8")})
    counted = []
    for _ in range(4):
        memo.new_pass()
        index.use_devices(inventory)
        counted.append(index.nodes["n0"].allocatable.get(devices.class_resource("gpu"), 0))
    assert counted == [4, 8, 10, 10] and memo.deferred >= 6 + 2  # each look that found the budget spent
    assert memo.evaluations == 10 and all(
        v is True for v in (memo.matched.get((d.content, FAST)) for p in inventory.pools for d in p.devices)
    )


def test_the_sandbox_works_with_a_thousand_descriptors_open() -> None:
    """A controller (or a long test run) with more than 1,024 descriptors open gets its worker's pipe past
    select()'s FD_SETSIZE: the sandbox waits with poll(), which has no such bound (CI found it)."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the hard limit on open files is {hard}")
    resource.setrlimit(
        resource.RLIMIT_NOFILE,
        (max(soft, 2048) if hard == resource.RLIM_INFINITY else min(max(soft, 2048), hard), hard),
    )
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    sandbox = CelSandbox()
    try:
        assert sandbox([(FAST, FACTS)]) == [True]
    finally:
        sandbox.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def dear_selector(least_seconds: float) -> str:
    """A selector that reads each device's own uuid (no two devices share its answer) and costs at least
    `least_seconds` a device in cel-python (its `duration` backtracks on N letters and a "!"; N found
    here, on this machine, so the test does not depend on its speed)."""
    for letters in range(12, 40):
        expression = f'device.attributes["{DRIVER}"].uuid != "" && duration("{"a" * letters}" + "!") > duration("1s")'
        facts = (DRIVER, {"uuid": {"string": "calibrating"}}, {}, False)
        device_cel.evaluate_all([(expression, facts)])  # compiled
        started = time.process_time()
        device_cel.evaluate_all([(expression, facts)])
        if time.process_time() - started >= least_seconds:
            return expression
    raise AssertionError("no selector slow enough")


def uuid_gpus(count: int, node: str) -> list[dict[str, Any]]:
    return [
        {"name": f"gpu-{i}", "attributes": {"model": {"string": "a100"}, "uuid": {"string": f"GPU-{node}-{i}"}}}
        for i in range(count)
    ]


def test_a_namespace_pays_its_selectors_from_its_share_and_another_teams_gang_starts_in_the_same_pass(
    apiserver: Any, api: Any
) -> None:
    """Team x's selector reads every device's uuid and costs ~80 ms a device (under the sandbox's
    per-evaluation budget; its `dear` mean set aside): on 96 devices, ~8 s a pass if paid whole. Charged to
    team x's share, the pass that releases team-a's DRA gang holds team x's to about its share, the rest
    deferred to later passes with a Gang that says so; team x's gang is still counted over those passes."""
    from tests.cluster import add_job, add_job_pods
    from tests.cluster import node as api_node
    from webhook.controller.observe.cel_budget import TenantBudget

    expression = dear_selector(0.08)
    store = apiserver.store
    for name in ("w0", "w1", "w2"):
        store.create("v1", "nodes", "", api_node(name, cpu="64"))
        store.create("resource.k8s.io/v1", "resourceslices", "", node_slice(name, uuid_gpus(32, name)))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    hostile = in_namespace(template("dear", exactly("gpu", 1, "gpu", expression)), "team-x")
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-x", hostile)
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("gpu", exactly()))
    job = add_job(store, "hostile", parallelism=2, cpu="1", namespace="team-x")
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "dear"}]
    add_job_pods(store, job)
    job_claiming(store, "train", 2, "gpu")
    controller, _relist = dra_controller(apiserver, api)
    memo = controller.device_watch.memo
    ledger = memo.ledger
    assert isinstance(ledger, TenantBudget)
    ledger.dear_seconds = float("inf")  # its mean under a loaded machine's worker is no matter here
    try:
        decisions = controller.reconcile_once()
        assert decisions["team-a/job-train"].state == "Release", decisions["team-a/job-train"].message
        first = memo.evaluations
        # team x's whole bill would be 96 evaluations (~8 s); its share is the pass's second (1 payer
        # before it), so about 12 evaluations, and a chunk's growth past it at most one evaluation's cost
        assert first < 60, first  # ~12, or twice that where the worker runs faster than calibrated here
        assert ledger.spent["team-x"] < ledger.share + 0.5, ledger.spent
        waiting = decisions["team-x/job-hostile"]
        assert waiting.state != "Release"
        assert "namespace team-x spent its share of this pass's CEL budget" in waiting.message, waiting.message
        assert "team-x" in ledger.deferred_since
        for _ in range(40):  # the rest over later passes, each within the share
            controller.reconcile_once()
            assert ledger.spent.get("team-x", 0.0) < ledger.share + 0.5, ledger.spent
            if memo.evaluations >= 96:  # every device of team x's
                break
        assert memo.evaluations >= 96, memo.evaluations
    finally:
        sandbox = memo.evaluator
        if isinstance(sandbox, CelSandbox):
            sandbox.close()


def test_a_selector_dear_on_average_is_taken_as_over_budget_after_a_few_devices() -> None:
    """A selector of ~250 ms a device (under the sandbox's 0.5 s): after DEAR_AFTER devices its mean is
    more than a fifth of the budget, so it is over budget for every device left, remembered as such, and
    never paid for again."""
    from webhook.controller.observe.cel_budget import DEAR_AFTER, TenantBudget

    expression = dear_selector(0.25)  # twice the `dear` mean: CPU time drifts on a loaded machine
    ledger = TenantBudget(pass_seconds=30.0)
    memo = devices.Memo(ledger=ledger)
    inventory = devices.inventory_from(
        [device_class()],
        [node_slice("n0", uuid_gpus(16, "n0"))],
        [],
        [in_namespace(template("dear", exactly("gpu", 1, "gpu", expression)), "team-x")],
        memo,
    )
    memo.new_pass()
    memo.prime(inventory.pools, [expression], inventory.payers)
    assert memo.evaluations <= DEAR_AFTER + 1 + 1  # the class's own selector, once: its devices are alike
    assert "taken as over its budget" in (memo.failed.get(expression) or "")
    before = memo.evaluations
    memo.new_pass()
    memo.prime(inventory.pools, [expression], inventory.payers)
    assert memo.evaluations == before


def test_a_namespace_refused_for_its_own_share_takes_no_other_teams_placeholders(apiserver: Any, api: Any) -> None:
    """Team x holds its namespace's share (3 of a cluster cap of 8) and asks for more with a second gang:
    refused for its own share, which another team's giving back would not help. Team b, holding its own
    for HOLD_SECONDS meanwhile, keeps them."""
    from tests.cluster import add_job, add_job_pods
    from tests.cluster import node as api_node
    from tests.fake.test_placeholders import karpenter
    from webhook.controller.act import placeholders as module

    held = functools.partial(placeholders_held, apiserver)
    store = apiserver.store
    karpenter(store)
    store.create("v1", "nodes", "", api_node("small", cpu="1"))
    add_job_pods(store, add_job(store, "held", parallelism=3, cpu="2", namespace="team-b"))
    add_job_pods(store, add_job(store, "first", parallelism=3, cpu="2", namespace="team-x"))
    controller, now = placeholder_controller(api, 8)
    for _ in range(2):
        controller.reconcile_once()
    assert (held("team-b"), held("team-x")) == (3, 3)
    add_job_pods(store, add_job(store, "second", parallelism=2, cpu="2", namespace="team-x"))
    decisions = controller.reconcile_once()
    assert "maxPlaceholderPodsPerNamespace" in decisions["team-x/job-second"].message
    now[0] += module.HOLD_SECONDS + 1
    for _ in range(3):
        decisions = controller.reconcile_once()
    assert "given back" not in decisions["team-b/job-held"].message, decisions["team-b/job-held"].message
    assert (held("team-b"), held("team-x")) == (3, 3)


def test_a_namespaces_constraint_searches_are_paid_from_its_share_and_another_teams_gang_starts(
    apiserver: Any, api: Any
) -> None:
    """Team x's pod names 16 templates, each 5 devices of distinct `group` where a node's 8 devices have 4
    groups: every count of every node searches to MAX_SEARCH_STEPS and finds none, at each recount. Paid
    from team x's share (with its CEL), the pass that releases team-a's DRA gang holds team x's searches to
    about its share, the rest of its nodes counted over later passes, its Gang saying so."""
    from tests.cluster import add_job, add_job_pods
    from tests.cluster import node as api_node
    from webhook.controller.observe.cel_budget import TenantBudget

    store = apiserver.store
    for i in range(24):  # each device its own uuid: no two nodes alike, each counted on its own
        grouped = [
            {"name": f"gpu-{d}", "attributes": {"group": {"int": d % 8}, "uuid": {"string": f"GPU-{i}-{d}"}}}
            for d in range(16)
        ]
        store.create("v1", "nodes", "", api_node(f"w{i}", cpu="64"))
        store.create("resource.k8s.io/v1", "resourceslices", "", node_slice(f"w{i}", grouped))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    distinct = [{"distinctAttribute": f"{DRIVER}/group"}]
    # a selector reading each device's uuid: the nodes are then alike in nothing any reading sees
    # (device_slices.projected), and each is searched on its own
    own = f'device.attributes["{DRIVER}"].uuid.startsWith("GPU-")'
    for t in range(16):
        hostile = in_namespace(template(f"c{t}", exactly(f"r{t}", 9, "gpu", own), constraints=distinct), "team-x")
        store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-x", hostile)
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-a", template("gpu", exactly()))
    job = add_job(store, "searching", parallelism=1, cpu="1", namespace="team-x")
    job["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": f"g{t}", "resourceClaimTemplateName": f"c{t}"} for t in range(16)
    ]
    add_job_pods(store, job)
    job_claiming(store, "train", 2, "gpu")
    controller, _relist = dra_controller(apiserver, api)
    memo = controller.device_watch.memo
    ledger = memo.ledger
    assert isinstance(ledger, TenantBudget)
    try:
        started = time.thread_time()
        decisions = controller.reconcile_once()
        took = time.thread_time() - started
        assert decisions["team-a/job-train"].state == "Release", decisions["team-a/job-train"].message
        assert ledger.spent["team-x"] < ledger.share + 0.5, ledger.spent
        waiting = decisions["team-x/job-searching"]
        assert waiting.state != "Release"
        assert "namespace team-x spent its share of this pass's CEL budget" in waiting.message, waiting.message
        # CPU of the whole pass: unbounded, team x's searches alone took 4.9 s of it here (24 nodes; 200 s
        # at 1,000)
        assert took < 3.0, took
        for _ in range(6):
            controller.reconcile_once()
            assert ledger.spent.get("team-x", 0.0) < ledger.share + 0.5, ledger.spent
    finally:
        sandbox = memo.evaluator
        if isinstance(sandbox, CelSandbox):
            sandbox.close()


def test_a_selector_found_over_budget_is_not_paid_for_again_by_the_next_leader(apiserver: Any, api: Any) -> None:
    """Leader a's sandbox stops team x's selector (over its CPU budget) and writes so on the Lease; a is
    gone, b takes the Lease and reads it: b's first pass never evaluates the selector (no worker stopped),
    and team x's Gang still says why it waits. What is kept names the expression by a digest only."""
    from tests.cluster import add_job, add_job_pods
    from tests.cluster import node as api_node
    from webhook.controller.observe.cel_budget import OVER_BUDGET_KEY, TenantBudget, digest
    from webhook.controller.run.leader import LeaderElector
    from webhook.kube import LEASES

    store = apiserver.store
    store.create("v1", "nodes", "", api_node("w0", cpu="64"))
    store.create("resource.k8s.io/v1", "deviceclasses", "", device_class())
    store.create("resource.k8s.io/v1", "resourceslices", "", node_slice("w0", gpus(4)))
    hostile = in_namespace(template("slow", exactly("gpu", 1, "gpu", SLOW)), "team-x")
    store.create("resource.k8s.io/v1", "resourceclaimtemplates", "team-x", hostile)
    job = add_job(store, "hostile", parallelism=1, cpu="1", namespace="team-x")
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "g", "resourceClaimTemplateName": "slow"}]
    add_job_pods(store, job)

    def leader(identity: str) -> tuple[Any, TenantBudget, LeaderElector]:
        controller, _ = dra_controller(apiserver, api)
        ledger = controller.device_watch.memo.ledger
        assert isinstance(ledger, TenantBudget)
        elector = LeaderElector(
            api, "gangkeeper-system", "gangkeeper-controller", identity, remembered=lambda: ledger.remembered
        )
        elector.recall = ledger.recall
        assert elector.try_acquire_or_renew()
        return controller, ledger, elector

    first, _, elector_a = leader("a")
    try:
        waiting = first.reconcile_once()["team-x/job-hostile"]
        assert "ran over its budget" in waiting.message, waiting.message
        first.reconcile_once()  # the pass that writes down what the one before found
        assert elector_a.try_acquire_or_renew()
        lease = api.get(LEASES.path("gangkeeper-system", "gangkeeper-controller"))
        kept = lease["metadata"]["annotations"][OVER_BUDGET_KEY]
        assert kept == digest(SLOW) and SLOW not in json.dumps(lease)
        assert elector_a.release()
    finally:
        first.device_watch.memo.evaluator.close()
    second, ledger_b, _ = leader("b")
    sandbox = second.device_watch.memo.evaluator
    try:
        waiting = second.reconcile_once()["team-x/job-hostile"]
        # the class's own selector, once (its devices are alike); team x's, never
        assert sandbox.stopped == 0 and second.device_watch.memo.evaluations == 1
        assert "over its budget" in waiting.message, waiting.message
        assert ledger_b.dear(SLOW) is not None
    finally:
        sandbox.close()


def test_a_selector_that_builds_a_huge_value_fails_within_the_workers_share_of_memory() -> None:
    """A list of 50 million ints is past the worker's address space (cel_worker.MEMORY_LIMIT, 192 MiB:
    two workers and the controller fit the chart's 768Mi): that selector errs, the worker answers on."""
    from webhook.controller.observe import cel_worker

    sandbox = CelSandbox()
    try:
        huge, fine = sandbox([("lists.range(50000000).size() > 0", FACTS), (FAST, FACTS)])
        assert isinstance(huge, device_cel.SelectorError) and fine is True
        assert sandbox.stopped == 0
        assert sandbox._worker is not None
        with open(f"/proc/{sandbox._worker.pid}/limits") as limits:
            assert str(cel_worker.MEMORY_LIMIT) in next(line for line in limits if "address space" in line)
    finally:
        sandbox.close()


def test_a_requests_selectors_are_evaluated_only_on_the_devices_its_class_selects() -> None:
    """As kube-scheduler asks a device its class's selectors first: a node of 4 h100s and 4 a100s, a class
    of h100s and a tenant's selector that reads each device's UUID, evaluated on the 4 h100s only, when
    the node is counted and when the devices check selects."""
    devices_on_node = [
        {
            "name": f"gpu-{i}",
            "attributes": {"model": {"string": "h100" if i < 4 else "a100"}, "uuid": {"string": f"u{i}"}},
        }
        for i in range(8)
    ]
    reads_uuid = f'device.attributes["{DRIVER}"].uuid != ""'
    asked: list[str] = []

    def counting(pairs: Sequence[tuple[str, device_cel.DeviceFacts]]) -> list[device_cel.Outcome]:
        asked.extend(expression for expression, _ in pairs)
        return device_cel.evaluate_all(pairs)

    h100 = device_class("gpu", f'device.attributes["{DRIVER}"].model == "h100"')
    memo = devices.Memo(counting)
    inventory = devices.inventory_from(
        [h100], [node_slice("n0", devices_on_node)], [], [template("t", exactly("gpu", 1, "gpu", reads_uuid))], memo
    )
    from tests.cluster import node as api_node
    from webhook.controller.decide.shapes import Node

    counted = inventory.class_totals(Node.from_api(api_node("n0", cpu="8")))
    assert counted[devices.class_resource("gpu", (reads_uuid,))] == 4
    assert asked.count(reads_uuid) == 4, asked
    sub = (
        next(
            iter(
                inventory.demand("team-a", {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}).claims
            )
        )
        .requests[0]
        .alternatives[0]
    )
    assert len(inventory.selected(sub, inventory.pools[0])) == 4 and asked.count(reads_uuid) == 4
