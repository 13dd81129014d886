"""Convergence invariants of the controller, each a named case: a gang's own failure stays its own, a
lost Lease stops a release at once, a clock jump times nothing out, the books are the Gang object's
(a tenant's annotations are never read back), and each LeaderWorkerSet group keeps its own backoff."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests import builders as b
from tests.apiserver import Store
from tests.cluster import Clock, add_job, add_job_pods, default_scheduler, gang_status, node, pods
from tests.lifecycle import LeaderWorkerSetController, install_admission
from webhook.controller import metrics
from webhook.controller.run.clockguard import SteadyClock
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api, http_date

NS = "team-a"


def gated(store: Store, job: str) -> list[dict[str, Any]]:
    return [p for p in pods(store) if p["metadata"]["name"].startswith(job) and p["spec"].get("schedulingGates")]


class InFlight:
    """A test API server hook: requests it matches are slowed, and the most in flight at once counted."""

    def __init__(self, matches: Callable[[str, str], bool], seconds: float = 0.3) -> None:
        self.matches, self.seconds = matches, seconds
        self.lock, self.now, self.most = threading.Lock(), 0, 0

    def __call__(self, method: str, path: str) -> None:
        if not self.matches(method, path):
            return
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(self.seconds)
        with self.lock:
            self.now -= 1


def test_a_gang_whose_reconciliation_raises_stops_no_other_and_is_retried_alone(store: Store, api: Api) -> None:
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    for name in ("broken", "healthy"):
        add_job_pods(store, add_job(store, name, parallelism=2, cpu="1"))
    clock = Clock()
    controller = Controller(api, clock=clock)
    resolve = controller.workloads.resolve

    def failing(gang: Any, cache: Any) -> Any:
        if gang.name == "job-broken":
            raise RuntimeError("a bug met by one gang only")
        return resolve(gang, cache)

    controller.workloads.resolve = failing  # type: ignore[method-assign]
    before = metrics.GANG_FAILURES._value.get()
    decisions = controller.reconcile_once()
    assert decisions["team-a/job-healthy"].state == "Release" and "team-a/job-broken" not in decisions
    assert metrics.GANG_FAILURES._value.get() == before + 1
    assert gated(store, "broken") and not gated(store, "healthy")
    controller.reconcile_once()  # within its backoff: not tried again
    assert metrics.GANG_FAILURES._value.get() == before + 1
    controller.workloads.resolve = resolve  # type: ignore[method-assign]
    clock.advance(3)  # its backoff (2 s after one failure) has passed: the gang is reconciled again
    assert controller.reconcile_once()["team-a/job-broken"].state == "Release"


def test_a_release_stops_writing_the_moment_the_lease_is_lost(store: Store, api: Api) -> None:
    store.create("v1", "nodes", "", node("worker1", cpu="16"))
    add_job_pods(store, add_job(store, "wide", parallelism=8, cpu="1"))
    leading = {"yes": True}
    writer = Api(api._client)
    send = writer.strategic_patched

    def patch_then_lose(path: str, body: Any) -> Any:
        answer = send(path, body)
        if "/pods/" in path:
            leading["yes"] = False  # the Lease expires while the batch is being sent
        return answer

    writer.strategic_patched = patch_then_lose  # type: ignore[method-assign]
    controller = Controller(writer, clock=Clock(), may_write=lambda: leading["yes"], release_concurrency=1)
    controller.reconcile_once()
    assert len(gated(store, "wide")) == 7  # one PATCH went out; the other seven are the next leader's


def test_a_forward_clock_jump_times_no_gang_out(store: Store, api: Api) -> None:
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(store, add_job(store, "steady", parallelism=2, cpu="1"))
    clock, ticks = Clock(), {"now": 0.0}
    controller = Controller(api, clock=clock, monotonic=lambda: ticks["now"])
    assert controller.reconcile_once()["team-a/job-steady"].state == "Release"
    # nothing binds yet; the wall clock jumps an hour ahead while one second really passes
    clock.advance(3600)
    ticks["now"] += 1
    assert controller.reconcile_once()["team-a/job-steady"].state != "TimedOut"
    # its real timeout (300 s) still applies
    clock.advance(301)
    ticks["now"] += 301
    assert controller.reconcile_once()["team-a/job-steady"].state == "TimedOut"


def test_a_backward_clock_jump_delays_no_timeout(store: Store, api: Api) -> None:
    """The wall clock steps an hour back while a release waits: its real timeout (300 s of time that
    passed) still ends it, not an hour later."""
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(store, add_job(store, "steady", parallelism=2, cpu="1"))
    clock, ticks = Clock(), {"now": 0.0}
    controller = Controller(api, clock=clock, monotonic=lambda: ticks["now"])
    assert controller.reconcile_once()["team-a/job-steady"].state == "Release"
    clock.advance(-3600)
    ticks["now"] += 1
    assert controller.reconcile_once()["team-a/job-steady"].state == "Releasing"
    clock.advance(300)
    ticks["now"] += 300
    assert controller.reconcile_once()["team-a/job-steady"].state == "TimedOut"


def test_a_forward_clock_jump_ends_no_backoff_early(store: Store, api: Api) -> None:
    """A requeued gang's backoff (30 s) is time that must pass: a 360 s jump does not end it."""
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(
        store, add_job(store, "steady", parallelism=2, cpu="1", annotations={"gangkeeper.io/timeout-seconds": "10"})
    )
    clock, ticks = Clock(), {"now": 0.0}
    controller = Controller(api, clock=clock, monotonic=lambda: ticks["now"])
    assert controller.reconcile_once()["team-a/job-steady"].state == "Release"
    clock.advance(11)
    ticks["now"] += 11
    assert controller.reconcile_once()["team-a/job-steady"].state == "TimedOut"
    assert store.get("batch/v1", "jobs", NS, "steady")["spec"]["suspend"] is True
    clock.advance(360)
    ticks["now"] += 1
    controller.reconcile_once()
    assert store.get("batch/v1", "jobs", NS, "steady")["spec"]["suspend"] is True  # still within its backoff
    clock.advance(30)
    ticks["now"] += 30
    controller.reconcile_once()
    assert store.get("batch/v1", "jobs", NS, "steady")["spec"]["suspend"] is False


