"""Liveness, readiness (503 naming what is down), the OpenAPI schema and that the API keeps to it, and
start-up validation."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any, cast

import pytest
import yaml
from django.test import Client
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from notifications.models import Notification

from .factories import accept_notification
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


@pytest.mark.services
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


def load_schema() -> dict[str, Any]:
    response = Client().get("/api/schema/")
    assert response.status_code == 200
    return cast(dict[str, Any], yaml.safe_load(response.content))


def test_schema_describes_the_api(db: None) -> None:
    schema = load_schema()
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


def _operations(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        operation["operationId"]: operation
        for path, methods in schema["paths"].items()
        if path.startswith("/api/v1/")
        for operation in methods.values()
    }


def test_every_api_operation_documents_401_429_and_503_in_the_one_error_shape(db: None) -> None:
    schema = load_schema()
    operations = _operations(schema)
    assert len(operations) >= 8
    for operation_id, operation in operations.items():
        responses = operation["responses"]
        # A provider's callback carries the provider's signature, not a client's token: no 401, no client throttle.
        authenticated = bool(operation.get("security"))
        assert ({"401", "429", "503"} if authenticated else {"503"}) <= set(responses), operation_id
        for code, response in responses.items():
            if code.startswith(("4", "5")):
                body = response["content"]["application/json"]["schema"]
                assert body == {"$ref": "#/components/schemas/Error"}, (operation_id, code)
        for code in ("429", "503") if authenticated else ("503",):
            assert responses[code]["headers"]["Retry-After"]["required"] is True, (operation_id, code)
    error = schema["components"]["schemas"]["ErrorDetail"]
    assert error["required"] == ["code", "message"] and "field" in error["properties"]


def test_the_list_is_documented_as_the_page_it_answers_with_its_parameters(db: None) -> None:
    schema = load_schema()
    listing = _operations(schema)["notifications_list"]
    page = schema["components"]["schemas"]["PaginatedNotificationList"]
    assert listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/PaginatedNotificationList")
    assert set(page["required"]) == {"next", "previous", "results"}
    parameters = {p["name"]: p["schema"] for p in listing["parameters"]}
    assert parameters["page_size"] == {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}
    assert parameters["cursor"]["minLength"] == 1
    assert {"status", "channel", "user_id", "created_after", "created_before"} <= set(parameters)


def test_the_batch_is_documented_with_its_bounds_and_result_shape(db: None) -> None:
    schemas = load_schema()["components"]["schemas"]
    items = schemas["BatchCreateRequest"]["properties"]["notifications"]
    assert (items["minItems"], items["maxItems"]) == (1, 100)
    assert items["items"] == {"$ref": "#/components/schemas/NotificationCreateRequest"}
    assert schemas["NotificationCreateRequest"]["additionalProperties"] is False  # an unknown field is a 400
    result = schemas["BatchItemResult"]["properties"]
    assert set(result) == {"status", "body", "error"}


@pytest.mark.parametrize("count", [0, 101])
def test_a_batch_outside_1_to_100_is_a_400_naming_notifications(api: APIClient, count: int) -> None:
    item = {"user_id": "u1", "to": "ann@example.com", "message": "hi"}
    response = api.post("/api/v1/notifications/batch", {"notifications": [item] * count}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "notifications"
    assert Notification.objects.count() == 0


@pytest.mark.parametrize(
    "query",
    ["channel=", "status=", "user_id=", "created_after=", "created_before=", "cursor=", "page_size="],
)
def test_an_empty_list_parameter_is_a_400_naming_it(api: APIClient, query: str) -> None:
    response = api.get(f"/api/v1/notifications?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == query.rstrip("=")


@pytest.mark.parametrize("page_size", ["0", "201", "-1", "ten", "1.5", "9" * 5000])
def test_a_page_size_outside_1_to_200_is_a_400(api: APIClient, page_size: str) -> None:
    response = api.get("/api/v1/notifications", {"page_size": page_size})
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "page_size"


def test_page_size_200_is_honoured(api: APIClient, client_and_token) -> None:  # type: ignore[no-untyped-def]
    for index in range(3):
        accept_notification(client_and_token[0], user_id=f"u{index}")
    assert len(api.get("/api/v1/notifications", {"page_size": "200"}).json()["results"]) == 3
    assert len(api.get("/api/v1/notifications", {"page_size": "2"}).json()["results"]) == 2


@pytest.mark.parametrize(
    "cursor",
    [
        "not base64!",
        base64.b64encode(b"p=not-a-time").decode(),
        base64.b64encode(b"p=99999-01-01T00:00:00Z").decode(),
        base64.b64encode(b"p=2026-01-01\x00").decode(),
        base64.b64encode(b"o=1&r=1&p=2026-01-01T00:00:00Z").decode(),
    ],
)
def test_a_cursor_we_did_not_issue_is_a_404_in_the_error_shape_never_a_500(api: APIClient, cursor: str) -> None:
    api.raise_request_exception = False
    response = api.get("/api/v1/notifications", {"cursor": cursor})
    assert response.status_code in (200, 404), response.content
    if response.status_code == 404:
        assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user_id": 7, "to": "ann@example.com", "message": "hi"}, "user_id"),
        ({"user_id": "u1", "to": "ann@example.com", "message": 1.5}, "message"),
        ({"user_id": "u1", "to": "ann@example.com", "message": "hi", "idempotency_key": 0}, "idempotency_key"),
        ({"user_id": "u1", "to": "ann@example.com", "message": "hi", "subject": True}, "subject"),
    ],
)
def test_a_number_where_the_schema_says_string_is_a_400_not_coerced(api: APIClient, body: dict[str, Any], field: str) -> None:
    response = api.post("/api/v1/notifications", body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == field
    assert Notification.objects.count() == 0


def test_a_recipient_field_of_the_wrong_type_is_a_400(api: APIClient) -> None:
    for body, field in (({"locale": 0}, "locale"), ({"push_tokens": [12345]}, "push_tokens.0")):
        response = api.put("/api/v1/recipients/u1", body, format="json")
        assert response.status_code == 400, response.content
        assert response.json()["error"]["field"] == field


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
