"""Schema = behaviour: schemathesis drives the web process as deployed from its own /api/schema/,
and every answer must be one the schema documents (status, content type, headers, body), none a 500."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from notifications import services

from .helpers import platform_env
from .live_servers import WebServer, gunicorn_server

CONFIG = Path(__file__).with_name("schemathesis.toml")  # seed, examples, and why each setting


@pytest.fixture
def web(transactional_db: None) -> Iterator[WebServer]:
    # The run is about what the answers look like, not the client's budget: at the default rate a
    # run could be answered 429 for everything after its first minute of requests. Nor the address's
    # budget of failed authentications: schemathesis sends bad tokens to every operation, and past
    # 20 in a minute every later request, a bad token's too, was rightly a 429 (where its check
    # expects 401) in about one run in three.
    with gunicorn_server(API_THROTTLE_RATE="100000/min", API_AUTH_FAILURE_RATE="100000/min") as server:
        yield server
        # A batch item's unexpected error is answered in its slot (a 202) but logged: none may be.
        assert "Traceback" not in server.output(), server.output()


def test_every_operation_answers_as_its_schema_says(web: WebServer, tmp_path: Path) -> None:
    _, token = services.api_client_create(name="schemathesis")
    report = tmp_path / "report.json"
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        f"--config-file={CONFIG}",
        "run",
        web.url("/api/schema/"),
        f"--header=Authorization: Bearer {token}",
        "--report=json",
        f"--report-json-path={report}",
        "--no-color",
    ]
    # In tmp_path: schemathesis looks for a schemathesis.toml upwards from its working directory and
    # keeps its crash cache there.
    completed = subprocess.run(command, cwd=tmp_path, env=platform_env(), capture_output=True, text=True, timeout=300)
    output = completed.stdout + completed.stderr
    assert report.exists(), output
    result = json.loads(report.read_text())
    operations, cases = result["operations"], result["test_cases"]
    assert result["stop_reason"] == "completed", output
    assert operations["tested"] == operations["total"] >= 10 and operations["errored"] == 0, output
    assert result["failures"] == [] and result["errors"] == [], output
    assert cases["generated"] > 0 and cases["with_failures"] == 0 and cases["errored"] == 0, output
    assert completed.returncode == 0, output
