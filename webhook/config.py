"""gangkeeper's configuration file: one `Configuration` (gangkeeper.io/v1alpha1) for the webhook and the
controller, versioned as Kueue's is, and what the chart puts in the ConfigMap `gangkeeper-config`.

Every field is one of a command's flags; the file is read before the command line, so a flag given
there wins (the dev loop). It is checked whole at start: an unknown field (with the closest known one),
a field given twice, a wrong type or a value out of its choices stops the process with one line naming
the field.

    apiVersion: gangkeeper.io/v1alpha1
    kind: Configuration
    maxGangPods: 10000
    schedulerNames: {volcano: volcano, coscheduling: scheduler-plugins-scheduler}
    webhook: {workers: 4, maxInFlight: 512, maxConnections: 1024, drainSeconds: 5}
    controller: {queuePolicy: backfill, queueDepth: 4, maxAttempts: 5, headOfLineSeconds: 1800}
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

API_VERSION, KIND = "gangkeeper.io/v1alpha1", "Configuration"
FLAG = "--config"

# field path -> the flag it stands for, per command that takes it
FIELDS: dict[str, dict[str, str]] = {
    "backend": {"serve": "--backend", "mutate": "--backend"},
    "maxGangPods": {"serve": "--max-gang-pods", "controller": "--max-gang-pods", "mutate": "--max-gang-pods"},
    "schedulerNames.volcano": {"serve": "--volcano-scheduler", "controller": "--volcano-scheduler"},
    "schedulerNames.coscheduling": {"serve": "--coscheduling-scheduler"},
    "topologyLevels": {"serve": "--topology-levels", "mutate": "--topology-levels"},
    "volcanoQueues": {"serve": "--volcano-queues"},
    "protectFromDisruption": {"serve": "--protect-from-disruption"},
    "volcanoAllocatesDevices": {"serve": "--volcano-allocates-devices"},
    "webhook.workers": {"serve": "--workers"},
    "webhook.maxInFlight": {"serve": "--max-in-flight"},
    "webhook.maxInFlightMiB": {"serve": "--max-in-flight-mib"},
    "webhook.maxConnections": {"serve": "--max-connections"},
    "webhook.drainSeconds": {"serve": "--drain-seconds"},
    "webhook.idleTimeoutSeconds": {"serve": "--idle-timeout"},
    "controller.queuePolicy": {"controller": "--queue-policy"},
    "controller.queueDepth": {"controller": "--queue-depth"},
    "controller.maxAttempts": {"controller": "--max-attempts"},
    "controller.recoveryTimeoutSeconds": {"controller": "--recovery-timeout"},
    "controller.headOfLineSeconds": {"controller": "--head-of-line-seconds"},
    "controller.minRuntimeSeconds": {"controller": "--min-runtime-seconds"},
    "controller.backoffBaseSeconds": {"controller": "--backoff-base-seconds"},
    "controller.nativeVersion": {"controller": "--native-version"},
    "controller.intervalSeconds": {"controller": "--interval"},
    "controller.releaseConcurrency": {"controller": "--release-concurrency"},
    "controller.autoscaler": {"controller": "--autoscaler"},
    "controller.placeholderImage": {"controller": "--placeholder-image"},
    "controller.maxPlaceholderPods": {"controller": "--max-placeholder-pods"},
    "controller.maxPlaceholderPodsPerNamespace": {"controller": "--max-placeholder-pods-per-namespace"},
}


class ConfigError(ValueError):
    """One line: the file, the field, what is wrong."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load keeps the last of a key given twice, so a second `headOfLineSeconds:` in the same
    block (a line added on top of the chart's) would silently win; this loader refuses it instead."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise ConfigError(f"{key} is given twice (line {line}); give it once")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and any(f.startswith(f"{path}.") for f in FIELDS):
            flat.update(_flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


def load(path: str) -> dict[str, Any]:
    """The file's fields by path (`controller.queuePolicy`), checked for shape; values are checked by
    `to_flags` against the flags they stand for."""
    try:
        document = yaml.load(Path(path).read_text(), Loader=_UniqueKeyLoader)  # a SafeLoader
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read it: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(document, Mapping):
        raise ConfigError(f"{path}: expected a {KIND} object")
    if document.get("apiVersion") != API_VERSION or document.get("kind") != KIND:
        found = f"{document.get('apiVersion')}/{document.get('kind')}"
        raise ConfigError(f"{path}: apiVersion/kind is {found}, expected {API_VERSION}/{KIND}")
    fields = _flatten({k: v for k, v in document.items() if k not in ("apiVersion", "kind")})
    for field in fields:
        if field not in FIELDS:
            close = difflib.get_close_matches(field, list(FIELDS), n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; known: {', '.join(sorted(FIELDS))}"
            raise ConfigError(f"{path}: unknown field {field}{hint}")
    return fields


def to_flags(path: str, fields: Mapping[str, Any], command: str, parser: argparse.ArgumentParser) -> list[str]:
    """The command's flags the file sets, each value checked as its flag would check it."""
    actions = {option: action for action in parser._actions for option in action.option_strings}
    flags = []
    for field, value in fields.items():
        flag = FIELDS[field].get(command)
        if flag is None:
            continue  # the other component's
        if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
            value = ",".join(value)  # a list of names is its flag's comma-separated form
        if isinstance(value, Mapping | list) or value is None:
            raise ConfigError(f"{path}: {field}: expected a single value, not {type(value).__name__}")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        action = actions[flag]
        try:
            checked = action.type(text) if callable(action.type) else text
        except (ValueError, TypeError, argparse.ArgumentTypeError) as error:
            raise ConfigError(f"{path}: {field}: {text!r} is not valid: {error}") from None
        if action.choices is not None and checked not in action.choices:
            raise ConfigError(f"{path}: {field}: {text!r} is not one of {', '.join(map(str, action.choices))}")
        flags.append(f"{flag}={text}")
    return flags


def expand(argv: Sequence[str], commands: Mapping[str, argparse.ArgumentParser]) -> list[str]:
    """argv with the file's flags put before the command line's own (which therefore win)."""
    if not argv or argv[0] not in commands:
        return list(argv)
    path = None
    for index, token in enumerate(argv):
        if token == FLAG and index + 1 < len(argv):
            path = argv[index + 1]
        elif token.startswith(f"{FLAG}="):
            path = token.split("=", 1)[1]
    if path is None:
        return list(argv)
    command = argv[0]
    return [command, *to_flags(path, load(path), command, commands[command]), *argv[1:]]
