"""The Helm chart, the one source of gangkeeper's manifests: it lints, every variant renders objects
valid for each Kubernetes version, the committed release manifest is its render, and its alerts name
metrics the code exports. Installing, upgrading and uninstalling it on the real control plane is
tests/real/test_real_chart.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.realcluster.controlplane import binary, versions
from tests.schemas import validate
from webhook.cli import _commands, build_parser
from webhook.config import expand

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gangkeeper"
NO_SCHEMA_HERE = {"cert-manager.io/v1", "monitoring.coreos.com/v1"}  # CRDs not among ../shared/crds
VARIANTS = {
    "defaults": ["--set", "networkPolicy.apiServerCIDRs={192.0.2.10/32}"],
    "everything": [
        "--set",
        "certificates.mode=cert-manager,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,"
        "metrics.grafanaDashboard.enabled=true",
        "--set",
        "namespace.create=true,backend=volcano,controller.queuePolicy=fifo,maxGangPods=500,"
        "networkPolicy.allowAnySource=true",
    ],
    "one-node": ["--set", "webhook.replicas=1,controller.replicas=1,priorityClassName=,networkPolicy.enabled=false"],
}


def helm() -> Path:
    exe = binary("helm", versions()["HELM_VERSION"], "helm")
    if not exe.exists():
        pytest.skip(f"not built: {exe} (run hack/cluster/build.sh helm)")
    return exe


@cache
def render(variant: str, namespace: str = "gangkeeper-system") -> list[dict[str, Any]]:
    args = [str(helm()), "template", "gangkeeper", str(CHART), "--namespace", namespace]
    args += ["--kube-version", versions()["K8S_DEFAULT"], *VARIANTS[variant]]
    output = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(output) if d]


def test_the_chart_lints_strictly() -> None:
    result = subprocess.run([str(helm()), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_release_manifest_is_the_charts_render() -> None:
    committed = (ROOT / "manifests" / "base" / "gangkeeper.yaml").read_text()
    fresh = subprocess.run(
        [
            str(helm()),
            "template",
            "gangkeeper",
            str(CHART),
            "--namespace",
            "gangkeeper-system",
            "--no-hooks",
            "--kube-version",
            versions()["K8S_DEFAULT"],
            "--set",
            "namespace.create=true,networkPolicy.allowAnySource=true",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert committed.split("\n", 4)[4] == fresh, "manifests/base/gangkeeper.yaml is stale: run hack/render.sh"


def webhook_ingress(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "gangkeeper-webhook")
    return list(policy["spec"]["ingress"])


def test_the_webhooks_network_policy_is_narrow_unless_opened_explicitly() -> None:
    """Without the API server's addresses (none given, none readable: helm template has no cluster) the
    chart refuses to render an open policy; given, the webhook takes 8443 from them alone (and the
    scrapers); opened, from any source, as asked. Read from the cluster at install: test_real_chart.py."""
    args = [str(helm()), "template", "gangkeeper", str(CHART), "--kube-version", versions()["K8S_DEFAULT"]]
    refused = subprocess.run(args, capture_output=True, text=True)
    assert refused.returncode != 0
    assert "set networkPolicy.apiServerCIDRs to them, or networkPolicy.allowAnySource=true" in refused.stderr
    narrow = webhook_ingress(render("defaults"))
    assert narrow[0]["from"][0] == {"ipBlock": {"cidr": "192.0.2.10/32"}}
    assert "from" not in webhook_ingress(render("everything"))[0]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_every_rendered_object_validates(variant: str, version: str) -> None:
    for obj in render(variant):
        if obj["apiVersion"] in NO_SCHEMA_HERE:
            continue
        validate(obj, version)


def test_values_reach_the_objects() -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render("everything")}
    webhook = objects[("Deployment", "gangkeeper-webhook")]["spec"]["template"]["spec"]
    container = webhook["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GANGKEEPER_BACKEND"] == "volcano" and env["GANGKEEPER_CERT_SECRET"] == ""
    assert "--config=/etc/gangkeeper/config.yaml" in container["args"]
    assert {"name": "tls", "secret": {"secretName": "gangkeeper-webhook-tls"}} in webhook["volumes"]
    controller = objects[("Deployment", "gangkeeper-controller")]["spec"]["template"]["spec"]["containers"][0]
    assert "--config=/etc/gangkeeper/config.yaml" in controller["args"]
    # the values reach the Configuration, and each command reads them from it as its flags
    configuration = objects[("ConfigMap", "gangkeeper-config")]["data"]["config.yaml"]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        file.write(configuration)
        file.flush()
        parser = build_parser()
        serve = parser.parse_args(expand(["serve", "--config", file.name], _commands(parser)))
        ctl = parser.parse_args(expand(["controller", "--config", file.name], _commands(parser)))
    assert serve.max_gang_pods == 500 and ctl.max_gang_pods == 500 and ctl.queue_policy == "fifo"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = objects[(kind, "gangkeeper")]["metadata"]["annotations"]
        assert annotations == {"cert-manager.io/inject-ca-from": "gangkeeper-system/gangkeeper-webhook"}
    assert ("Certificate", "gangkeeper-webhook") in objects and ("Namespace", "gangkeeper-system") in objects
    assert ("ServiceMonitor", "gangkeeper") in objects and ("PrometheusRule", "gangkeeper") in objects


def webhook_grants(variant: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the webhook's ClusterRole and Role grant in a variant."""
    return {
        (group, resource, verb)
        for obj in render(variant)
        if obj["kind"] in ("ClusterRole", "Role") and obj["metadata"]["name"] == "gangkeeper-webhook"
        for rule in obj["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_under_cert_manager_the_webhook_may_write_neither_its_configurations_nor_secrets() -> None:
    """Only mode self injects the CA bundle (and has the policy that limits that patch to it): under
    cert-manager a compromised webhook pod must not be able to widen its own rules or fail open."""
    self_mode, cert_manager = webhook_grants("defaults"), webhook_grants("everything")
    writes = {
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"),
        ("", "secrets", "create"),
        ("", "secrets", "patch"),
    }
    assert writes <= self_mode
    assert not writes & cert_manager and not any(
        group == "admissionregistration.k8s.io" for group, _, _ in cert_manager
    )
    kinds = {(o["kind"], o["metadata"]["name"]) for o in render("defaults")}
    assert ("ValidatingAdmissionPolicy", "gangkeeper-webhook-ca-bundle-only") in kinds


def test_helm_install_into_its_own_namespace_skips_it_by_name() -> None:
    """`helm install --create-namespace` makes the namespace without gangkeeper.io/system: the webhooks
    then keep out of it by name, wherever it is installed."""
    objects = render("defaults", namespace="platform-gang")
    text = yaml.safe_dump_all(objects)
    assert "gangkeeper-system" not in text
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        config = next(o for o in objects if o["kind"] == kind)
        expressions = config["webhooks"][0]["namespaceSelector"]["matchExpressions"]
        assert {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "platform-gang"],
        } in expressions


def test_the_uninstall_hook_releases_every_gate_with_the_controllers_account() -> None:
    job = next(o for o in render("defaults") if o["kind"] == "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gangkeeper-controller" and pod["containers"][0]["args"] == ["release-all"]


def test_every_alert_and_dashboard_panel_names_a_metric_the_code_exports() -> None:
    from prometheus_client.metrics import MetricWrapperBase

    from webhook.admission import metrics as admission
    from webhook.controller import metrics as controller

    exported = set()
    for module in (admission, controller):
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                name = value._name  # the family name, as Prometheus scrapes it (counters add _total)
                exported |= {name, f"{name}_total", f"{name}_bucket"}
    rules = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())["groups"][0]["rules"]
    assert len(rules) >= 6
    for rule in rules:
        names = set(re.findall(r"\b(gangkeeper_[a-z_]+)", rule["expr"]))
        assert names and names <= exported, (rule["alert"], names - exported)
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            names = set(re.findall(r"\b(gangkeeper_[a-z_]+)", target["expr"]))
            assert names and names <= exported, (panel["title"], names - exported)
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render("everything")}
    shipped = objects[("ConfigMap", "gangkeeper-dashboard")]["data"]["gangkeeper.json"]
    assert json.loads(shipped) == dashboard


