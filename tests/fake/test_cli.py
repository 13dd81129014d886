"""`gangkeeper mutate`, offline: YAML in, YAML out; denials on stderr with exit code 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.schemas import EXAMPLES, validate

JOB_STREAM = """
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 4
  template:
    spec:
      restartPolicy: Never
      containers: [{name: t, image: busybox, resources: {requests: {cpu: "1", memory: 1Gi}}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
"""


def gangkeeper(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def test_mutate_stdin_prints_objects_in_order_then_gang_objects() -> None:
    result = gangkeeper("mutate", "-f", "-", "--backend", "volcano", stdin=JOB_STREAM)
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["Job", "ConfigMap", "PodGroup"]
    for doc in docs:
        validate(doc)
    assert docs[2]["spec"] == {"minMember": 4, "minResources": {"cpu": "4", "memory": "4Gi"}}
    assert docs[2]["metadata"]["namespace"] == "default"


def test_mutate_diff_shows_only_what_changes() -> None:
    result = gangkeeper("mutate", "-f", "-", "--diff", "--backend", "gate", stdin=JOB_STREAM)
    assert result.returncode == 0
    added = [line for line in result.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert "+        gangkeeper.io/group: job-train" in added
    assert not [line for line in added if "schedulingGates" in line]  # the gate goes on pods, never templates
    assert not [line for line in result.stdout.splitlines() if line.startswith("-") and not line.startswith("---")]


def test_mutate_native_versions_from_a_file() -> None:
    for version, field in (("1.35", "workloadRef"), ("1.36", "schedulingGroup"), ("1.37", "schedulingGroup")):
        result = gangkeeper(
            "mutate", "-f", str(EXAMPLES / "lws/lws.yaml"), "--backend", "native", "--kubernetes-version", version
        )
        assert result.returncode == 0, result.stderr
        docs = list(yaml.safe_load_all(result.stdout))
        for doc in docs:
            validate(doc, version)
        assert field not in result.stdout  # LWS templates are CRD copies: the link goes on each pod


def test_denied_object_is_reported_like_the_webhook_and_exit_code_is_1() -> None:
    bad = JOB_STREAM.replace(
        "metadata: {name: train}", "metadata: {name: train, annotations: {gangkeeper.io/min-member: '9'}}"
    )
    result = gangkeeper("mutate", "-f", "-", stdin=bad)
    assert result.returncode == 1
    assert (
        'denied the request: Job "train" is invalid: metadata.annotations[gangkeeper.io/min-member]: '
        'Invalid value: "9": must be between 1 and 4, the Job\'s parallelism'
    ) in result.stderr
    assert [d["kind"] for d in yaml.safe_load_all(result.stdout)] == ["ConfigMap"]


def test_invalid_yaml_is_a_clear_error() -> None:
    result = gangkeeper("mutate", "-f", "-", stdin="a: [b\n")
    assert result.returncode == 2 and "not valid YAML" in result.stderr


def test_mutate_defaults_to_auto_which_offline_is_the_gate() -> None:
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: train-abc\n  labels: {batch.kubernetes.io/job-name: train}\n"
        "  ownerReferences: [{apiVersion: batch/v1, kind: Job, name: train, uid: u1, controller: true}]\n"
        "spec:\n  containers: [{name: t, image: busybox}]\n"
    )
    result = gangkeeper("mutate", "-f", "-", stdin=pod)
    assert result.returncode == 0, result.stderr
    admitted = next(yaml.safe_load_all(result.stdout))
    assert admitted["spec"]["schedulingGates"] == [{"name": "gangkeeper.io/gang-gate"}]


def test_a_namespace_in_the_stream_chooses_the_backend_of_its_objects() -> None:
    stream = (
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-v\n"
        "  labels: {gangkeeper.io/enabled: 'true', gangkeeper.io/backend: volcano}\n"
        "---\n" + JOB_STREAM.replace("metadata: {name: train}", "metadata: {name: train, namespace: team-v}")
    )
    result = gangkeeper("mutate", "-f", "-", "--backend", "gate", stdin=stream)
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["Namespace", "Job", "ConfigMap", "PodGroup"]
    assert docs[1]["spec"]["template"]["spec"]["schedulerName"] == "volcano"


def test_objects_of_a_namespace_in_the_stream_that_is_not_opted_in_are_left_with_a_warning() -> None:
    stream = (
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-v\n  labels: {gangkeeper.io/enable: 'true'}\n"
        "---\n" + JOB_STREAM.replace("metadata: {name: train}", "metadata: {name: train, namespace: team-v}")
    )
    result = gangkeeper("mutate", "-f", "-", "--backend", "volcano", stdin=stream)
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in docs] == ["Namespace", "Job", "ConfigMap"]
    assert "schedulerName" not in docs[1]["spec"]["template"]["spec"]
    assert "did you mean 'gangkeeper.io/enabled'?" in result.stderr
    assert "namespace team-v is not opted in (gangkeeper.io/enabled=true)" in result.stderr


def test_a_missing_file_is_one_line_not_a_traceback() -> None:
    result = gangkeeper("mutate", "-f", "no-such-job.yaml")
    assert result.returncode == 2
    assert result.stderr.strip() == "gangkeeper mutate: cannot read no-such-job.yaml: No such file or directory"


def test_explain_without_a_cluster_says_what_to_set() -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = "/nonexistent"
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "explain", "team-a/job-train"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "set KUBECONFIG or --kubeconfig" in result.stderr


def test_a_busy_port_is_one_clear_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = gangkeeper("serve", "--port", str(port), "--cert-dir", str(tmp_path / "certs"))
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if not line.startswith("gangkeeper: wrote development")]
    assert lines == [
        f"gangkeeper serve: cannot listen on 127.0.0.1:{port}: Address already in use; choose another --port"
    ]


def test_serve_says_where_it_serves_and_with_which_backend(tmp_path: Path) -> None:
    from tests.conftest import start_server, stop_server

    server = start_server(tmp_path, "--backend", "gate")
    try:
        log = (tmp_path / "server.log").read_text()
    finally:
        stop_server(server)
    port = server.url.rsplit(":", 1)[1]
    assert f"gangkeeper: serving https://127.0.0.1:{port} with" in log
    assert "backend gate; cluster: none (offline: auto means gate)" in log


def test_help_shows_every_default() -> None:
    result = gangkeeper("serve", "--help")
    assert "--port PORT           (default: 8443)" in result.stdout
    assert "(default: 10000)" in result.stdout and "(default: auto)" in result.stdout


def test_explain_for_a_tenant_without_cluster_wide_read_shows_the_gang_object(
    apiserver: object, capsys: object
) -> None:
    """A tenant may read its namespace only: listing every pod is forbidden, so explain prints what the
    controller wrote in the Gang object; an unknown gang still exits 1."""
    from tests.apiserver import Reject, TestApiServer
    from tests.cluster import Clock, add_job, add_job_pods, node
    from webhook.cli import main
    from webhook.controller.run.reconciler import Controller
    from webhook.kube import Api, client_from

    assert isinstance(apiserver, TestApiServer)
    store = apiserver.store
    store.create("v1", "nodes", "", node("worker1", cpu="4"))
    add_job_pods(store, add_job(store, parallelism=2, cpu="4"))  # one node of 4 cpus: never fits
    Controller(Api(client_from(server=apiserver.url)), clock=Clock()).reconcile_once()

    def forbid_cluster_lists(method: str, path: str) -> Reject | None:
        if method == "GET" and path.startswith(("/api/v1/pods", "/api/v1/nodes")):
            return Reject(403, "Forbidden", 'pods is forbidden: User "alice" cannot list resource "pods"')
        return None

    store.fail_next.extend([forbid_cluster_lists] * 4)
    assert main(["explain", "team-a/job-train", "--server", apiserver.url]) == 0
    shown = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "from its Gang object" in shown and "state: NeverFits" in shown, shown
    assert "members: 2 present of minMember 2 (2 gated, 0 running)" in shown, shown
    store.fail_next.extend([forbid_cluster_lists] * 4)
    assert main(["explain", "team-a/job-nope", "--server", apiserver.url]) == 1


def test_the_command_line_starts_before_the_metrics_directory_exists(tmp_path: Path) -> None:
    """The webhook's container sets PROMETHEUS_MULTIPROC_DIR and makes that directory once running: a
    metric created at import (the controller's, through a module the CLI imports for a default) would
    kill every webhook pod at start (the real tier's rollout caught one)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "not-yet")}
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "--help"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert result.returncode == 0, result.stderr


# --- reading files as kubectl reads them ----------------------------------------------------------
def test_two_objects_without_a_separator_are_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    """PyYAML keeps the last of duplicate keys; kubectl's strict decoding refuses them."""
    pasted = tmp_path / "pasted.yaml"
    pasted.write_text(JOB_STREAM.replace("---\n", ""))
    result = gangkeeper("mutate", "-f", str(pasted))
    assert result.returncode == 2 and not result.stdout
    assert result.stderr.strip() == (
        f"gangkeeper mutate: {pasted}: line 11: key 'apiVersion' already set in the object begun on line 2 "
        "(two objects without a '---' between them?)"
    )


def test_files_directories_lists_and_stdin_are_read_like_kubectl(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.yaml").write_text(JOB_STREAM)
    (tmp_path / "dir" / "notes.txt").write_text("not a manifest")
    listed = {"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(JOB_STREAM.split("---")[0])]}
    listed["items"][0]["metadata"]["name"] = "listed"
    (tmp_path / "list.json").write_text(__import__("json").dumps(listed))
    stdin = JOB_STREAM.split("---")[0].replace("name: train", "name: piped")
    result = gangkeeper(
        "mutate", "-f", str(tmp_path / "dir"), "-f", str(tmp_path / "list.json"), "-f", "-", stdin=stdin
    )
    assert result.returncode == 0, result.stderr
    names = [(o["kind"], o["metadata"]["name"]) for o in yaml.safe_load_all(result.stdout)]
    assert names == [("Job", "train"), ("ConfigMap", "settings"), ("Job", "listed"), ("Job", "piped")]


def test_mutate_says_what_gang_it_found_and_what_it_left_alone() -> None:
    spark = EXAMPLES / "spark"
    result = gangkeeper("mutate", "-f", "-", "-f", str(spark), stdin=JOB_STREAM)
    lines = result.stderr.splitlines()
    assert 'Job "train": gang job-train: 4 pods to start together (member 4), backend gate' in lines
    assert (
        'SparkApplication "spark-pi-volcano": left alone: the Spark operator makes this gang itself '
        "(batchScheduler volcano)" in lines
    ), result.stderr
    assert not any("ConfigMap" in line for line in lines)


def test_a_namespace_is_checked_for_namespace_keys_offline_too() -> None:
    result = gangkeeper("mutate", "-f", str(Path(__file__).parents[2] / "manifests/examples/00-namespace.yaml"))
    assert result.returncode == 0 and "not one gangkeeper reads" not in result.stderr, result.stderr
    typo = "apiVersion: v1\nkind: Namespace\nmetadata: {name: t, labels: {gangkeeper.io/enable: 'true'}}\n"
    result = gangkeeper("mutate", "-f", "-", stdin=typo)
    assert "did you mean 'gangkeeper.io/enabled'?" in result.stderr


def test_a_configuration_and_a_volcano_with_hypernodes_are_previewed(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: gangkeeper.io/v1alpha1\nkind: Configuration\nbackend: volcano\n"
        "topologyLevels: [topology.kubernetes.io/zone, example.com/rack, kubernetes.io/hostname]\n"
        "controller: {queuePolicy: backfill}\n"
    )
    job = yaml.safe_load(JOB_STREAM.split("---")[0])
    job["metadata"]["annotations"] = {"gangkeeper.io/topology-required": "example.com/rack"}
    result = gangkeeper("mutate", "--config", str(config), "--volcano-hypernodes", "-f", "-", stdin=yaml.safe_dump(job))
    assert result.returncode == 0, result.stderr
    group = next(o for o in yaml.safe_load_all(result.stdout) if o["kind"] == "PodGroup")
    validate(group)
    assert group["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert "not one of this cluster's topology levels" not in result.stderr


# --- explain takes what the user applied ------------------------------------------------------------
GANG_OBJECTS = [
    {"metadata": {"name": "job-train"}, "spec": {"workload": {"kind": "Job", "name": "train"}}},
    {"metadata": {"name": "sts-train"}, "spec": {"workload": {"kind": "StatefulSet", "name": "train"}}},
    {"metadata": {"name": "lws-serve-0"}, "spec": {"workload": {"kind": "LeaderWorkerSet", "name": "serve"}}},
    {"metadata": {"name": "lws-serve-1"}, "spec": {"workload": {"kind": "LeaderWorkerSet", "name": "serve"}}},
    {"metadata": {"name": "pg-mpi"}, "spec": {}},
]


@pytest.mark.parametrize(
    ("reference", "found"),
    [
        ("job-train", ["job-train"]),
        ("Job/train", ["job-train"]),
        ("job/train", ["job-train"]),
        ("jobs/train", ["job-train"]),
        ("sts/train", ["sts-train"]),
        ("train", ["job-train", "sts-train"]),  # ambiguous: the CLI names both
        ("lws/serve", ["lws-serve-0", "lws-serve-1"]),
        ("pg-mpi", ["pg-mpi"]),
        ("Job/nothing", []),
    ],
)
def test_explain_finds_the_gang_by_what_was_applied(reference: str, found: list[str]) -> None:
    from webhook.controller.run.explain import matching_gangs

    assert matching_gangs(reference, GANG_OBJECTS) == found


def test_explain_against_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    result = gangkeeper("explain", "--kubeconfig", str(kubeconfig), "team-a/Job/train")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "gangkeeper explain: cannot reach the API server https://127.0.0.1:1: [Errno 111] Connection refused"
    )
