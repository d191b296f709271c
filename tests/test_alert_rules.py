"""The Prometheus alert rules and scrape config are valid, and each alert fires and stays quiet
as its promtool unit tests (deploy/prometheus/rules_test.yml) say."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .helpers import ROOT

# Debian's promtool, which scripts/test.sh installs (scripts/promtool.sh): not in the fast tier.
pytestmark = pytest.mark.tool("promtool")

PROMETHEUS = ROOT / "deploy" / "prometheus"
ALERTS = {
    "NotificationFailureRatioHigh",
    "DeadLetterQueueLarge",
    "NotificationDeliveryLatencyHigh",
    "EventConsumerNotConsuming",
    "EventConsumerDown",
    "NotificationQueueBacklogGrowing",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool")
    if path is None:
        # Fail, never skip: a missing promtool must not look like valid rules. scripts/promtool.sh installs it.
        pytest.fail("promtool is not installed; run scripts/promtool.sh (make test does)")
    return subprocess.run([path, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60)


def test_the_alert_rules_pass_promtool_check_rules() -> None:
    result = promtool("check", "rules", "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout + result.stderr


def test_every_alert_fires_and_stays_quiet_in_the_promtool_unit_tests() -> None:
    result = promtool("test", "rules", "rules_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    tests = (PROMETHEUS / "rules_test.yml").read_text()
    for alert in ALERTS:
        # Each alert has a case where it fires (exp_alerts with labels) and one where it does not.
        assert f"alertname: {alert}\n        exp_alerts:\n          - exp_labels" in tests, alert
        assert f"alertname: {alert}\n        exp_alerts: []" in tests, alert


def test_the_scrape_config_is_valid_and_scrapes_web_workers_and_consumer() -> None:
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    config = (PROMETHEUS / "prometheus.yml").read_text()
    for target in ("web:8000", "worker:9191", "consumer:9192"):
        assert target in config


def test_every_grafana_panel_query_is_valid_promql_on_our_metric_names(tmp_path: Path) -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "notifications.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) >= 10
    # promtool parses recording-rule expressions, which makes it a PromQL checker for the panels.
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"panel:{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    (tmp_path / "panels.yml").write_text(json.dumps(rules))
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed; run scripts/promtool.sh (make test does)")
    result = subprocess.run([path, "check", "rules", str(tmp_path / "panels.yml")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    text = " ".join(exprs)
    for name in (
        "notifications_sent_total",
        "notification_delivery_seconds_bucket",
        "notification_end_to_end_seconds_bucket",
        "notification_queue_size",
        "dlq_size",
        "notification_retries_total",
        "notification_rate_limited_total",
        "notifications_processed_total",
        "notifications_processing_seconds_bucket",
    ):
        assert name in text, name
