"""`hack/cluster/up.py` stops once: `kill %1` on `make cluster &` delivers SIGTERM twice (to the process
group, then forwarded by make), and the second must not cut the removal of the cluster short."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    f"""
    import importlib.util, time
    spec = importlib.util.spec_from_file_location("up", {str(ROOT / "hack" / "cluster" / "up.py")!r})
    up = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(up)
    up.stop_on_the_first_signal()
    try:  # as up.py: what the finally removes is made inside the try
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
    finally:
        print("removing", flush=True)
        time.sleep(1)  # the removal, slow enough for the second signal to land inside it
        print("removed", flush=True)
    """
)


@pytest.mark.parametrize("first", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_second_signal_during_the_removal_does_not_cut_it_short(first: signal.Signals) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(first)  # kill %1, Ctrl-C, or the terminal closed
    assert child.stdout.readline().strip() == "removing"
    child.send_signal(signal.SIGTERM)  # make's forwarded copy
    child.send_signal(signal.SIGINT)  # and an impatient Ctrl-C
    rest, _ = child.communicate(timeout=30)
    assert rest.split() == ["removed"] and child.returncode == 0
