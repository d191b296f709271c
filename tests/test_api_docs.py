"""API docs a client can follow: every operation of /api/schema/ has a summary and a description and
sits under its resource's tag, no schema name is doubled, and every request example in the schema is
a real request that, sent as it is (by a real client's token, to the real services, once what it
names exists), gets its operation's documented 2xx."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import socket
import time
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlencode

import pytest
import yaml
from django.test import Client
from rest_framework.test import APIClient

from notifications import services
from notifications.channels.sms.feedback import twilio_signature
from notifications.models import ApiClient
from notifications.services.inbox import inbox_token_issue
from notifications.services.policy.unsubscribe import UnsubscribeTarget, unsubscribe_token

from .factories import make_recipient
from .fakes import TWILIO_TOKEN, override_notifications

TAGS = {
    "notifications",
    "inbox",
    "recipients",
    "templates",
    "categories",
    "topics",
    "broadcasts",
    "suppressions",
    "client",
    "test",
    "providers",
    "health",
}
METHODS = {"get", "put", "post", "patch", "delete"}
MAILGUN_KEY = "key-mailgun-webhook-signing-docs"
PUBLIC_ADDRESS = "93.184.215.14"  # what the examples' webhook host resolves to here (no DNS in the sandbox)


def load_schema() -> dict[str, Any]:
    response = Client().get("/api/schema/")
    assert response.status_code == 200
    return cast(dict[str, Any], yaml.safe_load(response.content))


def operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            if method in METHODS:
                yield path, method, operation


def resource_of(path: str) -> str:
    """The resource a path is about: /api/v1/<resource>/..., /healthz and /readyz are health, and
    the unsubscribe link (/u/{token}) is a recipient's."""
    if path.startswith("/api/v1/"):
        return path.split("/")[3]
    return {"/healthz": "health", "/readyz": "health", "/u/{token}": "recipients"}[path]


def test_every_operation_has_a_summary_a_description_and_its_resources_tag(db: None) -> None:
    schema = load_schema()
    described = {tag["name"]: tag.get("description", "") for tag in schema["tags"]}
    assert set(described) == TAGS and all(described.values()), described
    seen = set()
    for path, method, operation in operations(schema):
        where = f"{method.upper()} {path}"
        assert operation.get("summary", "").strip(), where
        assert len(operation.get("description", "")) > len(operation["summary"]), where
        assert operation["tags"] == [resource_of(path)], where
        seen.add(operation["tags"][0])
    assert seen == TAGS


def test_no_schema_name_is_doubled(db: None) -> None:
    names = load_schema()["components"]["schemas"]
    doubled = [name for name in names if re.search(r"(Request|Response|Serializer|Enum)\1", name) or "Serializer" in name]
    assert doubled == []
    assert "TemplatePreviewRequest" in names and "TemplateRendering" in names


def test_the_limit_and_render_error_codes_are_documented_where_they_are_answered(db: None) -> None:
    paths = load_schema()["paths"]

    def answer(path: str, method: str, code: str) -> str:
        return str(paths[path][method]["responses"][code]["description"])

    assert "limit_exceeded" in answer("/api/v1/broadcasts", "post", "429")
    assert "BROADCASTS_PER_HOUR_MAX" in answer("/api/v1/broadcasts", "post", "429")
    assert "limit_exceeded" in answer("/api/v1/topics/{key}/subscribers", "post", "400")
    preview = answer("/api/v1/templates/{key}/preview", "post", "400")
    assert "render_limit" in preview and "template_render_failed" in preview
    create = answer("/api/v1/notifications", "post", "400")
    assert "render_limit" in create and "template_render_failed" in create


