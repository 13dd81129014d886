"""Waking a coscheduling gang its scheduler would not retry (webhook/controller/act/wakeup.py): a gang
waiting whole, and a step handed over to a running gang (run/steer.py) that Coscheduling refused while
its gates came off one by one ("cannot proceed due to gated pods in the same PodGroup", seen on the real
tier: tests/real/test_real_steps.py)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from tests.unit.test_decide import cluster, member
from webhook.controller.act.wakeup import waiting_gang_fits


def snapshot(*free_cpus: int) -> Any:
    nodes, free = cluster(*free_cpus)
    from webhook.controller.decide.eligibility import Eligibility

    return SimpleNamespace(nodes=nodes, free=free, ports={}, eligibility=Eligibility(nodes))


def refused(name: str) -> Any:
    return replace(member(name), gated=False, unschedulable=True)


def bound(name: str) -> Any:
    return replace(member(name), gated=False, node_name="n0")


def test_a_gang_waiting_whole_is_woken_once_it_fits_whole() -> None:
    pods = [refused(f"p{i}") for i in range(4)]
    assert waiting_gang_fits(pods, 4, snapshot(4))
    assert not waiting_gang_fits(pods, 4, snapshot(3))
    assert not waiting_gang_fits(pods[:3], 4, snapshot(4))  # not every member refused yet


def test_a_step_refused_whole_beside_the_running_members_is_woken_once_it_fits() -> None:
    running = [bound("p0"), bound("p1")]
    step = [refused("p2"), refused("p3")]
    assert waiting_gang_fits([*running, *step], 4, snapshot(0, 2))
    assert not waiting_gang_fits([*running, *step], 4, snapshot(0, 1))  # room for half of it
    # a step still being handed over (a pod gated, or one not refused yet) is left to its scheduler
    assert not waiting_gang_fits([*running, step[0], replace(step[1], gated=True)], 4, snapshot(0, 2))
    assert not waiting_gang_fits([*running, step[0], replace(step[1], unschedulable=False)], 4, snapshot(0, 2))
