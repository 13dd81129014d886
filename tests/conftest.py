from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import requests

from tests.apiserver import Store, TestApiServer
from tests.realcluster.controlplane import free_port
from tests.workers import worker_number
from webhook.kube import Api, client_from

if TYPE_CHECKING:
    from tests.realcluster.stack import Stack


@dataclass
class Server:
    url: str
    ca: str
    process: subprocess.Popen[bytes]
    cert_dir: Path
    log: Path

    def post(self, path: str, body: bytes, content_type: str = "application/json") -> requests.Response:
        return requests.post(
            self.url + path, data=body, headers={"Content-Type": content_type}, verify=self.ca, timeout=10
        )

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, verify=self.ca, timeout=10)


SHARED = Path(__file__).resolve().parents[2] / "shared"


def pytest_configure(config: pytest.Config) -> None:
    """Many tests read the project's shared directory (upstream CRDs, examples, seeds): without it they
    would fail one by one with no word of why, so the run stops at once with one line."""
    if not (SHARED / "crds").is_dir() or not (SHARED / "examples").is_dir():
        raise pytest.UsageError(f"the tests need the project's shared/ directory beside the clone, at {SHARED}")


# what `hack/cluster/build.sh rest` builds beside the tests (hack/test.sh), in its order ("newest": the
# newest Kubernetes); tests/unit/test_build_order.py holds the two the same
REST_BUILD_ORDER = (
    "lws",
    "jobset",
    "scheduler-plugins",
    "newest",
    "volcano",
    "kuberay",
    "training-operator",
    "karpenter",
    "kueue",
)
# real-tier modules that need the rest of the build beyond LWS and JobSet, and the last of it they need:
# they run after the others, in the order the build makes what they need, so that on a fresh machine no
# worker waits for the build while another module could run (cold CI at c9fba8a: one worker waited
# 1,747 s for Kueue in test_real_kueue_devices' setup, in the first stage)
NEED_THE_REST = {
    "test_real_coscheduling": "scheduler-plugins",
    "test_real_newest": "newest",
    "test_real_upgrade": "newest",
    "test_real_supervision": "volcano",  # and scheduler-plugins
    "test_real_volcano": "training-operator",  # and Volcano, KubeRay, LWS
    "test_real_groups": "kuberay",  # and scheduler-plugins
    "test_real_autoscale": "karpenter",  # and scheduler-plugins, Volcano
    "test_real_kueue": "kueue",
    "test_real_multikueue": "kueue",
    "test_real_kueue_devices": "kueue",
}
# real-tier modules whose faults race the controller's clocks (a release patch answered 429 or never, its
# node taken meanwhile): after the modules above, so after the build beside them is done (stop 84's cold
# CI: two of them, run while Volcano and Karpenter were compiled on both cores, missed their deadlines;
# alone, or under nice-19 CPU and disk load, they passed)
AFTER_THE_BUILD = frozenset({"test_real_faults"})
# the README's quick start runs `make cluster`, whose `build.sh default` waits for the build's lock: last
# of all (found on a fresh machine: it waited out its 900 s for the lock while the rest was built)
NEED_THE_WHOLE_BUILD = frozenset({"test_real_quickstart"})


