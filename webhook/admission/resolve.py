"""Which backend serves a namespace: its label, else the cluster default, checked against discovery."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from webhook import backends, contract, naming
from webhook.admission.controller_lease import ControllerHealth
from webhook.backends import Backend, Coscheduling, NamespaceInfo, Settings, Volcano
from webhook.backends.discovery import Served, Unavailable, choose
from webhook.gangs.model import Obj
from webhook.gangs.topology import DEFAULT_LEVELS
from webhook.kube import NAMESPACES, Api, Resource

log = logging.getLogger(__name__)

MAX_CACHED_BACKENDS = 64


class NamespaceSource(Protocol):
    def get(self, name: str) -> NamespaceInfo | None: ...


@dataclass
class StaticNamespaces:
    namespaces: dict[str, NamespaceInfo] = field(default_factory=dict)

    def get(self, name: str) -> NamespaceInfo | None:
        return self.namespaces.get(name)


class WatchedNamespaces:
    """Namespace labels and annotations kept current by a paged list and a watch; reads never touch the API.

    Each serving process runs its own: a watch started before the workers fork would not run in them.
    """

    def __init__(self, api: Api) -> None:
        from webhook.informer import Informer

        self._informer = Informer(api, NAMESPACES, transform=_trim)
        self.synced = self._informer.synced

    def get(self, name: str) -> NamespaceInfo | None:
        namespace = self._informer.get(None, name)
        if namespace is None:
            return None
        meta = namespace["metadata"]
        return NamespaceInfo(labels=meta.get("labels") or {}, annotations=meta.get("annotations") or {})

    def start(self) -> None:
        self._informer.start()


def _trim(namespace: dict[str, Any]) -> dict[str, Any]:
    meta = namespace.get("metadata") or {}
    return {
        "metadata": {
            "name": meta.get("name", ""),
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
        }
    }


QUEUES = Resource("scheduling.volcano.sh/v1beta1", "queues", namespaced=False)
PRIORITY_CLASSES = Resource("scheduling.k8s.io/v1", "priorityclasses", namespaced=False)
FIRST_LIST_SECONDS = 2.0


class WatchedQueues:
    """Volcano's queues and whether each is open, watched once the cluster serves them: a PodGroup in a
    queue that is missing or closed is refused by Volcano's admission, and its pods stay Pending."""

    def __init__(self, api: Api, served: Callable[[], Served | None]) -> None:
        from webhook.informer import Informer

        self._served = served
        self._informer = Informer(api, QUEUES, transform=_trim_queue)
        self._started = False

    def states(self) -> dict[str, str] | None:
        """Queue name -> state ("Open", "Closed", ...); None while unknown (not served, not yet listed)."""
        served = self._served()
        if served is None or not served.has(QUEUES.group_version, QUEUES.plural):
            return None
        if not self._started:
            self._started = True
            self._informer.start()
            # the first review that needs them waits for the first list, briefly, rather than pass
            # without the warning (found on the real tier: the first Job after Volcano came got none)
            self._informer.synced.wait(FIRST_LIST_SECONDS)
        if not self._informer.synced.is_set():
            return None
        return {
            q["metadata"]["name"]: str((q.get("status") or {}).get("state") or "Open") for q in self._informer.items()
        }