def test_a_tenants_annotations_are_never_the_controllers_books(store: Store, api: Api) -> None:
    """A Job that carries `not-before` far ahead, an attempts count and the suspended mark (written past
    admission, as an UPDATE by its owner could) is released as any other; its books stay empty."""
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    forged = {
        "gangkeeper.io/not-before": "2030-01-01T00:00:00Z",
        "gangkeeper.io/release-attempts": "99",
        "gangkeeper.io/suspended": "2026-01-01T00:00:00Z",
    }
    add_job_pods(store, add_job(store, "forger", parallelism=2, cpu="1", annotations=forged))
    controller = Controller(api, clock=Clock())
    assert controller.reconcile_once()["team-a/job-forger"].state == "Release"
    default_scheduler(store)
    assert controller.reconcile_once()["team-a/job-forger"].state == "Running"
    books = gang_status(store, "job-forger")
    assert "attempts" not in books and "notBefore" not in books and "suspendedAt" not in books
    job = store.get("batch/v1", "jobs", NS, "forger")
    assert not job["spec"].get("suspend")  # the forged mark resumed nothing and suspended nothing


def test_each_leaderworkerset_group_keeps_its_own_backoff(store: Store, api: Api) -> None:
    """Group 0 times out and is evicted (attempt 1); group 1 runs. The running group resets only its own
    books: group 0's attempt count and backoff stay, so its attempts go 1, 2, ... and end at the budget."""
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    lws = b.lws("serve", size=2, replicas=2, scheduler=None)
    lws["metadata"]["namespace"] = NS
    store.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", NS, lws)
    owner, clock = LeaderWorkerSetController(store), Clock()
    owner.sync(NS, "serve")
    controller = Controller(api, clock=clock)
    decisions = controller.reconcile_once()
    assert {decisions[f"team-a/lws-serve-{i}"].state for i in (0, 1)} == {"Release"}
    for pod in pods(store):  # only group 1's pods bind: group 0's node refuses them (nothing binds them)
        if pod["metadata"]["labels"].get("gangkeeper.io/group") == "lws-serve-1":
            store.bind(NS, pod["metadata"]["name"], "worker1")
    clock.advance(301)
    decisions = controller.reconcile_once()
    assert decisions["team-a/lws-serve-0"].state == "TimedOut"
    assert decisions["team-a/lws-serve-1"].state == "Running"
    assert gang_status(store, "lws-serve-0")["attempts"] == 1
    owner.sync(NS, "serve")  # the evicted group's pods come back gated
    decisions = controller.reconcile_once()
    assert decisions["team-a/lws-serve-1"].state == "Running"
    group0 = gang_status(store, "lws-serve-0")
    assert group0["attempts"] == 1 and group0["notBefore"], group0  # not erased by the running group
    assert "attempts" not in gang_status(store, "lws-serve-1")