def request_examples(operation: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(media type, example name, value) of each request example the operation documents."""
    content = operation.get("requestBody", {}).get("content", {})
    return [
        (media, name, example["value"]) for media, body in content.items() for name, example in body.get("examples", {}).items()
    ]


def test_every_operation_with_a_request_body_documents_an_example_without_mutually_exclusive_fields(db: None) -> None:
    for path, method, operation in operations(load_schema()):
        if "requestBody" not in operation:
            continue
        examples = request_examples(operation)
        assert examples, f"{method.upper()} {path} has a request body and no example"
        for _, name, value in examples:
            assert not {"channel", "channels"} <= set(value), (path, name)
            assert not {"message", "template"} <= set(value), (path, name)


@pytest.fixture
def world(client_and_token: tuple[ApiClient, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[ApiClient]:
    """What the examples name, made through the services as a client would have: the recipients
    user-42 and user-43, the template welcome, the category marketing, the topic product-news with
    user-42 on it; the providers' signing secrets; and DNS for the examples' webhook host."""
    client = client_and_token[0]
    make_recipient(client, "user-42", email="ann@example.com", phone="+14155550123", locale="en")
    make_recipient(client, "user-43", email="bob@example.com")
    services.template_replace(
        client=client,
        key="welcome",
        variants=[
            {"channel": "email", "locale": "en", "subject": "Welcome, {{ name }}", "body": "Hello {{ name }}"},
            {"channel": "sms", "locale": "en", "body": "Hello {{ name }}"},
        ],
    )
    services.category_upsert(client=client, key="marketing", critical=False, default_enabled=True, max_per_recipient=None)
    services.topic_upsert(client=client, key="product-news", name="Product news")
    services.topic_subscribe(client=client, key="product-news", user_ids=["user-42"])
    real = socket.getaddrinfo

    def resolve(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.example.com":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC_ADDRESS, port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with override_notifications(TWILIO_AUTH_TOKEN=TWILIO_TOKEN, MAILGUN_WEBHOOK_SIGNING_KEY=MAILGUN_KEY):
        yield client


def path_values(client: ApiClient, path: str, operation: dict[str, Any]) -> str:
    """The path with each parameter filled by its documented example (an unsubscribe token, which
    only the platform can sign, is signed here for user-42 and the category marketing)."""
    for parameter in operation.get("parameters", []):
        if parameter["in"] != "path":
            continue
        if parameter["name"] == "token":
            value = unsubscribe_token(
                UnsubscribeTarget(client_id=client.pk, user_id="user-42", category="marketing", channel="email")
            )
        else:
            examples = parameter.get("examples")
            assert examples, f"{path}: the path parameter {parameter['name']} has no example"
            value = next(iter(examples.values()))["value"]
        path = path.replace("{" + parameter["name"] + "}", value)
    assert "{" not in path, path
    return path


def signed_as_the_provider(path: str, media: str, value: Any, headers: dict[str, str]) -> Any:
    """A provider's callback carries the provider's signature over the request, which no example can
    hold: the test signs the documented body as the provider would, with the configured secret."""
    if path.endswith("/twilio/status"):
        form = {name: [str(field)] for name, field in value.items()}
        headers["HTTP_X_TWILIO_SIGNATURE"] = twilio_signature(
            url=f"http://testserver{path}", params=form, auth_token=TWILIO_TOKEN
        )
    elif path.endswith("/mailgun/events"):
        stamp, token = str(int(time.time())), secrets.token_hex(25)
        signature = hmac.new(MAILGUN_KEY.encode(), (stamp + token).encode(), hashlib.sha256).hexdigest()
        value = {**value, "signature": {"timestamp": stamp, "token": token, "signature": signature}}
    return value


def _as_its_caller(api: APIClient, client: ApiClient, operation: dict[str, Any]) -> APIClient:
    """The client's API client, or for the inbox's user endpoints a client with user-42's token."""
    if not any("inboxUserToken" in scheme for scheme in operation.get("security", [])):
        return api
    user = APIClient()
    user.credentials(HTTP_AUTHORIZATION=f"Bearer {inbox_token_issue(client=client, user_id='user-42', ttl_seconds=60)[0]}")
    return user


def test_every_request_example_gets_its_operations_documented_status(world: ApiClient, api: APIClient) -> None:
    sent = 0
    for path, method, operation in operations(load_schema()):
        documented = {int(code) for code in operation["responses"] if code.startswith("2")}
        for media, name, value in request_examples(operation):
            url = path_values(world, path, operation)
            headers: dict[str, str] = {}
            body = signed_as_the_provider(path, media, value, headers)
            send = getattr(_as_its_caller(api, world, operation), method)
            if media == "application/json":
                response = send(url, body, format="json", **headers)
            else:
                assert media == "application/x-www-form-urlencoded", media
                response = send(url, urlencode(body), content_type=media, **headers)
            where = f"{method.upper()} {url} example {name!r}"
            assert response.status_code in documented, (where, response.status_code, response.content)
            if path == "/api/v1/notifications/batch":
                assert [item["status"] for item in response.json()["results"]] == [202] * len(body["notifications"]), where
            sent += 1
    assert sent >= 18


def test_a_string_padded_with_whitespace_past_its_documented_max_length_is_a_400(api: APIClient) -> None:
    schema = load_schema()["components"]["schemas"]["TopicRequest"]["properties"]["name"]
    padded = "news" + "\t" * schema["maxLength"]
    response = api.put("/api/v1/topics/product-news", {"name": padded}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "name"
    fits = api.put("/api/v1/topics/product-news", {"name": " news "}, format="json")
    assert fits.status_code == 201 and fits.json()["name"] == "news"
