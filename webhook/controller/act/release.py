"""Writing a release: the decided gang's gates lifted (pinned where placement checked everything), the
PATCHes side by side (every gang released in a pass, through one pool), stopped the moment this replica
is no longer the leader; and gates lifted from pods that no live gate gang will ever release."""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack

from webhook import contract
from webhook.controller import metrics
from webhook.controller.act.report import Reporter
from webhook.controller.act.wakeup import WAKE_ANNOTATION
from webhook.controller.decide.pods import RELEASE_CONCURRENCY, PodView, Release
from webhook.controller.decide.shapes import HostPort
from webhook.controller.decide.situation import Decision
from webhook.controller.decide.state import release_patch
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved
from webhook.gangs.model import Obj
from webhook.kube import PODS, Api, ApiError

log = logging.getLogger("gangkeeper.controller")


def adjust(free: dict[str, dict[str, int]], units: Mapping[str, Mapping[str, int]], sign: int) -> None:
    """Add (or take) units to a pass's free capacity. A node's figures are replaced, never changed in
    place: the pass shares them with the cluster index until it writes."""
    for node, amounts in units.items():
        node_free = dict(free.get(node) or {})
        for resource, amount in amounts.items():
            node_free[resource] = node_free.get(resource, 0) + sign * amount
        free[node] = node_free