@pytest.hookimpl(trylast=True)  # after tests/e2e/conftest.py marks its tests as the cluster tier's
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The unit tests first, then the real tier, the modules that need the rest of the build last (and the
    quick start, which builds everything itself, after them): on a fresh machine the build runs beside
    them (hack/test.sh) and is done by the time they start."""

    def stage(item: pytest.Item) -> tuple[int, int]:
        module = Path(str(item.fspath)).stem
        if item.get_closest_marker("cluster") is None:
            return 0, 0
        if module in NEED_THE_WHOLE_BUILD:
            return 4, 0
        if module in AFTER_THE_BUILD:
            return 3, 0
        needs = NEED_THE_REST.get(module)
        return (2, REST_BUILD_ORDER.index(needs)) if needs is not None else (1, 0)

    items.sort(key=stage)


def start_server(tmp: Path, *args: str) -> Server:
    port = free_port()
    cert_dir = tmp / "certs"
    log = tmp / "server.log"
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "webhook",
            "serve",
            "--port",
            str(port),
            "--cert-dir",
            str(cert_dir),
            "--workers",
            "1",
            *args,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
    )
    server = Server(f"https://127.0.0.1:{port}", str(cert_dir / "ca.crt"), process, cert_dir, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gangkeeper serve exited: {log.read_text()}")
        try:
            if server.get("/readyz").status_code == 200:
                return server
        except (requests.ConnectionError, OSError):
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"gangkeeper serve did not become ready: {log.read_text()}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("serve"), "--backend", "volcano")
    yield running
    stop_server(running)


@pytest.fixture
def apiserver() -> Iterator[TestApiServer]:
    """A fresh test API server (tests/apiserver.py) for one test."""
    with TestApiServer() as running:
        yield running


@pytest.fixture
def api(apiserver: TestApiServer) -> Api:
    return Api(client_from(server=apiserver.url))


@pytest.fixture
def store(apiserver: TestApiServer) -> Store:
    """The objects of the test API server, read and written directly (controllers the tests simulate)."""
    return apiserver.store


@pytest.fixture(autouse=True)
def no_gang_left_partly_bound(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every real-tier test: no gang, of any mechanism, was seen partly bound for longer than
    gangkeeper lets it (tests/realcluster/partial.py watches the whole cluster while the tier runs)."""
    yield
    from tests.realcluster.stack import Stack

    for name in request.fixturenames:
        if name in ("request", "no_gang_left_partly_bound"):
            continue
        try:
            value = request.getfixturevalue(name)
        except Exception:  # a fixture that failed or was skipped: nothing to watch
            continue
        if isinstance(value, Stack) and value.watch is not None:
            seen = value.watch.take()
            assert not seen, f"gangs left partly bound: {seen}"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The real cluster (tests/realcluster/), started once for every test of the tier that asks for it."""
    from tests.realcluster import operators
    from tests.realcluster.controlplane import ControlPlane, versions
    from tests.realcluster.stack import Stack

    version = os.environ.get("GK_K8S_VERSION") or versions()["K8S_DEFAULT"]
    plane = ControlPlane(tmp_path_factory.mktemp("cluster"), kubernetes_version=version)
    reason = plane.missing()
    if reason:
        pytest.skip(reason)
    with Stack(plane, overlay="gate").running() as running_stack:
        for operator in (operators.lws(), operators.jobset()):
            if operator.missing():
                pytest.skip(operator.missing())
            operator.install(plane)
        yield running_stack


@pytest.fixture(scope="module")
def vc(stack: Stack) -> Iterator[Stack]:
    """Volcano (its scheduler, controller manager and admission, real) beside the stack, for one module."""
    from tests.realcluster import volcano

    reason = volcano.missing()
    if reason:
        pytest.skip(reason)
    processes = volcano.start(stack.plane)
    yield stack
    volcano.stop(stack.plane, processes)


@pytest.fixture(scope="module")
def cosched(stack: Stack) -> Iterator[Stack]:
    """scheduler-plugins' Coscheduling as a second scheduler beside the stack, for one module."""
    from tests.realcluster import coscheduling

    reason = coscheduling.missing()
    if reason:
        pytest.skip(reason)
    process = coscheduling.start(stack.plane)
    yield stack
    process.stop()


IMAGE_TOOLS = ("mmdebstrap", "umoci", "skopeo", "runc")


def image_tools_missing() -> str | None:
    if os.geteuid() != 0:
        return "the image is built as root (mmdebstrap --mode=root) and run by runc"
    absent = [tool for tool in IMAGE_TOOLS if shutil.which(tool) is None]
    return f"{', '.join(absent)} not installed (apt-get install mmdebstrap umoci skopeo runc)" if absent else None


def build_image(out: Path) -> str:
    """hack/image.sh (`make image` without Docker) into `out`: the OCI layout and archive; its digest."""
    root = Path(__file__).resolve().parents[1]
    subprocess.run(["bash", str(root / "hack" / "image.sh"), str(out)], check=True, cwd=root, capture_output=True)
    return (out / "digest").read_text().strip()


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The image users run, built once per session (tests/real/test_image.py checks it, the real tier runs it)."""
    reason = image_tools_missing()
    if reason:
        pytest.skip(reason)
    # built once for the whole run: under xdist the workers share their base directory's parent, and the
    # first to ask builds while the other waits (a minute and a half of CPU on two cores, not twice)
    shared = tmp_path_factory.getbasetemp()
    shared = shared.parent if worker_number() is not None else shared
    out = shared / "image"
    with (shared / "image.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "digest").is_file():
            partial = shared / f"image-{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            build_image(partial)
            partial.rename(out)
    yield out


def unpack_image(image: Path, where: Path) -> Path:
    """The image as an OCI runtime bundle (config.json and rootfs/), as a node's runtime unpacks it."""
    subprocess.run(["umoci", "unpack", "--image", f"{image}/oci:0.1.0", str(where)], check=True, capture_output=True)
    return where