def test_a_forged_release_mark_on_a_pod_holds_no_capacity(store: Store, api: Api) -> None:
    """A never-scheduled pod in another namespace, in a gang of its own, carrying `released-at` and
    `planned-node` for the only node: the controller's release records are the Gang's, so it holds
    nothing and the victim's gang is released."""
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    squatter = b.pod(
        "squatter",
        labels={"gangkeeper.io/group": "squat"},
        annotations={"gangkeeper.io/released-at": "2026-11-21T12:00:00Z", "gangkeeper.io/planned-node": "worker1"},
        spec=b.pod_spec(b.container("8", "1Gi")),
        namespace="elsewhere",
    )
    store.create("v1", "pods", "elsewhere", squatter)
    add_job_pods(store, add_job(store, "victim", parallelism=2, cpu="4"))
    assert Controller(api, clock=Clock()).reconcile_once()["team-a/job-victim"].state == "Release"
    assert not gated(store, "victim")


def test_a_late_member_of_a_job_gang_is_never_evicted_alone(store: Store, api: Api) -> None:
    """A release split by a 409 (the scheduler touched one pod between the read and the PATCH): two
    members bind, the third is released a pass later and never binds. Evicting it alone would be the
    Job's failure (backoffLimit 0 fails the Job, as the real Job controller did in the real tier):
    the whole gang goes back by suspension instead, and no pod is evicted."""
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(store, add_job(store, "split", parallelism=3, cpu="1"))
    clock = Clock()
    controller = Controller(api, clock=clock, release_concurrency=1)
    touched = {"done": False}

    def touch_once(method: str, path: str) -> None:
        if method == "PATCH" and "/pods/" in path and not touched["done"]:
            touched["done"] = True
            name = path.split("/pods/")[1].split("?")[0]
            store.patch("v1", "pods", NS, name, {"metadata": {"labels": {"touched": "yes"}}})

    store.fail_next.append(touch_once)  # type: ignore[arg-type]
    controller.reconcile_once()
    late = [p["metadata"]["name"] for p in gated(store, "split")]
    assert len(late) == 1
    default_scheduler(store)  # the two released members bind
    clock.advance(5)
    controller.reconcile_once()  # the third is released now: a later release time than the others
    assert not gated(store, "split")
    clock.advance(301)  # it never binds (nothing schedules it)
    decision = controller.reconcile_once()["team-a/job-split"]
    assert decision.state == "TimedOut"
    assert store.get("batch/v1", "jobs", NS, "split")["spec"].get("suspend") is True
    assert any(p["metadata"]["name"] == late[0] for p in pods(store))  # not evicted
    assert not [m for m, path in store.requests if "eviction" in path]


