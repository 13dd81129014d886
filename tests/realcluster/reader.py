"""Reads of the real API server from the test process itself, the way `kubectl get -o json` reads them.

The real tier polls (every `wait_until`, each operator's mounted Secret every second, the tier-wide
watch for partial gangs): as a kubectl process per read that cost about 0.1 s of CPU each on a 2-core
machine, most of a core while a test waited, taken from the control plane under test and from the build
a fresh machine runs beside the tests. Here a read is one HTTPS GET with the admin's client certificate.

Resource names resolve as kubectl resolves them (k8s.io/apimachinery `pkg/api/meta` priority RESTMapper
over discovery): plural, singular, short name or kind, optionally `.group` or `.version.group`; without
a group the first group in discovery order that serves it wins, the built-in groups before CRDs, and
without a version the group's most preferred version that serves it; a
namespaced resource read without a namespace is read in `default`, the kubeconfig's namespace. What this
cannot resolve (a comma list, a resource discovery does not yet show) is left to kubectl by the caller.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = re.compile(r"^v\d+((alpha|beta)\d+)?$")


@dataclass(frozen=True)
class Resource:
    prefix: str  # /api/v1 or /apis/<group>/<version>
    plural: str
    namespaced: bool


class Unresolved(LookupError):
    """No served resource by that name: the caller asks kubectl, which says why."""


class ApiReader:
    def __init__(self, server: str, ca: Path, cert: Path, key: Path, timeout: float = 30) -> None:
        self.server, self.timeout = server, timeout
        self._context = ssl.create_default_context(cafile=str(ca))
        self._context.load_cert_chain(str(cert), str(key))
        self._lock = threading.Lock()
        # (group, version, resource lists) in discovery order, each group's versions in its order of
        # preference; None until first needed
        self._served: list[tuple[str, str, list[dict[str, Any]]]] | None = None

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.server}{path}", context=self._context, timeout=self.timeout) as answer:
            return json.loads(answer.read())

    def _discover(self) -> None:
        served = [("", "v1", self._get("/api/v1")["resources"])]
        for group in self._get("/apis")["groups"]:
            for version in group["versions"]:
                try:
                    listed = self._get(f"/apis/{group['name']}/{version['version']}")["resources"]
                except urllib.error.HTTPError:  # an aggregated API not answering yet
                    continue
                served.append((group["name"], version["version"], listed))
        self._served = served

    def _find(self, resource: str, group: str | None, version: str | None) -> Resource | None:
        for served_group, served_version, listed in self._served or []:
            if group is not None and served_group != group:
                continue
            if version is not None and served_version != version:
                continue
            for entry in listed:
                if "/" in entry["name"]:
                    continue  # a subresource
                names = {entry["name"], entry.get("singularName") or "", entry["kind"].lower()}
                if resource in names or resource in (entry.get("shortNames") or []):
                    prefix = f"/apis/{served_group}/{served_version}" if served_group else "/api/v1"
                    return Resource(prefix, entry["name"], bool(entry["namespaced"]))
        return None

    def resolve(self, kind: str) -> Resource:
        if "," in kind or "/" in kind:
            raise Unresolved(kind)
        resource, _, rest = kind.lower().partition(".")
        candidates: list[tuple[str | None, str | None]] = [(None, None)]
        if rest:
            first, _, after = rest.partition(".")
            candidates = [(rest, None)] + ([(after, first)] if VERSION.match(first) and after else [])
        with self._lock:
            for attempt in range(2):  # a CRD installed since the last discovery: discover again once
                if self._served is None or attempt:
                    self._discover()
                for group, version in candidates:
                    found = self._find(resource, group, version)
                    if found:
                        return found
        raise Unresolved(kind)

    def get(
        self,
        kind: str,
        name: str | None = None,
        namespace: str | None = None,
        selector: str | None = None,
        all_namespaces: bool = False,
    ) -> Any:
        """As ControlPlane.get: the object, None when it does not exist, or a list's items (each with
        its apiVersion and kind, as kubectl prints them)."""
        try:
            return self._read(self.resolve(kind), name, namespace, selector, all_namespaces)
        except urllib.error.HTTPError as error:
            if error.code != 404 or name:
                raise RuntimeError(f"GET {error.url}: {error.code} {error.read()[:300]!r}") from error
        with self._lock:  # a list the server no longer serves there: what it serves now, once
            self._served = None
        try:
            return self._read(self.resolve(kind), name, namespace, selector, all_namespaces)
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"GET {error.url}: {error.code} {error.read()[:300]!r}") from error

    def _read(
        self, found: Resource, name: str | None, namespace: str | None, selector: str | None, all_namespaces: bool
    ) -> Any:
        path = found.prefix
        if found.namespaced and not all_namespaces:
            path += f"/namespaces/{urllib.parse.quote(namespace or 'default')}"
        path += f"/{found.plural}"
        if name:
            path += f"/{urllib.parse.quote(name)}"
        if selector and not name:
            path += "?" + urllib.parse.urlencode({"labelSelector": selector})
        try:
            data = self._get(path)
        except urllib.error.HTTPError as error:
            if error.code == 404 and name:
                return None
            raise
        if name:
            return data
        item_kind = str(data.get("kind", "")).removesuffix("List")
        for item in data["items"]:
            item.setdefault("apiVersion", data.get("apiVersion"))
            item.setdefault("kind", item_kind)
        return data["items"]
