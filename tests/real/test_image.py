"""The image users run, built here without Docker (hack/image.sh: mmdebstrap, umoci, skopeo) and run by a
real OCI runtime (runc) as the chart runs it: read-only root, UID 65532, /tmp an emptyDir. Its contents
and metadata are checked against the Dockerfile and requirements.lock, and two builds must give one digest."""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import build_image

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster  # the real tier: root, Debian's tools, the network to deb.debian.org


@pytest.fixture(scope="module")
def bundle(image: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("bundle") / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{image}/oci:0.1.0", str(where)], check=True, capture_output=True)
    return where


def dockerfile() -> dict[str, Any]:
    """The runtime stage's USER, ENTRYPOINT, CMD and ENV, as the Dockerfile says them."""
    text = (ROOT / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM ") :]
    found: dict[str, Any] = {"env": {}}
    for line in final.splitlines():
        if line.startswith(("ENTRYPOINT ", "CMD ")):
            word, _, value = line.partition(" ")
            found[word.lower()] = json.loads(value)
        elif line.startswith("USER "):
            found["user"] = line.split()[1]
        elif line.startswith("ENV "):
            found["env"].update(dict(pair.split("=", 1) for pair in line.split()[1:]))
    return found


def test_the_image_has_the_dockerfiles_user_entrypoint_and_env(image: Path) -> None:
    inspected = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--config", f"oci:{image}/oci:0.1.0"], check=True, capture_output=True, text=True
        ).stdout
    )
    config, wanted = inspected["config"], dockerfile()
    assert config["User"] == wanted["user"] == "65532:65532"
    assert config["Entrypoint"] == wanted["entrypoint"] and config["Cmd"] == wanted["cmd"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert {k: env.get(k) for k in wanted["env"]} == wanted["env"]
    assert set(config["ExposedPorts"]) == {"8443/tcp", "8080/tcp"}
    # the docker-archive beside the layout loads as the chart's image name
    manifest = subprocess.run(
        ["tar", "-xOf", str(image / "gangkeeper.tar"), "manifest.json"], check=True, capture_output=True, text=True
    ).stdout
    assert json.loads(manifest)[0]["RepoTags"] == ["ghcr.io/gangkeeper/gangkeeper:0.1.0"]


def test_the_image_holds_the_locked_dependencies_and_no_shell_or_package_manager(bundle: Path) -> None:
    rootfs = bundle / "rootfs"
    locked = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^ \\\n]+)", (ROOT / "requirements.lock").read_text(), re.M))
    installed = {}
    for dist in (rootfs / "opt" / "gangkeeper").glob("*.dist-info"):
        name, _, version = dist.name[: -len(".dist-info")].rpartition("-")
        installed[name.lower().replace("_", "-")] = version
    normal = {name.lower().replace("_", "-"): version for name, version in locked.items()}
    assert {name: installed.get(name) for name in normal} == normal
    assert installed.get("gangkeeper") == "0.1.0"
    assert (rootfs / "opt" / "gangkeeper" / "webhook" / "__main__.py").is_file()
    for absent in ("usr/bin/sh", "usr/bin/bash", "usr/bin/dash", "usr/bin/dpkg", "usr/bin/apt", "usr/bin/apt-get"):
        assert not (rootfs / absent).exists() and not (rootfs / absent).is_symlink(), absent
    assert not (rootfs / "var" / "lib" / "dpkg").exists()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_config(bundle: Path, args: list[str], tmp: Path) -> None:
    """The chart's securityContext in runc's words: read-only root, UID 65532, no capabilities, an
    emptyDir at /tmp; the host's network (runc's own would have no loopback peer for the probe)."""
    config = json.loads((bundle / "config.json").read_text())
    config["process"]["args"] = args
    config["process"]["terminal"] = False
    config["process"]["user"] = {"uid": 65532, "gid": 65532}
    config["process"]["capabilities"] = {
        k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")
    }
    config["process"]["noNewPrivileges"] = True
    config["root"]["readonly"] = True
    config["mounts"].append({"destination": "/tmp", "type": "bind", "source": str(tmp), "options": ["rbind", "rw"]})
    config["linux"]["namespaces"] = [n for n in config["linux"]["namespaces"] if n["type"] != "network"]
    (bundle / "config.json").write_text(json.dumps(config))


def test_the_webhook_serves_from_the_image_under_the_charts_security_context(bundle: Path, tmp_path: Path) -> None:
    tmp = tmp_path / "emptydir"
    tmp.mkdir()
    os.chown(tmp, 65532, 65532)
    port = _free_port()
    run_config(
        bundle,
        [
            "python3",
            "-m",
            "webhook",
            "serve",
            "--host=127.0.0.1",
            f"--port={port}",
            "--cert-dir=/tmp/certs",
            "--workers=1",
        ],
        tmp,
    )
    name = f"gk-image-{port}"
    started = time.monotonic()
    process = subprocess.Popen(
        ["runc", "run", "--bundle", str(bundle), name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        answer = None
        while time.monotonic() - started < 30 and answer is None:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2) as r:
                    answer = json.loads(r.read())
            except OSError:
                time.sleep(0.2)
        seconds = time.monotonic() - started
        assert answer == {"status": "ok"}, (
            process.stdout.read() if process.stdout and process.poll() is not None else ""
        )
        print(f"image: healthz answered {seconds:.1f}s after runc run")
        assert (tmp / "certs" / "tls.key").stat().st_uid == 65532  # it wrote only where the chart lets it
    finally:
        subprocess.run(["runc", "kill", name, "KILL"], capture_output=True)
        process.wait(timeout=10)
        subprocess.run(["runc", "delete", "--force", name], capture_output=True)


def test_two_builds_of_the_same_inputs_have_one_digest(image: Path, tmp_path: Path) -> None:
    assert build_image(tmp_path / "again") == (image / "digest").read_text().strip()
