"""Liveness, readiness (503 naming what is down), the OpenAPI schema and start-up validation."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml
from django.test import Client
from drf_spectacular.validation import validate_schema

from .helpers import ROOT, platform_env

READYZ_PROBE = """
from django.test import Client
response = Client().get('/readyz')
print(response.status_code)
print(response.content.decode())
"""


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=platform_env(**env), capture_output=True, text=True, timeout=60
    )


def test_healthz_answers_without_auth(db: None) -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readyz_is_200_with_every_dependency_up(db: None) -> None:
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["down"] == [] and set(body["checks"]) == {"database", "broker", "redis"}


def test_readyz_is_503_naming_what_is_down() -> None:
    completed = run_manage(
        "shell",
        "--no-imports",
        "-c",
        READYZ_PROBE,
        BROKER_URL="amqp://guest:guest@127.0.0.1:1/nothing",
        REDIS_URL="redis://127.0.0.1:1/0",
    )
    assert completed.returncode == 0, completed.stderr
    status, body = completed.stdout.strip().split("\n", 1)
    assert status == "503"
    assert json.loads(body)["down"] == ["broker", "redis"]


def test_schema_describes_the_api(db: None) -> None:
    response = Client().get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    paths = schema["paths"]
    create = paths["/api/v1/notifications"]["post"]
    assert {"202", "400", "401", "409", "413", "422", "429"} <= set(create["responses"])
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in create["parameters"])
    assert "/api/v1/notifications/{notification_id}/cancel" in paths
    assert "409" in paths["/api/v1/notifications/{notification_id}/cancel"]["post"]["responses"]
    assert "/api/v1/recipients/{user_id}" in paths
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    validate_schema(schema)  # raises on anything that is not valid OpenAPI 3
    docs = Client().get("/api/docs/")
    assert docs.status_code == 200
    # Served from our static files (drf-spectacular-sidecar), not a CDN.
    assert b"/static/drf_spectacular_sidecar/swagger-ui-dist/" in docs.content and b"cdn.jsdelivr" not in docs.content


def test_start_up_fails_clearly_without_secret_key_when_debug_is_off() -> None:
    completed = run_manage("check", DEBUG="false", SECRET_KEY="")
    assert completed.returncode != 0
    assert "SECRET_KEY is not set" in completed.stderr


def test_start_up_fails_clearly_on_a_bad_rate_limit() -> None:
    completed = run_manage("check", NOTIFICATIONS_RATE_LIMITS="email=fast")
    assert completed.returncode != 0
    assert "NOTIFICATIONS_RATE_LIMITS" in completed.stderr and "'email=fast'" in completed.stderr


def test_start_up_fails_clearly_on_an_unknown_broker_url() -> None:
    completed = run_manage("check", BROKER_URL="kafka://localhost")
    assert completed.returncode != 0
    assert "BROKER_URL" in completed.stderr


def test_the_committed_migrations_match_the_models(db: None) -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out)
    except SystemExit as exc:
        raise AssertionError(f"models changed without a migration:\n{out.getvalue()}") from exc