class Releaser:
    def __init__(
        self, api: Api, reporter: Reporter, may_write: Callable[[], bool], concurrency: int = RELEASE_CONCURRENCY
    ) -> None:
        self.api, self.reporter, self.may_write, self.concurrency = api, reporter, may_write, concurrency
        self._pool: ThreadPoolExecutor | None = None
        # this pass's releases in flight: each gang's record, answering with its PATCHes (and the version
        # of the pod each was made over)
        self._sending: list[Future[list[tuple[str, Future[Obj | None]]]]] = []
        self._events_held = ExitStack()

    def lift_gates(self, pods: list[tuple[PodView, Obj]], why: str, now: dt.datetime) -> None:
        """Take gangkeeper's gate off pods that are no live gate gang's members, so they are scheduled
        like any pod instead of waiting for a release that will never come."""
        for view, raw in pods:
            gates = (raw.get("spec") or {}).get("schedulingGates") or []
            remaining = [dict(g) for g in gates if g.get("name") != contract.GATE]
            patch = {
                "metadata": {"resourceVersion": view.resource_version},
                "spec": {"schedulingGates": remaining or None},
            }
            try:
                self.api.merge_patch(PODS.path(view.namespace, view.name), patch)
            except ApiError as error:
                metrics.API_ERRORS.labels("patch", str(error.status)).inc()
                continue
            self.reporter.event(raw, "Normal", "GateLifted", f"gangkeeper's gate lifted: {why}")

    def steer(self, pods: list[tuple[PodView, Obj]], pins: Mapping[str, str] | None, why: str) -> int:
        """Lift gangkeeper's gate off a steered gang's pods (backends: `steers_shared_claims`), each pinned
        where gangkeeper's model placed it (`pins`: pod name -> node; None: left as they are) for their own
        scheduler to check and bind; returns how many were written. A pod changed since it was read (409)
        or gone is left for the next look. Sent `concurrency` at a time, as a release's are: one after
        another, a 1,000-pod gang's took 41 s on the real tier (bench/cluster.py --scenarios step, native)."""

        def send(item: tuple[PodView, Obj]) -> bool:
            view, raw = item
            try:
                patch = release_patch(view, (pins or {}).get(view.name), raw.get("spec") or {})
                self.api.strategic_patched(PODS.path(view.namespace, view.name), patch)
            except ApiError as error:
                metrics.API_ERRORS.labels("patch", str(error.status)).inc()
                log.warning("steer patch failed", extra={"pod": view.key, "status": error.status, "why": str(error)})
                return False
            return True

        if len(pods) > 1:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(pods)), thread_name_prefix="steer") as pool:
                written = sum(pool.map(send, pods))
        else:
            written = sum(map(send, pods))
        if written:
            reason = "Steered" if pins is not None else "GateLifted"
            self.reporter.event(pods[0][1], "Normal", reason, why)
        return written

    def touch(self, pods: list[PodView], now: dt.datetime) -> None:
        """Annotate waiting pods (`gangkeeper.io/woken-at`, the one change of a pod's metadata the
        controller's self-protection policy allows): the update puts a pod the scheduler's queue lost
        back in it (webhook/controller/act/wakeup.py)."""
        touch = {"metadata": {"annotations": {WAKE_ANNOTATION: now.isoformat()}}}
        for view in pods:
            try:
                self.api.merge_patch(PODS.path(view.namespace, view.name), touch)
                metrics.POD_WAKES.inc()
            except ApiError as error:
                metrics.API_ERRORS.labels("wake", str(error.status)).inc()

    def release(
        self,
        gang: GangView,
        resolved: Resolved,
        decision: Decision,
        free: dict[str, dict[str, int]],
        ports: dict[str, Counter[HostPort]],
        now: dt.datetime,
    ) -> None:
        """The release recorded, then its PATCHes sent, all on the pool without waiting: the pass goes on
        to the next gang while they land (`finish` waits for them at the pass's end). One gang's PATCHes
        after another's, each waiting for the last, held 50 gangs of 20 to half the API server's PATCH
        rate (bench/cluster.py `many` at 5,000 nodes: 24 against 47 per second for one gang of 1,000).
        The record's own round trips (a new gang's Gang created, then its status) on the pass's thread
        were a quarter of its time under a burst of arrivals (bench/replay.py --gangkeeper-profiles)."""
        by_name = {p.name: (p, raw) for p, raw in zip(gang.pods, gang.raw, strict=True)}
        patches: list[tuple[PodView, Obj]] = []
        records: dict[str, Release] = {}
        for pod_name, node in decision.release.items():
            view, raw = by_name[pod_name]
            adjust(free, {node: view.units}, -1)  # promised before any PATCH: no other gang takes it
            if view.shape.host_ports:
                ports[node] = Counter(ports.get(node) or {}) + Counter(view.shape.host_ports)
            # a pin would promise what placement did not check (pod affinity, spread): leave those to the
            # scheduler, with the planned node's capacity reserved until the pod binds or times out
            pin = None if decision.unmodelled else node
            patches.append((view, release_patch(view, pin, raw.get("spec") or {})))
            records[pod_name] = Release(view.uid, node, now)
        if not self.may_write():
            log.warning("not the leader any more: release abandoned", extra={"gang": gang.key})
            return
        if not self._sending:  # events wait while PATCHes are in flight (events.py, `deferred`)
            self._events_held.enter_context(self.reporter.recorder.deferred())
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="release")
        self._sending.append(self._pool.submit(self._record_then_send, gang, resolved, decision, records, now, patches))
        created = [p.created_at for p in gang.pods if p.created_at]
        if created:
            metrics.RELEASE_LATENCY.observe(max(0.0, (now - max(created)).total_seconds()))
        if decision.unmodelled:
            self.reporter.event(
                gang.raw[0],
                "Warning",
                "UnmodelledConstraints",
                f"gang {gang.name} released without a check of {', '.join(decision.unmodelled)}; "
                "the scheduler may still leave some pods pending",
            )

    def finish(self) -> list[tuple[str, Obj]]:
        """Wait for every release PATCH sent since the last call; returns the pods as the API server
        answered each (with the version it was made over), for the index to know them released before
        the watch says so. A PATCH that failed is left for the next pass, which sees the pod as it is."""
        sending, self._sending = self._sending, []
        written: list[tuple[str, Obj]] = []
        try:
            for version, future in self._patches_of(sending):
                try:
                    pod = future.result()
                except Exception:  # not an API answer (a broken connection): the next pass decides again
                    metrics.API_ERRORS.labels("patch", "0").inc()
                    log.warning("release patch failed", exc_info=True)
                    continue
                if pod is not None:
                    written.append((version, pod))
        finally:
            self._events_held.close()
        return written

    def _record_then_send(
        self,
        gang: GangView,
        resolved: Resolved,
        decision: Decision,
        records: Mapping[str, Release],
        now: dt.datetime,
        patches: list[tuple[PodView, Obj]],
    ) -> list[tuple[str, Future[Obj | None]]]:
        """On the pool: the record first (a pod released without one would hold no capacity in the next
        pass's books), then the gang's PATCHes, submitted side by side; returns them, each with the version
        of the pod it was made over."""
        if not self.may_write() or not self.reporter.record_releases(gang, resolved, decision, records, now):
            log.warning("release not recorded: abandoned until the next pass", extra={"gang": gang.key})
            return []
        pool = self._pool
        if pool is None:  # made before this was submitted to it
            return []
        return [(item[0].resource_version, pool.submit(self._send_release, item)) for item in patches]

    @staticmethod
    def _patches_of(
        sending: list[Future[list[tuple[str, Future[Obj | None]]]]],
    ) -> list[tuple[str, Future[Obj | None]]]:
        """Each gang's PATCHes, once its record is written (a record that raised sent none)."""
        patches: list[tuple[str, Future[Obj | None]]] = []
        for recorded in sending:
            try:
                patches += recorded.result()
            except Exception:  # not an API answer (a broken connection): the next pass decides again
                metrics.API_ERRORS.labels("patch", "0").inc()
                log.warning("release record failed", exc_info=True)
        return patches

    def _send_release(self, item: tuple[PodView, Obj]) -> Obj | None:
        view, patch = item
        if not self.may_write():  # the Lease was lost mid-batch: the next leader decides what is left
            return None
        try:
            pod = self.api.strategic_patched(PODS.path(view.namespace, view.name), patch)
        except ApiError as error:
            # 409: the pod changed since we read it; 404: it is gone. The next pass sees the truth.
            metrics.API_ERRORS.labels("patch", str(error.status)).inc()
            log.warning("release patch failed", extra={"pod": view.key, "status": error.status})
            return None
        return pod if isinstance(pod, dict) and pod.get("kind") == "Pod" else None