def _trim_queue(queue: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": (queue.get("metadata") or {}).get("name", "")}, "status": queue.get("status") or {}}


class WatchedPriorityClasses:
    """The cluster's PriorityClass names: a workload naming one that does not exist is admitted (it may
    come next) with a warning, since the API server's Priority admission refuses each of its pods."""

    def __init__(self, api: Api) -> None:
        from webhook.informer import Informer

        self._informer = Informer(api, PRIORITY_CLASSES, transform=_trim_class)

    def start(self) -> None:
        self._informer.start()

    def names(self) -> Mapping[str, int] | None:
        """Each PriorityClass's value by name, and "" for a pod that names none (the global default's
        value, else 0, as the Priority admission plugin gives it); None until listed."""
        if not self._informer.synced.is_set():
            return None
        classes = list(self._informer.items())
        values = {str(c["metadata"]["name"]): int(c.get("value") or 0) for c in classes}
        values[""] = next((int(c.get("value") or 0) for c in classes if c.get("globalDefault")), 0)
        return values


def _trim_name(obj: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": (obj.get("metadata") or {}).get("name", "")}}


def _trim_class(obj: dict[str, Any]) -> dict[str, Any]:
    return {**_trim_name(obj), "value": obj.get("value"), "globalDefault": obj.get("globalDefault")}


class BackendResolver:
    def __init__(
        self,
        default: str = "auto",
        namespaces: NamespaceSource | None = None,
        served: Callable[[], Served | None] = lambda: None,
        volcano_scheduler: str = "volcano",
        coscheduling_scheduler: str = "scheduler-plugins-scheduler",
        offline_version: str = backends.DEFAULT_KUBERNETES_VERSION,
        controller: Callable[[], ControllerHealth | None] = lambda: None,
        queues: Callable[[], dict[str, str] | None] = lambda: None,
        topology_levels: tuple[str, ...] = DEFAULT_LEVELS,
        priority_classes: Callable[[], Mapping[str, int] | None] = lambda: None,
        volcano_hypernodes: bool = False,
        volcano_devices: bool = False,
        volcano_queues: frozenset[str] = frozenset(),
        protect_from_disruption: str = "true",
        workload_uids: Callable[[str, str, str, str], str | None] | None = None,
        groups_ahead: Callable[[Obj, Volcano], int] | None = None,
    ) -> None:
        self.default, self.namespaces, self.served = default, namespaces or StaticNamespaces(), served
        schedulers = {Volcano.name: volcano_scheduler, Coscheduling.name: coscheduling_scheduler}
        self.settings = Settings(schedulers, offline_version, topology_levels, volcano_hypernodes, volcano_devices)
        # (requested, the namespace's scheduler) -> (the discovery it was chosen on, the choice)
        self._cache: dict[tuple[str, str | None], tuple[Served | None, Backend | Unavailable]] = {}
        self.topology_levels = topology_levels
        self.priority_classes = priority_classes  # PriorityClass names (None: unknown)
        self.volcano_queues = volcano_queues  # queues every namespace may use ("*": any)
        self.protect_from_disruption = protect_from_disruption
        self.controller = controller  # gangkeeper's controller, from its Lease (None: unknown)
        self.queues = queues  # Volcano's queues and their states (None: unknown)
        self.workload_uids = workload_uids  # a gang workload's uid now (admission/workloads.py); None: offline
        self.groups_ahead = groups_ahead  # a workload's Volcano PodGroups made (admission/ahead.py); None: offline

    def namespace_info(self, namespace: str | None) -> NamespaceInfo:
        return (self.namespaces.get(namespace) if namespace else None) or NamespaceInfo()

    def resolve(self, namespace: str | None) -> Backend | Unavailable:
        info = self.namespace_info(namespace)
        requested = info.labels.get(contract.NAMESPACE_BACKEND_LABEL) or self.default
        if requested != "auto" and requested not in backends.NAMES:
            return Unavailable(
                requested,
                f"namespace label {contract.NAMESPACE_BACKEND_LABEL}: Unsupported value: "
                f'"{requested}": supported values: auto, {", ".join(backends.NAMES)}',
            )
        override = info.annotations.get(contract.NAMESPACE_SCHEDULER_ANNOTATION) or None
        served, key = self.served(), (requested, override)
        cached = self._cache.get(key)
        if cached is not None and cached[0] is served:  # chosen on this very discovery answer
            return cached[1]
        if len(self._cache) >= MAX_CACHED_BACKENDS:  # scheduler names are tenant input: bound the cache
            self._cache.clear()
        chosen = self._choose(requested, served, override)
        self._cache[key] = (served, chosen)
        return chosen

    def _choose(self, requested: str, served: Served | None, scheduler: str | None) -> Backend | Unavailable:
        settings = self.settings
        if scheduler is not None:  # the namespace's scheduler, for whichever mechanism has one
            settings = replace(settings, scheduler_names=dict.fromkeys(backends.NAMES, scheduler))
        chosen = choose(requested, served, settings)
        if isinstance(chosen, Unavailable) or chosen.scheduler_name is None or scheduler is None:
            return chosen
        if not naming.is_dns_subdomain(scheduler):
            return Unavailable(
                chosen.name,
                f"namespace annotation {contract.NAMESPACE_SCHEDULER_ANNOTATION}: Invalid value: {scheduler!r}: "
                "must be a scheduler's name (lowercase letters, digits, '-' and '.'), e.g. default-scheduler",
            )
        return chosen
