"""The kubectl plugin's krew manifest, held to what krew checks before it installs (sigs.k8s.io/krew
pkg/index/validation/validate.go: name, semver version with a leading v, a selector and an https uri
with a sha256 per platform, a bin among the files), and installed as krew does it from a local archive
(`kubectl krew install --manifest --archive`: the sha256 checked, `files` copied, `bin` run). krew
itself cannot run here: the Go module proxy refuses sigs.k8s.io/krew (403), so this follows its rules."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "plugins" / "krew" / "gangkeeper.yaml"


def archive(tmp_path: Path) -> Path:
    subprocess.run(
        ["bash", str(ROOT / "hack" / "plugin-archive.sh"), "--check"],
        env={**os.environ, "GK_BUILD_DIR": str(tmp_path)},
        check=True,
        capture_output=True,
        text=True,
    )
    return tmp_path / "kubectl-gangkeeper.tar.gz"


def test_the_krew_manifest_has_what_krew_validates() -> None:
    plugin = yaml.safe_load(MANIFEST.read_text())
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2" and plugin["kind"] == "Plugin"
    assert plugin["metadata"]["name"] == MANIFEST.stem  # the file is named after the plugin
    spec = plugin["spec"]
    assert re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", spec["version"])
    assert spec["shortDescription"] and len(spec["shortDescription"]) <= 50 and spec["homepage"].startswith("https://")
    for platform in spec["platforms"]:
        assert platform["selector"]["matchExpressions"] or platform["selector"]["matchLabels"]
        assert platform["uri"].startswith("https://") and platform["uri"].endswith(".tar.gz")
        assert spec["version"] in platform["uri"]  # the release the version names
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert any(Path(f["from"]).name == platform["bin"] for f in platform["files"])


def test_the_archive_is_reproducible_and_its_sha256_is_the_manifests(tmp_path: Path) -> None:
    first = archive(tmp_path / "a").read_bytes()
    second = archive(tmp_path / "b").read_bytes()
    assert first == second  # byte for byte: the sha256 in the manifest names one archive
    assert yaml.safe_load(MANIFEST.read_text())["spec"]["platforms"][0]["sha256"] == hashlib.sha256(first).hexdigest()


def test_installed_as_krew_does_from_the_archive_it_runs(tmp_path: Path) -> None:
    platform = yaml.safe_load(MANIFEST.read_text())["spec"]["platforms"][0]
    packed = archive(tmp_path / "build")
    assert hashlib.sha256(packed.read_bytes()).hexdigest() == platform["sha256"]
    unpacked, installed = tmp_path / "unpacked", tmp_path / "store" / "gangkeeper" / "v0.1.0"
    with tarfile.open(packed) as tar:
        tar.extractall(unpacked, filter="data")
    installed.mkdir(parents=True)
    for entry in platform["files"]:
        for found in unpacked.glob(entry["from"]):
            shutil.copy2(found, installed / entry["to"] / found.name)
    bin_path = installed / platform["bin"]
    assert os.access(bin_path, os.X_OK)  # the mode survived the archive
    shown = subprocess.run([str(bin_path), "--help"], capture_output=True, text=True, check=True)
    assert "kubectl gangkeeper get" in shown.stdout and "explain NAMESPACE/GANG" in shown.stdout
