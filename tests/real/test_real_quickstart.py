"""The README's quick start, run as it stands: its fenced block under "Quick start" is executed command
by command in one bash with job control (as a user's terminal), from `make cluster` to `kill %1`."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.realcluster.controlplane import ControlPlane, versions

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]


def quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README: no sh block under Quick start"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_quick_start_runs_command_by_command(tmp_path: Path) -> None:
    reason = ControlPlane(tmp_path, kubernetes_version=versions()["K8S_DEFAULT"]).missing()
    if reason:
        pytest.skip(reason)
    commands = quick_start()
    assert commands[0].startswith("make cluster") and commands[-1].startswith("kill %1")
    workdir = Path(re.search(r"--workdir (\S+?)\"", commands[0]).group(1))  # type: ignore[union-attr]
    # each command echoed, then its exit status checked: the script stops at the first that fails
    script = ["set -m"]  # job control: `kill %1` stops the cluster's whole process group, as in a terminal
    for number, command in enumerate(commands, 1):
        script += [f"echo '+ [{number}] {command.replace(chr(39), '')}'", command]
        if not command.rstrip().endswith("&") and not command.startswith("kill %1"):
            script.append(f"status=$?; [ $status -eq 0 ] || {{ echo 'command {number} failed'; exit $status; }}")
    # an env file left by a run killed hard would end step 2's wait before this cluster is up
    (workdir / "env").unlink(missing_ok=True)
    env = {**os.environ, "GK_SANDBOX_OCTET": str(200 + (os.getpid() + 25) % 50)}  # not this session's subnets
    try:
        result = subprocess.run(
            ["bash", "-c", "\n".join(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
        )
    finally:
        # a block that stopped before its `kill %1` leaves make (still building, or running the cluster)
        # behind: stopped as `kill %1` would, and its cluster with it
        for command in (f"make cluster ARGS=--workdir {workdir}", f"up.py --workdir {workdir}"):
            subprocess.run(["pkill", "-TERM", "-f", command], check=False)
        log = Path("/tmp/gangkeeper-demo.log")
        cluster_log = log.read_text() if log.exists() else "(no log)"
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{output}\n--- make cluster ---\n{cluster_log[-3000:]}"
    assert f"+ [{len(commands)}]" in output  # every command ran
    table = output.split("kubectl get gangs -n gang-demo", 1)[1]
    assert re.search(r"job-all-fit\s+gate\s+Running\s+4\s+4\s+4", table), output
    assert output.count(" Running ") >= 4 + 1  # the four pods, and the Gang
    assert "state: Running" in output  # kubectl gangkeeper explain
    assert "up in" in cluster_log and not (workdir / "env").exists()  # it came up, and went
    assert "Traceback" not in cluster_log, cluster_log[-3000:]  # and stopped in order, quietly
