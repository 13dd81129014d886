"""Which backend serves a namespace: its label, else the cluster default, checked against discovery."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook import backends, contract
from webhook.backends import Backend, NamespaceInfo
from webhook.backends.discovery import Choice, Served, Unavailable, choose

log = logging.getLogger(__name__)


class NamespaceSource(Protocol):
    def get(self, name: str) -> NamespaceInfo | None: ...


@dataclass
class StaticNamespaces:
    namespaces: dict[str, NamespaceInfo] = field(default_factory=dict)

    def get(self, name: str) -> NamespaceInfo | None:
        return self.namespaces.get(name)


class WatchedNamespaces:
    """Namespace labels and annotations kept current by a list-and-watch; reads never touch the API."""

    def __init__(self, api_client: Any) -> None:
        self._api_client = api_client
        self._namespaces: dict[str, NamespaceInfo] = {}

    def get(self, name: str) -> NamespaceInfo | None:
        return self._namespaces.get(name)

    def start(self) -> None:
        threading.Thread(target=self._run, name="namespace-watch", daemon=True).start()

    def _run(self) -> None:
        from kubernetes import client, watch

        core = client.CoreV1Api(self._api_client)
        while True:
            try:
                listing = core.list_namespace()
                self._namespaces = {ns.metadata.name: _info(ns) for ns in listing.items}
                stream = watch.Watch().stream(
                    core.list_namespace, resource_version=listing.metadata.resource_version, timeout_seconds=300
                )
                for event in stream:
                    ns = event["object"]
                    if event["type"] == "DELETED":
                        self._namespaces.pop(ns.metadata.name, None)
                    else:
                        self._namespaces[ns.metadata.name] = _info(ns)
            except Exception:  # 410 Gone or a dropped connection: list again
                log.warning("namespace watch restarting", exc_info=True)
                threading.Event().wait(2)


def _info(ns: Any) -> NamespaceInfo:
    return NamespaceInfo(labels=dict(ns.metadata.labels or {}), annotations=dict(ns.metadata.annotations or {}))


class BackendResolver:
    def __init__(
        self,
        default: str = "auto",
        namespaces: NamespaceSource | None = None,
        served: Callable[[], Served | None] = lambda: None,
        volcano_scheduler: str = "volcano",
        coscheduling_scheduler: str = "scheduler-plugins-scheduler",
        offline_version: str = "1.37",
    ) -> None:
        self.default, self.namespaces, self.served = default, namespaces or StaticNamespaces(), served
        self._schedulers = {"volcano": volcano_scheduler, "coscheduling": coscheduling_scheduler}
        self._offline_version = offline_version
        self._cache: dict[tuple[str, str], Backend] = {}

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
        choice = choose(requested, self.served(), self._offline_version)
        if isinstance(choice, Unavailable):
            return choice
        return self._backend(choice)

    def _backend(self, choice: Choice) -> Backend:
        key = (choice.backend, choice.kubernetes_version)
        if key not in self._cache:
            self._cache[key] = backends.make(
                choice.backend,
                scheduler_name=self._schedulers.get(choice.backend),
                kubernetes_version=choice.kubernetes_version,
            )
        return self._cache[key]
