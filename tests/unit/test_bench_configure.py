"""bench/cluster.py sets a controller field in the deployed Configuration in place of the chart's line:
YAML keeps the last of a key given twice, so a line added beside it would be silently overridden."""

from __future__ import annotations

import pytest
import yaml

from bench.cluster import with_controller_fields

CHART = """kind: Configuration
webhook:
  workers: 4
controller:
  queuePolicy: backfill
  headOfLineSeconds: 1800
  recoveryTimeoutSeconds: 120
"""


def test_a_field_the_chart_sets_is_replaced_and_a_new_one_added() -> None:
    text = with_controller_fields(CHART, "  headOfLineSeconds: 10\n  minRuntimeSeconds: 0.33\n")
    assert text.count("headOfLineSeconds") == 1
    controller = yaml.safe_load(text)["controller"]
    assert controller == {
        "queuePolicy": "backfill",
        "headOfLineSeconds": 10,
        "minRuntimeSeconds": 0.33,
        "recoveryTimeoutSeconds": 120,
    }
    assert yaml.safe_load(text)["webhook"] == {"workers": 4}


def test_a_configuration_without_a_controller_block_is_refused() -> None:
    with pytest.raises(ValueError, match="controller"):
        with_controller_fields("webhook:\n  workers: 4\n", "  headOfLineSeconds: 10\n")
