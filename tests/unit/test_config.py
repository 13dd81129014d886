"""The configuration file: its fields become the flags they stand for, the command line wins, and any
mistake stops the start with one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from webhook.cli import _commands, build_parser, main
from webhook.config import ConfigError, expand

CHART_CONFIG = Path(__file__).resolve().parents[2] / "manifests" / "base" / "gangkeeper.yaml"


def write(tmp_path: Path, body: dict[str, object]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "gangkeeper.io/v1alpha1", "kind": "Configuration", **body}))
    return str(path)


def parsed(argv: list[str]) -> object:
    parser = build_parser()
    return parser.parse_args(expand(argv, _commands(parser)))


def test_fields_become_flags_and_the_command_line_wins(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "maxGangPods": 500,
            "controller": {"queuePolicy": "fifo", "queueDepth": 2, "headOfLineSeconds": 60},
            "webhook": {"workers": 3},
        },
    )
    controller = parsed(["controller", "--config", path])
    assert (controller.queue_policy, controller.queue_depth, controller.max_gang_pods) == ("fifo", 2, 500)  # type: ignore[attr-defined]
    assert controller.head_of_line_seconds == 60  # type: ignore[attr-defined]
    serve = parsed(["serve", f"--config={path}", "--workers", "7"])
    assert (serve.workers, serve.max_gang_pods) == (7, 500)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"controller": {"queuePolicy": "fifoo"}},
            "controller.queuePolicy: 'fifoo' is not one of fifo, first-fit, backfill",
        ),
        (
            {"controller": {"queuPolicy": "fifo"}},
            "unknown field controller.queuPolicy; did you mean controller.queuePolicy?",
        ),
        ({"maxGangPods": "many"}, "maxGangPods: 'many' is not valid"),
        ({"maxGangPods": 20000}, "maxGangPods: '20000' is not valid: must be at most 10000"),
        ({"webhook": {"workers": [1, 2]}}, "webhook.workers: expected a single value"),
    ],
)
def test_a_mistake_stops_the_start_naming_the_field(
    tmp_path: Path, body: dict[str, object], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, body)
    assert (
        main(["controller", "--config", path]) == 2 if "webhook" not in body else main(["serve", "--config", path]) == 2
    )
    assert message in capsys.readouterr().err


def test_a_wrong_kind_or_a_missing_file_is_one_line(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\n")
    with pytest.raises(ConfigError, match=r"expected gangkeeper\.io/v1alpha1/Configuration"):
        parsed(["controller", "--config", str(other)])
    with pytest.raises(ConfigError, match="cannot read it"):
        parsed(["controller", "--config", str(tmp_path / "absent.yaml")])


def test_the_release_manifests_configuration_is_valid() -> None:
    """The ConfigMap the chart renders is read by both commands without an error."""
    documents = [d for d in yaml.safe_load_all(CHART_CONFIG.read_text()) if d]
    configmap = next(d for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "gangkeeper-config")
    path = Path("/tmp") / f"gangkeeper-config-{id(configmap)}.yaml"
    path.write_text(configmap["data"]["config.yaml"])
    try:
        assert parsed(["serve", "--config", str(path)]).max_gang_pods == 10000  # type: ignore[attr-defined]
        assert parsed(["controller", "--config", str(path)]).queue_policy == "backfill"  # type: ignore[attr-defined]
    finally:
        path.unlink()


def test_the_controllers_settings_come_from_the_configuration_and_the_flags(tmp_path: Path) -> None:
    """One bootstrap: `gangkeeper controller` builds its ControllerSettings from the parsed command line
    (the Configuration file merged in), and every flag that tunes the controller is one of its fields."""
    from dataclasses import fields

    from webhook.controller.decide.queue import Policy
    from webhook.controller.run.bootstrap import ControllerSettings

    path = write(tmp_path, {"controller": {"queuePolicy": "fifo", "headOfLineSeconds": 60}})
    args = parsed(
        ["controller", "--config", path, "--recovery-timeout", "45", "--autoscaler", "none", "--queue-depth", "3"]
    )
    settings = ControllerSettings.from_args(args)  # type: ignore[arg-type]
    assert (settings.queue_policy, settings.head_of_line_seconds) == (Policy.FIFO, 60)
    assert (settings.recovery_seconds, settings.autoscaler, settings.queue_depth) == (45, "none", 3)
    assert ControllerSettings.from_args(parsed(["controller"])) == ControllerSettings()  # type: ignore[arg-type]
    process_only = {"kubeconfig", "server", "namespace", "interval", "metrics_port", "log_level", "config"}
    process_only |= {"max_gang_pods", "native_version", "recovery_timeout", "func", "command", "help"}
    flags = {a.dest for a in _commands(build_parser())["controller"]._actions}
    assert flags - process_only <= {f.name for f in fields(ControllerSettings)}, flags - process_only


def test_the_webhooks_settings_come_from_the_configuration_and_the_flags(tmp_path: Path) -> None:
    """One bootstrap for the webhook too: `gangkeeper serve` builds WebhookSettings from the parsed
    command line (the Configuration merged in) and every flag that tunes admission is one of its fields."""
    from dataclasses import fields

    from webhook.admission.bootstrap import WebhookSettings, build_resolver

    args = parsed(["serve", "--backend", "gate", "--volcano-queues", "a, b", "--protect-from-disruption", "false"])
    settings = WebhookSettings.from_args(args)  # type: ignore[arg-type]
    assert (settings.backend, settings.volcano_queues) == ("gate", frozenset({"a", "b"}))
    assert settings.protect_from_disruption == "false"
    bounded = WebhookSettings.from_args(parsed(["serve", "--protect-from-disruption", "12h"]))  # type: ignore[arg-type]
    assert bounded.protect_from_disruption == "12h"
    with pytest.raises(SystemExit):  # argparse's own error: not true, false or a positive duration
        parsed(["serve", "--protect-from-disruption", "forever"])
    assert WebhookSettings.from_args(parsed(["serve"])) == WebhookSettings()  # type: ignore[arg-type]
    resolver = build_resolver(settings)
    assert (resolver.default, resolver.volcano_queues, resolver.protect_from_disruption) == (
        "gate",
        {"a", "b"},
        "false",
    )
    serving = {"host", "port", "cert_dir", "kubeconfig", "workers", "graceful_timeout", "handshake_timeout"}
    serving |= {"header_timeout", "body_timeout", "idle_timeout", "max_in_flight", "max_in_flight_mib"}
    serving |= {"cert_reload_seconds", "noop_endpoint", "namespace", "service", "san", "cert_sync_seconds"}
    serving |= {"log_level", "config", "func", "command", "help", "cert_secret", "drain_seconds"}
    serving |= {"max_connections", "max_waiting_connections", "max_gang_pods"}  # the process's own limits
    flags = {a.dest for a in _commands(build_parser())["serve"]._actions}
    assert flags - serving <= {f.name for f in fields(WebhookSettings)}, flags - serving


def test_a_field_given_twice_is_refused_naming_it_and_its_line(tmp_path: Path) -> None:
    """YAML keeps the last of a key given twice: a line added above the chart's own would silently lose
    (the replay's headOfLineSeconds did, 0eb6c3a); the file is refused instead."""
    twice = tmp_path / "twice.yaml"
    twice.write_text(
        "apiVersion: gangkeeper.io/v1alpha1\nkind: Configuration\n"
        "controller:\n  headOfLineSeconds: 10\n  queuePolicy: backfill\n  headOfLineSeconds: 1800\n"
    )
    with pytest.raises(ConfigError, match=r"twice\.yaml: headOfLineSeconds is given twice \(line 6\)"):
        parsed(["controller", "--config", str(twice)])
