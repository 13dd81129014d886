"""The release workflow calls only make targets that exist here, so what a maintainer enables is what
runs on a developer's machine."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_every_make_target_the_release_workflow_calls_exists() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    runs = [step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step]
    called = {target for run in runs for target in re.findall(r"\bmake ([a-z][a-z-]*)", run)}
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
    assert called and called <= targets, called - targets
    assert any(".ci/run" in run for run in runs)  # the release is tested as CI tests it
