"""The Gang objects on the real control plane: the CRD the manifests install, the controller writing
them through the real API server's validation, `kubectl get gangs` as a user sees it, the built-in
roles letting tenants read them and nothing more, and the garbage collector taking a Gang with its
workload."""

from __future__ import annotations

from typing import Any

import pytest

from tests.realcluster import workloads
from tests.realcluster.stack import Stack, wait_until

pytestmark = pytest.mark.cluster


def gang_state(stack: Stack, namespace: str, name: str) -> str:
    gang = stack.plane.get("gang", name, namespace=namespace)
    return str(((gang or {}).get("status") or {}).get("state", ""))


def row(table: str, name: str) -> list[str]:
    return next(line.split() for line in table.splitlines() if f" {name} " in f" {line} ")


def test_kubectl_get_gangs_shows_every_gang_and_tenants_only_read_them(stack: Stack) -> None:
    stack.replace_workers(1, cpu="8")
    namespace = stack.namespace("gangs-view", "gate")
    stack.plane.apply(workloads.job("fits", namespace, 2, "1", pod_annotations={"gangkeeper.test/run-for": "600s"}))
    stack.plane.apply(workloads.job("huge", namespace, 3, "64"))  # larger than any node: never fits
    stack.plane.apply(workloads.job("done", namespace, 2, "1", pod_annotations={"gangkeeper.test/run-for": "2s"}))
    try:
        wait_until(
            lambda: (
                gang_state(stack, namespace, "job-fits") == "Running"
                and gang_state(stack, namespace, "job-huge") == "NeverFits"
                and gang_state(stack, namespace, "job-done") == "Finished"  # its pods Succeeded, still there
            ),
            "the three gangs' states in their Gang objects",
            90,
        )
    except AssertionError as error:
        shown = stack.plane.kubectl("get", "gangs", "-n", namespace, "-o", "yaml", check=False)
        raise AssertionError(f"{error}\n{shown.stdout}{shown.stderr}\n{stack.describe(namespace)}") from None
    table = stack.plane.kubectl("get", "gangs", "-A").stdout
    header = table.splitlines()[0].split()
    assert header[:8] == ["NAMESPACE", "NAME", "BACKEND", "STATE", "MINMEMBER", "PRESENT", "RUNNING", "QUEUE"], table
    assert row(table, "job-fits")[2:7] == ["gate", "Running", "2", "2", "2"], table
    assert row(table, "job-huge")[2:7] == ["gate", "NeverFits", "3", "3", "0"], table
    # a Job's gang is min(parallelism, completions not yet succeeded) (gangs/batch.py): 2, or 1 once the Job
    # counts a pod succeeded before the Gang was last written (CI saw both)
    done = row(table, "job-done")
    assert done[2:4] == ["gate", "Finished"] and done[4] in ("1", "2") and done[5:7] == ["0", "0"], table
    described = stack.plane.kubectl("describe", "gang", "job-huge", "-n", namespace).stdout
    assert "even if empty" in described and "Released" in described, described

    gang: dict[str, Any] = stack.plane.get("gang", "job-fits", namespace=namespace)
    job = stack.plane.get("job", "fits", namespace=namespace)
    owner = gang["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "fits", job["metadata"]["uid"])

    # a tenant with the namespace's edit role reads gangs and cannot write them
    stack.plane.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "alice-edit", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
        }
    )

    def can(verb: str, resource: str) -> bool:
        answer = stack.plane.kubectl("auth", "can-i", verb, resource, "-n", namespace, "--as", "alice", check=False)
        return answer.stdout.strip() == "yes"

    wait_until(lambda: can("list", "gangs.gangkeeper.io"), "the aggregated read role", 30)
    assert can("get", "gangs.gangkeeper.io") and can("watch", "gangs.gangkeeper.io")
    assert not can("patch", "gangs.gangkeeper.io") and not can("delete", "gangs.gangkeeper.io")
    forged = stack.plane.kubectl(
        "patch",
        "gang",
        "job-huge",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"attempts":0,"notBefore":null}}',
        "--as",
        "alice",
        check=False,
    )
    assert forged.returncode != 0 and "forbidden" in forged.stderr, forged.stderr

    # the Gang goes with its workload: the garbage collector follows the owner reference
    stack.plane.kubectl("delete", "job", "fits", "-n", namespace, "--wait=false")
    wait_until(lambda: stack.plane.get("gang", "job-fits", namespace=namespace) is None, "the Gang collected", 60)