def test_the_image_target_builds_with_docker_or_debians_tools() -> None:
    """`make image` runs `docker build` where an engine runs, else hack/image.sh (tests/real/test_image.py
    builds and runs that image): the recipe says both, and nothing is skipped silently."""
    recipe = subprocess.run(["make", "-n", "image"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "docker build -t ghcr.io/gangkeeper/gangkeeper:0.1.0 ." in recipe
    assert "bash hack/image.sh build/image" in recipe and "hack/image-tools.sh" in recipe


# each alert: input series (promtool's expanding notation, one sample a minute), and when it must fire
ALERT_CASES: dict[str, tuple[dict[str, str], str]] = {
    "GangkeeperWebhookErrors": ({'gangkeeper_admission_requests_total{outcome="error"}': "0+6x40"}, "20m"),
    "GangkeeperWebhookSlow": (
        {
            'gangkeeper_admission_duration_seconds_bucket{le="0.5"}': "0x40",
            'gangkeeper_admission_duration_seconds_bucket{le="1"}': "0+60x40",
            'gangkeeper_admission_duration_seconds_bucket{le="+Inf"}': "0+60x40",
        },
        "25m",
    ),
    "GangkeeperWebhookOverloaded": ({'gangkeeper_http_refused_requests_total{code="429"}': "0+30x40"}, "20m"),
    "GangkeeperGangsTimingOut": ({"gangkeeper_gang_timeouts_total": "0 0 0 1 1 1 1 1 1 1"}, "5m"),
    "GangkeeperGangsGaveUp": ({'gangkeeper_gangs{state="GaveUp"}': "1x40"}, "20m"),
    "GangkeeperControllerPassesFailing": ({"gangkeeper_controller_pass_failures_total": "0+1x40"}, "20m"),
    "GangkeeperGangReconcileFailing": ({"gangkeeper_gang_failures_total": "0 0 2 2 2 2 2 2"}, "5m"),
    "GangkeeperNoLeader": ({"gangkeeper_controller_leader": "0x40"}, "20m"),
    "GangkeeperLeaseLost": ({"gangkeeper_controller_lease_lost_total": "0 0 1 1 1 1 1"}, "5m"),
}
QUIET = {  # what a healthy gangkeeper exports: no alert fires
    'gangkeeper_admission_requests_total{outcome="error"}': "0x40",
    'gangkeeper_admission_duration_seconds_bucket{le="0.5"}': "0+60x40",
    'gangkeeper_admission_duration_seconds_bucket{le="1"}': "0+60x40",
    'gangkeeper_admission_duration_seconds_bucket{le="+Inf"}': "0+60x40",
    'gangkeeper_http_refused_requests_total{code="429"}': "0x40",
    "gangkeeper_gang_timeouts_total": "0x40",
    'gangkeeper_gangs{state="GaveUp"}': "0x40",
    "gangkeeper_controller_pass_failures_total": "0x40",
    "gangkeeper_gang_failures_total": "0x40",
    "gangkeeper_controller_leader": "1x40",
    "gangkeeper_controller_lease_lost_total": "0x40",
}


def test_each_alert_fires_on_its_series_and_none_on_a_healthy_one(tmp_path: Path) -> None:
    """promtool (Debian 12's, hack/cluster/build.sh promtool) evaluates the chart's alert rules on recorded series:
    each alert fires on what its problem exports, and none on what a healthy gangkeeper exports."""
    from tests.realcluster.controlplane import binary, versions

    promtool = binary("promtool", versions()["PROMTOOL_DEBIAN_VERSION"], "promtool")
    if not promtool.exists():
        pytest.skip(f"not built: {promtool} (run hack/cluster/build.sh promtool)")
    rules = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == set(ALERT_CASES), "every alert has a case"
    tests = []
    for rule in rules:
        series, fires_at = ALERT_CASES[rule["alert"]]
        expected = {"exp_labels": dict(rule["labels"]), "exp_annotations": dict(rule["annotations"])}
        tests.append(
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "alert_rule_test": [{"eval_time": fires_at, "alertname": rule["alert"], "exp_alerts": [expected]}],
            }
        )
    quiet = [{"eval_time": "30m", "alertname": r["alert"], "exp_alerts": []} for r in rules]
    tests.append(
        {
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in QUIET.items()],
            "alert_rule_test": quiet,
        }
    )
    shutil.copy(CHART / "files" / "alerts.yaml", tmp_path / "alerts.yaml")
    (tmp_path / "alerts_test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["alerts.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    result = subprocess.run(
        [str(promtool), "test", "rules", "alerts_test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
