"""The controller's one memory (observe/store.py): a record per gang, and nothing of a gang left anywhere
in the controller once it is gone (issue 77, item 5: the leak test)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType

from tests.apiserver import TestApiServer
from tests.cluster import Clock, add_job, add_job_pods, default_scheduler, node, pods
from webhook.controller.decide.device_memo import BoundedMap
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.observe.store import GangStore
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api

# caches bounded by size and evicted by age, never by a gang's deletion (docs/security.md): tenants' CEL
# results, over-budget expressions, ProvisioningRequest templates, workloads read by uid
BOUNDED_BY_DESIGN = (BoundedMap,)
# mirrors of the API server's objects, as an informer's cache is (the Gang objects listed once where no
# watch runs): the cluster's state, gone when the garbage collector deletes the objects
MIRRORS = {"_listed"}


def test_a_record_holds_what_is_remembered_and_forget_removes_all_of_it() -> None:
    store = GangStore()
    store.begin_pass()
    record = store.record("team-a/job-a")
    record.gone_since, record.handed = 1.0, "placeholders"
    store.reserve("team-a/job-a", Clock().now, {"n1": {"cpu": 1000}})
    store.decided("team-a/job-a", Decision(GangState.RUNNING, "running"))
    store.placeholder_made("team-a/job-a", "team-a/placeholder-1", 5.0)
    store.wrote("team-a/job-a", (5.0, {"kind": "Gang"}))
    assert [key for key, _ in store.reservations()] == ["team-a/job-a"]
    assert store.unseen_placeholders() == [("team-a/job-a", {"team-a/placeholder-1": 5.0})]
    assert store.writing() == ["team-a/job-a"]
    store.forget("team-a/job-a")
    assert len(store) == 0 and store.get("team-a/job-a") is None and store.reservations() == []
    assert store.unseen_placeholders() == [] and store.writing() == []


def test_a_placeholder_is_unseen_until_the_watch_shows_it_or_it_is_old_and_a_write_until_read_back() -> None:
    store = GangStore()
    store.placeholder_made("a/x", "a/p1", 5.0)
    store.placeholder_made("a/x", "a/p2", 9.0)
    store.placeholder_made("a/y", "a/p3", 9.0)
    store.placeholders_seen({"a/p3"}, made_after=6.0)  # p3 seen; p1 made before 6.0
    assert store.unseen_placeholders() == [("a/x", {"a/p2": 9.0})]
    record = store.get("a/y")
    assert record is not None and record.unseen_placeholders is None
    store.wrote("a/x", (1.0, None))  # deleted by this replica: remembered as such
    store.wrote("a/y", (1.0, {}))
    store.wrote("a/y", None)  # the watch caught up
    assert store.writing() == ["a/x"]


def test_a_namespace_refused_placeholders_counts_for_the_next_pass_only() -> None:
    """act/placeholders.py gives a gang's placeholders back when another namespace's gangs were refused
    in the previous pass: the store keeps that per namespace, and no longer than it matters."""
    store = GangStore()
    store.begin_pass()  # pass 1
    store.refuse_placeholders("team-b")
    assert not store.refused_placeholders_last_pass(besides="team-a")  # this pass's refusal: not yet
    store.begin_pass()  # pass 2
    store.forget_placeholder_refusals()
    assert store.refused_placeholders_last_pass(besides="team-a")
    assert not store.refused_placeholders_last_pass(besides="team-b")  # its own namespace does not count
    store.refuse_placeholders("team-b")
    store.begin_pass()  # pass 3: refused in pass 2 as well
    store.forget_placeholder_refusals()
    assert store.refused_placeholders_last_pass(besides="team-a")
    store.begin_pass()  # pass 4: refused in neither 3 nor later
    store.forget_placeholder_refusals()
    assert not store.refused_placeholders_last_pass(besides="team-a")
    assert store._refused_placeholders == {}


def test_a_decision_is_the_previous_passs_only_when_that_pass_wrote_it() -> None:
    """A gang no pass decided for (its turn failed, its mechanism is another's) reuses nothing stale."""
    store = GangStore()
    store.begin_pass()
    store.decided("team-a/job-a", Decision(GangState.RUNNING, "running"))
    assert store.decisions().keys() == {"team-a/job-a"}
    store.begin_pass()
    assert store.decisions() == {}  # this pass decided nothing yet: the last pass's is on the record
    record = store.get("team-a/job-a")
    assert record is not None and record.decided_in == store.pass_number - 1


def test_keep_only_forgets_the_gangs_the_index_no_longer_knows() -> None:
    store = GangStore()
    for key in ("a/x", "a/y", "b/x"):
        store.record(key)
    store.keep_only({"a/y": None})
    assert [record.key for record in store] == ["a/y"]


def mentions(value: object, key: str, namespace: str, name: str) -> bool:
    if isinstance(value, str):
        return value == key
    if isinstance(value, tuple):
        return (namespace in value and name in value) or any(mentions(v, key, namespace, name) for v in value)
    return False


def walk(root: object, skip: tuple[type, ...] = ()) -> Iterator[tuple[object, str, list[object]]]:
    """Every object under `root` that is the controller's own memory (its objects and their containers),
    depth first: (the object, its path, what it names directly: a container's keys and elements).
    Foreign objects (the API client, threads, informers' caches of the cluster, callables) are not."""
    seen: set[int] = set()
    stack: list[tuple[object, str]] = [(root, "controller")]
    while stack:
        value, path = stack.pop()
        if id(value) in seen or isinstance(value, (str, bytes, int, float, type(None), *skip)):
            continue
        seen.add(id(value))
        if isinstance(value, dict):
            yield value, path, list(value)
            stack.extend((v, f"{path}[{k!r}]") for k, v in value.items())
            stack.extend((k, f"{path}.keys()") for k in value)
        elif isinstance(value, (list, tuple, set, frozenset)):
            yield value, path, list(value)
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
        elif type(value).__module__.startswith("webhook.controller") and not callable(value):
            fields = getattr(value, "__dict__", None) or {
                slot: getattr(value, slot, None) for slot in getattr(type(value), "__slots__", ())
            }
            yield value, path, []
            stack.extend((v, f"{path}.{attr}") for attr, v in fields.items() if attr not in MIRRORS)


def references(root: object, key: str) -> list[str]:
    """Every container under `root` that still names the gang `key` (a key or an element)."""
    namespace, name = key.split("/", 1)
    return [
        path
        for value, path, named in walk(root, BOUNDED_BY_DESIGN)
        if any(mentions(v, key, namespace, name) for v in named)
    ]


def module_references(key: str) -> list[str]:
    """`references` in the controller's modules' globals (a cache at module level outlives every
    controller: decide/ keeps none, tests/unit/test_architecture.py), each a root of its own."""
    found = []
    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith("webhook.controller") or module is None:
            continue
        for global_name, value in vars(module).items():
            if isinstance(value, type | ModuleType) or callable(value):
                continue
            namespace, name = key.split("/", 1)
            found.extend(
                f"{module_name}.{global_name}{path.removeprefix('controller')}"
                for held, path, named in walk(value, BOUNDED_BY_DESIGN)
                if any(mentions(v, key, namespace, name) for v in named)
            )
    return found


def deep_size(root: object) -> int:
    return sum(sys.getsizeof(value) for value, _, _ in walk(root))


def run_and_delete(apiserver: TestApiServer, controller: Controller, clock: Clock, name: str) -> str:
    """A two-pod Job released, bound, run, then deleted with its pods; two passes after."""
    store = apiserver.store
    job = add_job(store, name, parallelism=2, cpu="1")
    add_job_pods(store, job)
    key = f"team-a/job-{name}"
    assert controller.reconcile_once()[key].state == GangState.RELEASE
    default_scheduler(store)
    clock.advance(1)
    assert controller.reconcile_once()[key].state == GangState.RUNNING
    for pod in pods(store):
        if pod["metadata"]["name"].startswith(f"{name}-"):
            store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
    store.delete("batch/v1", "jobs", "team-a", job["metadata"]["name"])
    for _ in range(2):
        clock.advance(1)
        controller.reconcile_once()
    return key


def test_a_gang_run_and_deleted_leaves_nothing_of_itself_after_two_passes(apiserver: TestApiServer, api: Api) -> None:
    apiserver.store.create("v1", "nodes", "", node("n1", cpu="8"))
    clock = Clock()
    controller = Controller(api, clock=clock, resync_seconds=3600)
    key = run_and_delete(apiserver, controller, clock, "gone")
    assert controller.store.get(key) is None and len(controller.store) == 0
    left = references(controller, key) + module_references(key)
    assert not left, f"the deleted gang {key} is still remembered at: {left}"


def test_the_leak_walk_finds_what_is_left(apiserver: TestApiServer, api: Api) -> None:
    """The walk itself can fail: a record kept past its gang's deletion is found."""
    apiserver.store.create("v1", "nodes", "", node("n1", cpu="8"))
    clock = Clock()
    controller = Controller(api, clock=clock, resync_seconds=3600)
    key = run_and_delete(apiserver, controller, clock, "kept")
    controller.cycle.head_of_line.__dict__["stray"] = {key: 1}
    found = references(controller, key)  # by whichever path the walk reaches the cycle first
    assert len(found) == 1 and found[0].endswith("cycle.head_of_line.stray"), found
    from webhook.controller.observe import informer

    informer.__dict__["_stray_for_the_test"] = {key: 1}  # and a module's global, which outlives controllers
    try:
        assert module_references(key) == ["webhook.controller.observe.informer._stray_for_the_test"]
    finally:
        del informer.__dict__["_stray_for_the_test"]


def test_ten_thousand_gangs_churned_leave_the_controllers_memory_flat(apiserver: TestApiServer, api: Api) -> None:
    """Gangs made, released and deleted 500 at a time: no record is left after each batch, and once its
    bounded caches are full the controller's own memory (all its objects reach) stays flat."""
    store = apiserver.store
    for i in range(8):
        store.create("v1", "nodes", "", node(f"n{i}", cpu="1000", pods="1000"))
    clock = Clock()
    controller = Controller(api, clock=clock, resync_seconds=3600)
    held: list[int] = []
    for batch in range(20):
        jobs = [add_job(store, f"c{batch}-{i}", parallelism=1, cpu="100m") for i in range(500)]
        for job in jobs:
            add_job_pods(store, job)
        controller.reconcile_once()
        for pod in pods(store):
            store.delete("v1", "pods", "team-a", pod["metadata"]["name"])
        for job in jobs:
            store.delete("batch/v1", "jobs", "team-a", job["metadata"]["name"])
        for _ in range(2):
            clock.advance(1)
            controller.reconcile_once()
        assert len(controller.store) == 0
        held.append(deep_size(controller))
    # the bounded caches (4,096 workload analyses and uids, each evicted per entry) are full after 6,000
    # gangs; from there on, 4,000 more gangs churned leave the controller as it was (measured: +3 KiB)
    grown = max(held[12:]) - held[11]
    assert grown < 64 * 1024, f"the controller grew {grown / 1024:.0f} KiB over the last 4,000 gangs: {held}"
