"""Kubernetes API access for the webhook and the controller: raw REST paths through the official client.

The controller needs only a few verbs on a handful of paths; going through the client's transport
keeps its authentication (in-cluster token, kubeconfig, exec plugins) and TLS handling.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"  # built-in kinds only
CONFLICT = 409  # AlreadyExists on a create, a stale resourceVersion on a write


class ApiError(Exception):
    """An answer other than success; status 0: no answer at all (refused, reset, timed out)."""

    def __init__(self, status: int, body: str, method: str = "", path: str = "", server: str = "") -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status, self.body, self.server = status, body, server

    @property
    def unreachable(self) -> str | None:
        """For a user, when no answer came: the server and the cause, in one line."""
        if self.status != 0:
            return None
        return f"cannot reach the API server {self.server or '(unknown)'}: {self.body}"


class WouldWait(Exception):
    """An API call asked for on a thread that must not wait (the event loop that answers every review of
    its process): the caller runs its whole request again on a thread that may (webhook/serving/worker.py).
    Nothing is sent."""


_thread = threading.local()


@contextlib.contextmanager
def no_waiting() -> Iterator[None]:
    """Within it, on this thread, any API call raises WouldWait instead of waiting for an answer."""
    before = getattr(_thread, "no_waiting", False)
    _thread.no_waiting = True
    try:
        yield
    finally:
        _thread.no_waiting = before


def _cause(error: urllib3.exceptions.HTTPError) -> str:
    """The innermost reason urllib3 gives ("[Errno 111] Connection refused"), not its retry wrapper."""
    reason = getattr(error, "reason", None) or error
    text = str(reason)
    return text.rpartition(": ")[2] if "Failed to establish a new connection" in text else text


RETRY_FLOOR_SECONDS = 0.05  # a deadline's attempt needs at least this left to be worth making
RETRY_PAUSE_SECONDS = 0.1
POOL_SIZE = 96  # connections kept: a release's PATCHes side by side (--release-concurrency) and the watches


def typed_items(page: dict[str, Any]) -> list[dict[str, Any]]:
    """A list's items, each with its apiVersion and kind. kube-apiserver leaves them out of a built-in
    list's items (watch events carry them): without them a Job read from a list is no kind at all."""
    kind = str(page.get("kind") or "")
    items: list[dict[str, Any]] = page.get("items") or []
    if kind.endswith("List") and kind != "List":
        for item in items:
            item.setdefault("apiVersion", str(page.get("apiVersion") or ""))
            item.setdefault("kind", kind.removesuffix("List"))
    return items


@dataclass(frozen=True)
class Resource:
    """A REST collection: `/api/v1/pods`, `/apis/scheduling.volcano.sh/v1beta1/podgroups`, ..."""

    group_version: str  # "v1" or "group/version"
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if sub:
            base += f"/{sub}"
        return base


PODS = Resource("v1", "pods")
NODES = Resource("v1", "nodes", namespaced=False)
NAMESPACES = Resource("v1", "namespaces", namespaced=False)
EVENTS = Resource("v1", "events")
LEASES = Resource("coordination.k8s.io/v1", "leases")


def http_date(values: list[str]) -> dt.datetime | None:
    """The first Date header's time, in UTC; None when there is none or it cannot be read. A proxy on the
    way may add its own Date beside the API server's (the test tier's fault proxy does): the values then
    come joined, which email.utils reads as a time with no zone, so only the first is read, and a time
    without a zone is refused."""
    for value in values[:1]:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        return parsed if parsed.tzinfo is not None else None
    return None


AUTH_REFRESH_SECONDS = 10.0


