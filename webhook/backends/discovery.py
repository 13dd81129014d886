"""Which gang mechanism a namespace gets, from what the cluster really serves.

`auto` picks, best first: Volcano, scheduler-plugins coscheduling, native scheduling.k8s.io (newest
served version), then gate. A dedicated gang scheduler that is installed was chosen by the platform
team; the native API is next because the kube-scheduler enforces it; gate needs only gangkeeper's own
controller and works on any cluster. A backend asked for by name whose API is not served is refused
with what is missing, never silently ignored: a pod field the API server does not know is dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.backends import native

log = logging.getLogger(__name__)

VOLCANO_GV, VOLCANO_RESOURCE = "scheduling.volcano.sh/v1beta1", "podgroups"
COSCHEDULING_GV, COSCHEDULING_RESOURCE = "scheduling.x-k8s.io/v1alpha1", "podgroups"
# Volcano serves HyperNodes from the release whose PodGroup has spec.networkTopology (v1.11,
# pkg/apis/topology/v1alpha1 in volcano-sh/apis): the one tells of the other
VOLCANO_TOPOLOGY_GV, VOLCANO_TOPOLOGY_RESOURCE = "topology.volcano.sh/v1alpha1", "hypernodes"
# a level over several native PodGroups (Kubernetes 1.37, alpha): served only where its gate and API are on
COMPOSITE_GV, COMPOSITE_RESOURCE = native.COMPOSITE_GROUP_VERSION, "compositepodgroups"
AUTO_ORDER = ("volcano", "coscheduling", "native", "gate")

HOW_TO_ENABLE = {
    "volcano": "install Volcano (its scheduling.volcano.sh/v1beta1 PodGroup CRD and scheduler)",
    "coscheduling": "install scheduler-plugins with the coscheduling plugin and its PodGroup CRD",
    "native": "enable the feature gates GenericWorkload and GangScheduling (1.35, 1.36; 1.37 merged "
    "GangScheduling into GenericWorkload) on the API server and kube-scheduler, without which pods are "
    "scheduled one by one, and serve the API with --runtime-config=scheduling.k8s.io/v1alpha1=true (1.35), "
    "v1alpha2 (1.36) or v1beta1 (1.37); for whole-gang preemption by priority also WorkloadAwarePreemption "
    "on 1.36 (1.37 has it in GenericWorkload); for gangs kept in one topology domain also "
    "TopologyAwareWorkloadScheduling (alpha in 1.36 and 1.37); for a workload's gangs kept in one domain "
    f"{native.COMPOSITE_ENABLING}",
}


@dataclass(frozen=True)
class Served:
    """Resources served per group-version, e.g. {"scheduling.volcano.sh/v1beta1": {"podgroups"}}."""

    resources: Mapping[str, frozenset[str]]

    def has(self, group_version: str, resource: str) -> bool:
        return resource in self.resources.get(group_version, frozenset())

    def native_version(self) -> str | None:
        for version in native.VERSIONS_BEST_FIRST:
            if self.has(f"{native.GROUP}/{version}", "workloads"):
                return version
        return None

    @staticmethod
    def from_documents(resource_lists: list[Mapping[str, Any]]) -> Served:
        """From APIResourceList documents as /api/v1 and /apis/<group>/<version> return them."""
        found: dict[str, frozenset[str]] = {}
        for doc in resource_lists:
            names = frozenset(str(r["name"]) for r in doc.get("resources") or [] if "/" not in str(r["name"]))
            found[str(doc["groupVersion"])] = names
        return Served(found)


@dataclass(frozen=True)
class Choice:
    backend: str
    kubernetes_version: str = native.DEFAULT_KUBERNETES_VERSION  # native generation, when backend is native
    network_topology: bool = False  # Volcano places gangs by HyperNode tiers (PodGroup networkTopology)
    composite_groups: bool = False  # native: CompositePodGroups served, so a workload-wide domain is kept


@dataclass(frozen=True)
class Unavailable:
    backend: str
    message: str


def choose(
    requested: str, served: Served | None, offline_version: str = native.DEFAULT_KUBERNETES_VERSION
) -> Choice | Unavailable:
    """The backend for `requested` (a backend name or "auto") on a cluster serving `served`.

    With no discovery (offline, or the API unreachable) a named backend is trusted as asked and auto
    falls back to gate, which needs nothing from the cluster but gangkeeper's controller.
    """
    if served is None:
        # offline, the native generation is taken as fully enabled (CompositePodGroups where it has them)
        return Choice("gate") if requested == "auto" else Choice(requested, offline_version, composite_groups=True)
    candidates = AUTO_ORDER if requested == "auto" else (requested,)
    for name in candidates:
        if name == "volcano" and served.has(VOLCANO_GV, VOLCANO_RESOURCE):
            return Choice(name, network_topology=served.has(VOLCANO_TOPOLOGY_GV, VOLCANO_TOPOLOGY_RESOURCE))
        if name == "coscheduling" and served.has(COSCHEDULING_GV, COSCHEDULING_RESOURCE):
            return Choice(name)
        if name == "native":
            version = served.native_version()
            if version:
                composite = served.has(COMPOSITE_GV, COMPOSITE_RESOURCE)
                return Choice(name, native.generation_for_version(version).kubernetes, composite_groups=composite)
        if name == "gate":
            return Choice(name)
    what = {
        "volcano": VOLCANO_GV,
        "coscheduling": COSCHEDULING_GV,
        "native": f"{native.GROUP} Workload (v1alpha1, v1alpha2 or v1beta1)",
    }.get(requested, requested)
    return Unavailable(
        requested,
        f"backend {requested} needs {what}, which this cluster does not serve: "
        f"{HOW_TO_ENABLE.get(requested, 'choose another backend')}",
    )


class DiscoveryCache:
    """Served APIs, refreshed in the background; readers never wait on the network."""

    def __init__(self, fetch: Callable[[], Served], refresh_seconds: float = 60.0) -> None:
        self._fetch, self._refresh = fetch, refresh_seconds
        self._served: Served | None = None
        self._stop = threading.Event()
        self._answered = threading.Event()

    @property
    def served(self) -> Served | None:
        return self._served

    def refresh(self) -> bool:
        try:
            self._served = self._fetch()
        except Exception:  # the cluster may be briefly unreachable; keep the last answer
            log.warning("api discovery failed; keeping the previous answer", exc_info=True)
            return False
        self._answered.set()
        return True

    def wait(self, timeout: float) -> bool:
        """True once discovery has answered at least once."""
        return self._answered.wait(timeout)

    def start(self) -> None:
        threading.Thread(target=self._loop, name="discovery", daemon=True).start()

    def _loop(self) -> None:
        # retried every 2 s until it answers, then on the refresh period: an API installed later (a CRD,
        # a feature gate) is seen within one period
        while True:
            interval = self._refresh if self.refresh() else 2.0
            if self._stop.wait(interval):
                return

    def stop(self) -> None:
        self._stop.set()


def fetch_from_cluster(api: Any) -> Served:
    """Which of the group-versions gangkeeper cares about the API server serves (GET /apis, then each
    wanted /apis/<group>/<version>), through the controller's REST access (webhook.kube.Api)."""
    wanted = {
        VOLCANO_GV,
        VOLCANO_TOPOLOGY_GV,
        COSCHEDULING_GV,
        COMPOSITE_GV,
        *(f"{native.GROUP}/{v}" for v in native.VERSIONS_BEST_FIRST),
    }
    groups = api.get("/apis")
    docs = []
    for group in groups.get("groups") or []:
        for version in group.get("versions") or []:
            group_version = version.get("groupVersion")
            if group_version in wanted:
                docs.append(api.get(f"/apis/{group_version}"))
    return Served.from_documents(docs)
