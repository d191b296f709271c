"""The Prometheus alert rules and scrape config are valid, and each alert fires and stays quiet
as its promtool unit tests (deploy/prometheus/rules_test.yml) say."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from .helpers import ROOT

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