def test_a_timeout_is_counted_once_while_its_pods_are_on_their_way_out(store: Store, api: Api) -> None:
    """Between the suspension and the Job controller deleting the pods, every look sees the same timed-out
    release: it is requeued once, not once per pass (which spent the whole budget in 40 ms)."""
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(store, add_job(store, "slow", parallelism=2, cpu="1"))
    clock = Clock()
    controller = Controller(api, clock=clock)
    assert controller.reconcile_once()["team-a/job-slow"].state == "Release"
    clock.advance(301)
    for _ in range(4):  # the pods are still there: nothing deletes them in this test
        assert controller.reconcile_once()["team-a/job-slow"].state == "TimedOut"
        clock.advance(1)
    assert gang_status(store, "job-slow")["attempts"] == 1
    assert store.get("batch/v1", "jobs", NS, "slow")["spec"]["suspend"] is True
    controller.recorder.flush()  # events are sent in the background
    requeued = [e for e in store.list("v1", "events", NS)[0] if e.get("reason") == "GangRequeued"]
    assert len(requeued) == 1


class _WatchBehind:
    """The informers' changes as a source whose watch delivers new objects only, never an update: what a
    pass sees while the watch is behind the controller's own writes."""

    def __init__(self, api: Api) -> None:
        self.api, self.seen = api, set[str]()

    def pods(self) -> list[dict[str, Any]]:
        return list(self.api.list("/api/v1/pods")["items"])

    def nodes(self) -> list[dict[str, Any]]:
        return list(self.api.list("/api/v1/nodes")["items"])

    def changes(self) -> tuple[dict[str, Any], dict[str, Any]]:
        pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in self.pods()}
        nodes = {f"/{n['metadata']['name']}": n for n in self.nodes()}
        new = (
            {k: v for k, v in pods.items() if k not in self.seen},
            {k: v for k, v in nodes.items() if k not in self.seen},
        )
        self.seen |= pods.keys() | nodes.keys()
        return new


def test_a_release_is_known_to_the_next_pass_before_the_watch_delivers_it(store: Store, api: Api) -> None:
    """The pods a release patched are known released from the API server's answers: a pass before the
    watch catches up neither releases them again (a 409 each, the bench's 93 PATCHes for 64 pods) nor
    promises the nodes they were given to another gang."""
    store.create("v1", "nodes", "", node("worker1", cpu="4"))
    add_job_pods(store, add_job(store, "first", parallelism=4, cpu="1"))
    controller = Controller(api, clock=Clock(), source=_WatchBehind(api))
    assert controller.reconcile_once()["team-a/job-first"].state == "Release"
    assert not gated(store, "first")
    add_job_pods(store, add_job(store, "second", parallelism=2, cpu="1"))
    patches = len([r for r in store.requests if r[0] == "PATCH" and "/pods/" in r[1]])
    # the second gang's pods arrive; the first's ungated copies not yet
    store.requests.clear()
    decisions = controller.reconcile_once()
    assert patches == 4
    assert not [r for r in store.requests if r[0] == "PATCH" and "/pods/" in r[1]]  # none again
    assert decisions["team-a/job-second"].state != "Release"  # worker1 is the first gang's


def test_the_gangs_reported_states_are_written_side_by_side_at_the_passs_end(store: Store, api: Api) -> None:
    """A gang's reported state is written after every gang's turn, the writes side by side: one round
    trip per gang, one after the other, was a third of the controller's loop while 50 gangs of 20 started
    (bench/cluster.py), and every release waited behind them. Each write still lands."""
    store.create("v1", "nodes", "", node("worker1", cpu="4"))
    for index in range(6):
        add_job_pods(store, add_job(store, f"wait{index}", parallelism=8, cpu="1"))  # none could ever fit
    slow_status_write = InFlight(
        lambda method, path: method == "PATCH" and "/gangs/" in path and path.split("?")[0].endswith("/status")
    )
    controller = Controller(api, clock=Clock())
    controller.reconcile_once()  # the Gangs made
    store.fail_next.append(slow_status_write)  # type: ignore[arg-type]
    store.create("v1", "nodes", "", node("worker2", cpu="8"))  # now one fits and the others wait their turn
    decisions = controller.reconcile_once()
    assert len(decisions) == 6 and slow_status_write.most >= 2, slow_status_write.most
    states = {gang_status(store, f"job-wait{index}")["state"] for index in range(6)}
    assert states == {"Release", "WaitingForCapacity"}, states  # each gang's write landed


