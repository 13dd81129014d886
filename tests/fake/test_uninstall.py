"""`gangkeeper release-all`, the uninstall step: every gangkeeper gate lifted (other gates kept), every
workload gangkeeper suspended resumed, a workload its user (or Kueue) suspended left suspended."""

from __future__ import annotations

import subprocess
import sys

from tests import builders as b
from tests.apiserver import TestApiServer
from tests.cluster import add_job, add_job_pods, pods
from tests.schemas import validate
from webhook.controller.act.uninstall import release_all
from webhook.kube import Api


def test_release_all_lifts_gates_and_resumes_only_what_gangkeeper_suspended(apiserver: TestApiServer, api: Api) -> None:
    store = apiserver.store
    job = add_job(store, parallelism=3, cpu="1")
    names = add_job_pods(store, job)
    held = b.pod("held", labels={"gangkeeper.io/group": "job-train"})
    held["spec"]["schedulingGates"] = [{"name": "gangkeeper.io/gang-gate"}, {"name": "example.com/hold"}]
    store.create("v1", "pods", "team-a", held)
    mark = {"gangkeeper.io/suspended": "2026-01-01T00:00:00Z"}
    ours = b.job("held-by-gangkeeper", suspend=True, annotations=mark)
    theirs = b.job("held-by-its-user", suspend=True)
    # the mark alone (no Gang records it): a Job Kueue holds, or a mark left by hand, is not gangkeeper's
    kueues = b.job("held-by-kueue", suspend=True, annotations=mark)
    for workload in (ours, theirs, kueues):
        store.create("batch/v1", "jobs", "team-a", workload)
    store.create(
        "gangkeeper.io/v1alpha1",
        "gangs",
        "team-a",
        {
            "apiVersion": "gangkeeper.io/v1alpha1",
            "kind": "Gang",
            "metadata": {"name": "job-held-by-gangkeeper", "namespace": "team-a"},
            "spec": {
                "backend": "gate",
                "minMember": 4,
                "workload": {"apiVersion": "batch/v1", "kind": "Job", "name": ours["metadata"]["name"]},
            },
            "status": {"suspendedAt": "2026-01-01T00:00:00Z", "attempts": 1},
        },
    )

    done = release_all(api)
    again = release_all(api)

    gates = {p["metadata"]["name"]: [g["name"] for g in p["spec"].get("schedulingGates") or []] for p in pods(store)}
    assert gates == {"held": ["example.com/hold"], **{name: [] for name in names}}
    assert sorted(done.gates) == sorted(f"team-a/{n}" for n in [*names, "held"]) and not done.failed
    resumed = store.get("batch/v1", "jobs", "team-a", "held-by-gangkeeper")
    assert resumed["spec"]["suspend"] is False and "gangkeeper.io/suspended" not in resumed["metadata"]["annotations"]
    assert store.get("batch/v1", "jobs", "team-a", "held-by-its-user")["spec"]["suspend"] is True
    assert store.get("batch/v1", "jobs", "team-a", "held-by-kueue")["spec"]["suspend"] is True
    assert done.resumed == ["Job team-a/held-by-gangkeeper"]
    assert (again.gates, again.resumed, again.failed) == ([], [], [])  # safe to run twice
    for pod in pods(store):
        validate(pod)


def test_release_all_from_the_command_line(apiserver: TestApiServer) -> None:
    add_job_pods(apiserver.store, add_job(apiserver.store, parallelism=2, cpu="1"))
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "release-all", "--server", apiserver.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "gangkeeper release-all: 2 gates lifted, 0 workloads resumed"


def test_explain_of_an_unknown_gang_exits_non_zero(apiserver: TestApiServer) -> None:
    add_job_pods(apiserver.store, add_job(apiserver.store, parallelism=2, cpu="1"))
    known = subprocess.run(
        [sys.executable, "-m", "webhook", "explain", "team-a/job-train", "--server", apiserver.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    unknown = subprocess.run(
        [sys.executable, "-m", "webhook", "explain", "team-a/job-trian", "--server", apiserver.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert known.returncode == 0 and known.stdout.startswith("gang team-a/job-train")
    assert unknown.returncode == 1 and "no pods carry gangkeeper.io/group=job-trian" in unknown.stderr
