"""Metrics on a full /tmp: in multiprocess mode every series lives in a memory-mapped file, and a page
first written after /tmp filled up raises SIGBUS and kills the worker. Every series is made when the
worker starts, so answering any review afterwards allocates nothing in those files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, os, sys
from pathlib import Path
directory = Path(sys.argv[1])
from webhook.admission import metrics
from webhook.admission.handler import Handler
from webhook.admission.resolve import BackendResolver
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from tests import builders as b

def allocated():
    return {f.name: (f.stat().st_size, f.stat().st_blocks) for f in directory.iterdir()}

metrics.prime()
before = allocated()
handler = Handler(build_resolver(WebhookSettings(backend="volcano")))
reviews = [b.review(b.job()), b.review(b.pod()), b.review(b.lws()), b.review(b.job(), operation="UPDATE", old=b.job())]
for endpoint in ("mutate", "validate", "nope"):
    for review in reviews:
        handler.handle(endpoint, json.dumps(review).encode())
    handler.handle(endpoint, b"{not json")
for code in (400, 408, 413, 429, 503, 418):
    metrics.count_refusal(code)
print(json.dumps({"before": before, "after": allocated()}))
"""


def test_no_metric_file_grows_after_the_worker_starts(tmp_path: Path) -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    sizes = json.loads(result.stdout.splitlines()[-1])
    assert sizes["before"] and sizes["before"] == sizes["after"]