def test_the_gangs_released_in_one_pass_have_their_pods_patched_side_by_side(store: Store, api: Api) -> None:
    """A pass that releases several gangs sends their PATCHes through one pool without waiting for each
    gang's to land before deciding the next: one gang after another held 50 gangs of 20 to half the API
    server's PATCH rate (bench/cluster.py `many`). Every pod is still released, and the pass knows it
    before the watch says so."""
    store.create("v1", "nodes", "", node("worker1", cpu="64"))
    for index in range(3):
        add_job_pods(store, add_job(store, f"side{index}", parallelism=4, cpu="1"))
    slow_pod_patch = InFlight(lambda method, path: method == "PATCH" and "/pods/" in path)
    store.fail_next.append(slow_pod_patch)  # type: ignore[arg-type]
    controller = Controller(api, clock=Clock())
    decisions = controller.reconcile_once()
    assert [d.state for d in decisions.values()] == ["Release"] * 3, decisions
    assert slow_pod_patch.most > 4, slow_pod_patch.most  # more than one gang's four PATCHes in flight at once
    assert all(not gated(store, f"side{index}") for index in range(3))
    assert controller.index.gated == 0  # known released from the PATCHes' answers


@pytest.mark.parametrize(("jump", "passed", "state"), [(360, 1, "Releasing"), (-3600, 301, "TimedOut")])
def test_a_clock_jump_then_a_restart_judges_deadlines_by_the_api_servers_clock(
    store: Store, api: Api, jump: float, passed: float, state: str
) -> None:
    """This host's wall clock steps (+360 s, or -3,600 s) and the controller restarts: the new process
    reads the release time its predecessor wrote, and judges it by the API server's clock (its Date
    header), which did not step. +360 s with 1 s really passed: no timeout (a host-anchored clock timed
    it out and suspended the Job); -3,600 s with 301 s passed: the real timeout (300 s) ends it."""
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(store, add_job(store, "steady", parallelism=2, cpu="1"))
    host, server = Clock(), Clock()
    store.wall = server
    first = Controller(api, clock=host, monotonic=lambda: 0.0)
    assert first.reconcile_once()["team-a/job-steady"].state == "Release"
    host.advance(jump + passed)  # the step, and the time that really passed
    server.advance(passed)
    restarted = Controller(api, clock=host, monotonic=lambda: 0.0)
    assert restarted.reconcile_once()["team-a/job-steady"].state == state
    assert store.get("batch/v1", "jobs", NS, "steady")["spec"].get("suspend") is not True or state == "TimedOut"


def test_the_api_servers_date_is_read_from_the_first_header_and_never_without_a_zone() -> None:
    """A proxy on the way may add its own Date beside the API server's (the real tier's fault proxy
    does): joined, email.utils read them as a time with no zone, and the controller's clock failed in
    every pass (no release at all). Only the first is read; a zoneless or unreadable one is refused, and
    the steady clock then starts from this host's."""
    date = "Fri, 27 Nov 2026 21:57:10 GMT"
    assert http_date([date, date]) == dt.datetime(2026, 11, 27, 21, 57, 10, tzinfo=dt.UTC)
    assert http_date([]) is None and http_date(["yesterday"]) is None
    assert http_date(["Fri, 27 Nov 2026 21:57:10"]) is None  # no zone
    naive = SteadyClock(Clock(), lambda: 0.0, lambda: dt.datetime(2026, 11, 27, 21, 57, 10))
    assert naive().tzinfo is not None  # anchored on the host's clock, never failing
