"""One log line per request (notifications.request): method, path, status, duration, client and
request id; no object reprs; a 4xx not logged a second time by Django; start-up banners at DEBUG."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
from rest_framework.test import APIClient

from notifications.logging import JsonFormatter

from .helpers import ROOT, platform_env

pytestmark = pytest.mark.django_db


@pytest.fixture
def every_line() -> Iterator[io.StringIO]:
    """Every line logged, by any logger, as the console handler would format it (JSON)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    # The root, and the loggers LOGGING keeps from propagating to it.
    loggers = [logging.getLogger(name) for name in ("", "django", "django.request", "django.server")]
    for logger in loggers:
        logger.addHandler(handler)
    yield stream
    for logger in loggers:
        logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in stream.getvalue().splitlines() if raw.strip()]


def test_an_api_request_is_one_line_naming_its_client_and_request_id(api: APIClient, every_line: io.StringIO) -> None:
    response = api.get("/api/v1/notifications/00000000-0000-0000-0000-000000000000")
    assert response.status_code == 404

    logged = lines(every_line)
    # The 404 once: the request's line, no "Not Found" warning of Django's beside it.
    assert [line["logger"] for line in logged] == ["notifications.request"], logged
    (line,) = logged
    assert line["message"].startswith("GET /api/v1/notifications/00000000-0000-0000-0000-000000000000 404 ")
    assert (line["method"], line["status"], line["client"]) == ("GET", 404, "acme")
    assert line["request_id"] == response["X-Request-ID"]
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert "request" not in line  # no "<WSGIRequest ...>" or "<socket.socket ...>"


def test_the_query_string_is_not_logged(api: APIClient, every_line: io.StringIO) -> None:
    assert api.get("/api/v1/notifications?token=secret-looking").status_code in (200, 400)
    (line,) = lines(every_line)
    assert line["path"] == "/api/v1/notifications" and "secret-looking" not in json.dumps(line)


def test_a_request_without_a_client_logs_an_empty_client(every_line: io.StringIO) -> None:
    response = APIClient().get("/healthz")
    assert response.status_code in (200, 503)
    (line,) = lines(every_line)
    assert (line["path"], line["client"]) == ("/healthz", "")


def test_a_management_command_prints_no_start_up_banner_unless_log_level_is_debug() -> None:
    def check(level: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", "check"],
            cwd=ROOT,
            env=platform_env(LOG_LEVEL=level),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    assert "AXES: BEGIN" not in check("INFO")
    assert '"level": "DEBUG", "logger": "axes.apps", "message": "AXES: BEGIN' in check("DEBUG")
