"""The real tier's in-process reads resolve resource names as kubectl does (tests/realcluster/reader.py),
here over a fixed discovery document; the real tier reads through it against kube-apiserver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.realcluster.reader import ApiReader, Resource, Unresolved


def entry(name: str, kind: str, namespaced: bool = True, short: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "name": name,
        "singularName": kind.lower(),
        "kind": kind,
        "namespaced": namespaced,
        "shortNames": list(short),
    }


SERVED = [
    ("", "v1", [entry("pods", "Pod", short=("po",)), entry("pods/status", "Pod"), entry("nodes", "Node", False)]),
    ("batch", "v1", [entry("jobs", "Job")]),
    # a group's versions in its order of preference: v1 (PriorityClass) first, then the gang API's
    ("scheduling.k8s.io", "v1", [entry("priorityclasses", "PriorityClass", False, ("pc",))]),
    ("scheduling.k8s.io", "v1beta1", [entry("podgroups", "PodGroup"), entry("workloads", "Workload")]),
    ("scheduling.k8s.io", "v1alpha2", [entry("podgroups", "PodGroup"), entry("workloads", "Workload")]),
    # a CRD, after the built-in groups, with the same resource name as a built-in one
    ("batch.volcano.sh", "v1alpha1", [entry("jobs", "Job", short=("vcjob",))]),
    ("scheduling.volcano.sh", "v1beta1", [entry("podgroups", "PodGroup", short=("pg",))]),
]


class Fixed(ApiReader):
    def __init__(self) -> None:
        super().__init__("https://unused", Path("/dev/null"), Path("/dev/null"), Path("/dev/null"))
        self.discoveries = 0

    def _discover(self) -> None:
        self.discoveries += 1
        self._served = SERVED


@pytest.fixture(autouse=True)
def no_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ssl.SSLContext.load_verify_locations", lambda *a, **k: None)
    monkeypatch.setattr("ssl.SSLContext.load_cert_chain", lambda *a, **k: None)


@pytest.mark.parametrize(
    "name, want",
    [
        ("pods", Resource("/api/v1", "pods", True)),
        ("pod", Resource("/api/v1", "pods", True)),
        ("po", Resource("/api/v1", "pods", True)),
        ("Node", Resource("/api/v1", "nodes", False)),
        # the built-in group before the CRD of the same name
        ("jobs", Resource("/apis/batch/v1", "jobs", True)),
        ("vcjob", Resource("/apis/batch.volcano.sh/v1alpha1", "jobs", True)),
        ("jobs.batch.volcano.sh", Resource("/apis/batch.volcano.sh/v1alpha1", "jobs", True)),
        # a group without a version: its most preferred version that serves the resource
        ("podgroups.scheduling.k8s.io", Resource("/apis/scheduling.k8s.io/v1beta1", "podgroups", True)),
        ("workloads.v1alpha2.scheduling.k8s.io", Resource("/apis/scheduling.k8s.io/v1alpha2", "workloads", True)),
        ("pc", Resource("/apis/scheduling.k8s.io/v1", "priorityclasses", False)),
        ("podgroups.scheduling.volcano.sh", Resource("/apis/scheduling.volcano.sh/v1beta1", "podgroups", True)),
    ],
)
def test_names_resolve_as_kubectl_resolves_them(name: str, want: Resource) -> None:
    assert Fixed().resolve(name) == want


@pytest.mark.parametrize("name", ["pods,jobs", "pods/status", "status", "podgroups.scheduling.x-k8s.io", "jobs.v9"])
def test_what_discovery_does_not_show_is_left_to_kubectl(name: str) -> None:
    reader = Fixed()
    with pytest.raises(Unresolved):
        reader.resolve(name)


def test_a_miss_discovers_again_once_and_a_hit_does_not() -> None:
    reader = Fixed()
    reader.resolve("pods")
    reader.resolve("jobs")
    assert reader.discoveries == 1
    with pytest.raises(Unresolved):
        reader.resolve("leaderworkersets")
    assert reader.discoveries == 2
