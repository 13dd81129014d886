"""Admission never gates a pod when no controller could lift the gate, and warns while it is stale."""

from __future__ import annotations

from tests import builders as b
from tests.apiserver import TestApiServer
from webhook.admission.controller_lease import LeaseWatch
from webhook.admission.decide import admit
from webhook.backends import make
from webhook.controller.run.leader import LeaderElector
from webhook.kube import Api

JOB_POD = b.pod(labels={"batch.kubernetes.io/job-name": "train"})


class Ticker:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_no_controller_ever_means_no_gate(api: Api) -> None:
    health = LeaseWatch(api, "gangkeeper-system").poll_once()
    assert health is not None and health.state == "absent"
    outcome = admit(JOB_POD, "CREATE", make("gate"), "team-a", controller=health)
    assert not outcome.allowed and outcome.code == 403
    assert "no gangkeeper controller has run in this cluster" in outcome.message
    assert "gangkeeper.io/backend" in outcome.message  # and what to do about it
    # other backends do not depend on gangkeeper's controller to start pods
    assert admit(JOB_POD, "CREATE", make("volcano"), "team-a", controller=health).allowed


def test_a_running_controller_lets_gating_through_and_a_stale_one_warns(api: Api, apiserver: TestApiServer) -> None:
    ticker = Ticker()
    elector = LeaderElector(api, "gangkeeper-system", "gangkeeper-controller", "a")
    assert elector.try_acquire_or_renew()
    watch = LeaseWatch(api, "gangkeeper-system", stale_after=60, monotonic=ticker)
    health = watch.poll_once()
    assert health is not None and health.state == "running"
    outcome = admit(JOB_POD, "CREATE", make("gate"), "team-a", controller=health)
    assert outcome.allowed and outcome.mutated is not None and not outcome.warnings
    ticker.now += 61  # the renewTime has not moved for a minute, as seen from here
    health = watch.poll_once()
    assert health is not None and health.state == "stale"
    outcome = admit(JOB_POD, "CREATE", make("gate"), "team-a", controller=health)
    assert outcome.allowed and any("has not renewed its Lease for 61s" in w for w in outcome.warnings)
    assert elector.try_acquire_or_renew()  # it renews: running again
    health = watch.poll_once()
    assert health is not None and health.state == "running"