class Api:
    """Requests through the kubernetes client's own connection pool and authentication.

    The pool carries the client's TLS, client certificates and proxy; the headers its auth settings,
    refreshed as the client refreshes them (projected service-account tokens, exec plugins). The
    client's generic request layer is skipped: it serializes and copies every body and header again,
    which was nearly half the CPU of a release PATCH (0.56 ms against 0.31 ms without it).
    """

    def __init__(self, api_client: Any, read_only: bool = False) -> None:
        """read_only: reads go to the cluster, writes are dropped (`gangkeeper explain` runs the
        controller's own pass through it, so it shows exactly what the controller would decide
        without doing any of it)."""
        self._client, self._read_only = api_client, read_only
        self._host = api_client.configuration.host.rstrip("/")
        # a server URL may carry a path (clusters behind Rancher or an API gateway): every request keeps it
        self._prefix = urlsplit(self._host).path
        self._headers = {**api_client.default_headers, "Accept": JSON}
        manager = api_client.rest_client.pool_manager
        # a proxy rewrites each request's URL: only a direct connection has one pool for the server
        direct = type(manager) is urllib3.PoolManager
        self._pool: Any = manager.connection_from_url(self._host) if direct else None
        self._manager = manager
        self._auth: tuple[float, dict[str, str]] = (-AUTH_REFRESH_SECONDS, {})

    def _auth_headers(self) -> dict[str, str]:
        """The client's auth headers, asked for again every AUTH_REFRESH_SECONDS: the in-cluster loader
        re-applies its whole configuration on each ask (kubernetes/config/incluster_config.py
        _refresh_api_key), a twentieth of a release's CPU when asked per PATCH; it reads a rotated
        token at most once a minute itself."""
        at, headers = self._auth
        now = time.monotonic()
        if now - at >= AUTH_REFRESH_SECONDS:
            headers = {}
            self._client.update_params_for_auth(headers, [], ["BearerToken"], "", "GET", None)
            self._auth = (now, headers)
        return headers

    @property
    def client(self) -> Any:
        return self._client

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = 30.0,
        answer: bool = True,
        deadline: float | None = None,
    ) -> Any:
        """The decoded answer; None with `answer=False` (a caller that only needs success).

        `deadline`: seconds for the whole call, retries included. Without it each attempt has `timeout`
        and urllib3 retries a failed connection three more times (its default Retry), so a hung server
        holds the caller four timeouts; with it, a connection that fails is tried again only while time
        is left, each attempt with what is left."""
        if self._read_only and method != "GET":
            return body
        if deadline is None:
            response = self._send(method, path, query, body, content_type, timeout, stream=False)
        else:
            response = self._send_by(time.monotonic() + deadline, method, path, query, body, content_type)
        data = response.data
        if not 200 <= response.status < 300:
            raise ApiError(response.status, data.decode(errors="replace"), method, path)
        return json.loads(data) if data and answer else None

    def server_time(self) -> dt.datetime | None:
        """The API server's clock, from its answer's Date header (whole seconds); None when it cannot
        be read. A clock that is not this host's: the controller anchors its own on it."""
        try:
            response = self._send("GET", "/api", None, None, JSON, 10.0, stream=False)
        except ApiError:
            return None
        if not 200 <= response.status < 300:
            return None
        return http_date(response.headers.getlist("Date"))

    def stream(self, path: str, query: Mapping[str, str], timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Watch events, one JSON object per line, until the server ends the watch."""
        response = self._send("GET", path, {**query, "watch": "true"}, None, JSON, timeout, stream=True)
        try:
            if response.status != 200:
                raise ApiError(response.status, response.read().decode(errors="replace"), "WATCH", path)
            partial = b""
            for chunk in response.stream(65536):
                *lines, partial = (partial + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    def _send_by(
        self, until: float, method: str, path: str, query: Mapping[str, str] | None, body: Any, content_type: str
    ) -> Any:
        """One answer before `until` (monotonic), or ApiError(0): attempts without urllib3's own retries."""
        while True:
            left = until - time.monotonic()
            if left <= 0:
                raise ApiError(0, "deadline passed", method, path, self._host)
            try:
                return self._send(method, path, query, body, content_type, left, stream=False, retries=False)
            except ApiError:
                if until - time.monotonic() < RETRY_FLOOR_SECONDS + RETRY_PAUSE_SECONDS:
                    raise
                time.sleep(RETRY_PAUSE_SECONDS)  # a refused connection fails at once: not a busy loop

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        timeout: float | None,
        stream: bool,
        retries: bool | None = None,
    ) -> Any:
        if getattr(_thread, "no_waiting", False):
            raise WouldWait(f"{method} {path}")
        headers = {**self._headers, **self._auth_headers(), "Content-Type": content_type}
        url = self._prefix + (f"{path}?{urlencode(query)}" if query else path)
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        options = {
            "body": payload,
            "headers": headers,
            "timeout": urllib3.Timeout(total=timeout) if timeout else urllib3.Timeout(connect=30.0, read=None),
            "preload_content": not stream,
        }
        if retries is not None:
            options["retries"] = retries
        try:
            if self._pool is not None:
                return self._pool.urlopen(method, url, **options)
            return self._manager.urlopen(method, self._host.removesuffix(self._prefix) + url, **options)
        except urllib3.exceptions.HTTPError as error:  # refused, reset, timed out: an answer callers handle
            raise ApiError(0, _cause(error), method, path, self._host) from error

    # conveniences
    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def list(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query)

    def create(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.request("POST", path, body=body)

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> None:
        """No caller needs the patched object back: it reaches the informers' caches anyway."""
        self.request("PATCH", path, body=patch, content_type=MERGE_PATCH, answer=False)

    def merge_patched(self, path: str, patch: Mapping[str, Any]) -> Any:
        """A merge patch that returns the patched object (its new resourceVersion to write over next)."""
        return self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def strategic_patched(self, path: str, patch: Mapping[str, Any]) -> Any:
        """A strategic merge patch (built-in kinds: lists merge by their keys) that returns the patched object."""
        return self.request("PATCH", path, body=patch, content_type=STRATEGIC_MERGE_PATCH)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)


def client_from(kubeconfig: str | None = None, server: str | None = None) -> Any:
    """An ApiClient in-cluster, from a kubeconfig, or for a plain URL (tests)."""
    import os

    from kubernetes import client, config

    configuration = client.Configuration()
    if server:
        configuration.host = server
    elif os.environ.get("KUBERNETES_SERVICE_HOST") and not kubeconfig:
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    # a gang's release PATCHes go side by side (64 at once by default) next to the informers' watches; the
    # default pool (5 per CPU, 10 in a 2-CPU pod) would open and drop a connection for the others
    configuration.connection_pool_maxsize = POOL_SIZE
    return client.ApiClient(configuration)
