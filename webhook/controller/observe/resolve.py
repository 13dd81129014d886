"""Where a gang's size and timeout come from: its workload (read from the watch caches, else the API), or
the pods of a bare pod group. Read-only: nothing here writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from webhook import contract, gangs
from webhook.controller import metrics
from webhook.controller.decide import shapes
from webhook.controller.decide.device_memo import BoundedMap
from webhook.controller.decide.pods import DEFAULT_RECOVERY_SECONDS, DEFAULT_TIMEOUT_SECONDS
from webhook.controller.decide.situation import GangSpec
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.workloads import OTHER_VERSIONS, WORKLOAD_RESOURCES
from webhook.gangs import kinds
from webhook.gangs.model import Gang, Obj
from webhook.informer import Informer
from webhook.kube import Api, ApiError, Resource

# replicas that serve: spread over nodes so one node's failure takes few of them (batch gangs pack)
MAX_ANALYZED = 4096  # workloads' analyses kept (a cluster's live gangs, with room)


def expected_seconds(workload: Obj | None) -> float | None:
    """How long the workload runs once started, when it says: `gangkeeper.io/expected-seconds`, else a
    Job's activeDeadlineSeconds (the most it may run)."""
    meta = (workload or {}).get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(contract.EXPECTED_SECONDS_ANNOTATION)
    if raw is None and (workload or {}).get("kind") == "Job":
        raw = ((workload or {}).get("spec") or {}).get("activeDeadlineSeconds")
    try:
        value = float(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and value > 0 else None


@dataclass(eq=False)
class Resolved:
    spec: GangSpec | None
    gang: Gang | None
    workload: Obj | None
    problem: str = ""
    gone: bool = False  # the workload was deleted (404): nothing will ever size or release this gang


class Workloads:
    """Reads workloads and group objects: from the watch cache of their resource when there is one."""

    def __init__(
        self,
        api: Api,
        informers: Mapping[tuple[str, str], Informer],
        recovery_seconds: int = DEFAULT_RECOVERY_SECONDS,
    ) -> None:
        self.api, self.informers = api, informers
        self.recovery_seconds = recovery_seconds  # the Configuration's default, for gangs that do not say
        # (kind, namespace, workload, gang) -> (the workload's uid and resourceVersion, what it resolved
        # to): a gang whose pods change is resolved again each time, and its workload, unchanged, is not
        # analyzed again (gangs.analyze of a 1,000-pod Job on every pass of its release, 4% of the
        # controller's CPU in bench/cluster.py autoscale)
        self._analyzed: BoundedMap[tuple[str, str, str, str], tuple[tuple[str, str], Resolved]] = BoundedMap(
            MAX_ANALYZED
        )

    def read(self, resource: Resource, namespace: str | None, name: str) -> Obj | None:
        """From the watch cache of that resource when there is one, else from the API; None: not found."""
        informer = self.informers.get((resource.group_version, resource.plural))
        if informer is not None and informer.synced.is_set():
            return informer.get(namespace, name)
        return self.fresh(resource, namespace, name)

    def fresh(self, resource: Resource | None, namespace: str | None, name: str) -> Obj | None:
        """From the API server itself, past any watch cache; None: not found (or no such kind)."""
        if resource is None:
            return None
        try:
            return dict(self.api.get(resource.path(namespace, name)))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def workload_resource(self, kind: str) -> Resource | None:
        """Where a workload kind is read: the version this cluster serves and we watch, else the usual one."""
        default = WORKLOAD_RESOURCES.get(kind)
        for candidate in OTHER_VERSIONS.get(kind, ()):
            if (candidate.group_version, candidate.plural) in self.informers:
                return candidate
        return default

    def resolve(self, gang: GangView, cache: dict[tuple[str, str, str], Obj | None]) -> Resolved:
        """The gang's size and timeout, from its workload (or from the pods of a bare pod group)."""
        first = gang.pods[0]
        stamp = first.annotations.get(contract.WORKLOAD_ANNOTATION, "")
        kind, _, rest = stamp.partition("/")
        workload_name = rest.split("/")[0]
        if kind == "Pod" or (not stamp and contract.GROUP_NAME_LABEL in first.labels):
            plan = gangs.analyze(gang.raw[0])
            found = next((g for g in plan.gangs if g.name == gang.name), None)
            if found is None:
                reason = str(plan.errors[0]) if plan.errors else "the pod group has no valid gangkeeper.io/group-size"
                return Resolved(None, None, None, reason)
            return Resolved(self.spec_of(found, evictable=False), found, None)
        resource = self.workload_resource(kind)
        if resource is None or not workload_name:
            return Resolved(None, None, None, f"unknown workload {stamp!r}")
        key = (kind, gang.namespace, workload_name)
        unreadable = False
        if key not in cache:
            try:
                cache[key] = self.read(resource, gang.namespace, workload_name)
            except ApiError as error:
                metrics.API_ERRORS.labels("get", str(error.status)).inc()
                cache[key], unreadable = None, True
        workload = cache[key]
        if workload is None:
            if unreadable:
                return Resolved(None, None, None, f"{kind} {workload_name} cannot be read")
            return Resolved(None, None, None, f"{kind} {workload_name} does not exist", gone=True)
        meta = workload.get("metadata") or {}
        version = (str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))
        analyzed = self._analyzed.get((*key, gang.name))
        if analyzed is not None and analyzed[0] == version and all(version):
            return analyzed[1]
        resolved = self._analyze(workload, kind, workload_name, gang.name)
        self._analyzed[(*key, gang.name)] = (version, resolved)
        return resolved

    def _analyze(self, workload: Obj, kind: str, workload_name: str, gang_name: str) -> Resolved:
        plan = gangs.analyze(workload)
        found = next((g for g in plan.gangs if g.name == gang_name), None)
        if found is None:
            why = f": {plan.errors[0]}" if plan.errors else ""
            return Resolved(None, None, workload, f"{kind} {workload_name} has no gang {gang_name}{why}")
        return Resolved(self.spec_of(found, evictable=True, workload=workload), found, workload)

    def spec_of(self, gang: Gang, evictable: bool, workload: Obj | None = None) -> GangSpec:
        later = tuple(
            shapes.Shape.from_requests(members.requests) for members in gang.later for _ in range(members.count)
        )
        annotations = ((workload or {}).get("metadata") or {}).get("annotations") or {}
        asked = annotations.get(contract.PLACEMENT_ANNOTATION)
        spread = asked == "spread" if asked in ("pack", "spread") else kinds.spreads(gang.id.workload_kind)
        return GangSpec(
            gang.min_member,
            gang.timeout_seconds or DEFAULT_TIMEOUT_SECONDS,
            evictable,
            later,
            spread,
            expected_seconds(workload),
            gang.recovery_seconds or self.recovery_seconds,
            gang.topology,
            gang.workload_topology,
            gang.restarts_whole,
            gang.whole_groups,
        )
