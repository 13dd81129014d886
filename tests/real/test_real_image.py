"""gangkeeper on the real tier run from the image users install: the webhook and the controller start
from hack/image.sh's image under runc (a real OCI runtime), with the manifests' securityContext
(read-only root, UID 65532, no capabilities, /tmp an emptyDir, the ConfigMap and service-account mounts),
in the pod sandboxes the tier gives every pod; then a gang is admitted and released through them.

Every assertion reads what the cluster or the runtime reports: runc's state of each container, the
pods' nodes and phases."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import unpack_image
from tests.real.test_real_seeds import assert_started_together
from tests.realcluster import workloads
from tests.realcluster.stack import Stack, gated, running, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def image_stack(image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, float]]:
    """A cluster of its own whose gangkeeper pods run from the image; and how long it took from the
    control plane's start to both of gangkeeper's Deployments available with ready endpoints."""
    from tests.realcluster.controlplane import ControlPlane, versions

    bundle = unpack_image(image, tmp_path_factory.mktemp("image-bundle") / "bundle")
    plane = ControlPlane(tmp_path_factory.mktemp("image-cluster"), kubernetes_version=versions()["K8S_DEFAULT"])
    reason = plane.missing()
    if reason:
        pytest.skip(reason)
    started = time.monotonic()
    with Stack(plane, overlay="gate", image=bundle).running() as running_stack:
        yield running_stack, time.monotonic() - started


def runc_state(container: str) -> dict[str, object]:
    return dict(json.loads(subprocess.run(["runc", "state", container], capture_output=True, text=True).stdout))


def test_the_webhook_and_controller_run_from_the_image_and_release_a_gang_whole(
    image_stack: tuple[Stack, float],
) -> None:
    stack, deployed_in = image_stack
    sandboxes = [s for node in stack.system for s in node.sandboxes.values()]
    names = sorted(s.name for s in sandboxes)
    assert any(n.startswith("gangkeeper-webhook") for n in names) and any(
        n.startswith("gangkeeper-controller") for n in names
    ), names
    for sandbox in sandboxes:
        state = runc_state(sandbox.runc_id)
        assert state.get("status") == "running", (sandbox.name, state, sandbox.logs()[-2000:])
        assert str(state.get("bundle", "")).startswith(str(sandbox.outside)), state
        # the process runc started is the image's interpreter, not this checkout's
        pid = int(str(state["pid"]))
        assert Path(f"/proc/{pid}/root/opt/gangkeeper/webhook/__init__.py").exists()
        assert Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0] == "65532"
    print(f"image: control plane up and gangkeeper available from the image in {deployed_in:.1f}s")

    stack.replace_workers(3)
    namespace = stack.namespace("from-image", "gate")
    stack.plane.apply(workloads.job("image-gang", namespace, 4, "100m"))
    pods = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "4 pods Running from the image", 120
    )
    assert_started_together(pods, 4)
    assert not gated(pods)
    # admitted by the webhook in the image (its stamp), released by the controller in the image (no gate)
    assert {p["metadata"]["labels"].get("gangkeeper.io/group") for p in pods} == {"job-image-gang"}
