"""A token that comes in a URL is not recorded in a trace: the live stream's span (made in
platform/asgi.py) and the Django request spans carry the target with ``token`` and ``ticket``
redacted (notifications/request_targets.py)."""

from __future__ import annotations

import asyncio
from platform.asgi import application
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rest_framework.test import APIClient

from notifications.services.inbox import inbox_token_issue
from notifications.tracing.request_targets import redacted_target

from .factories import make_api_client
from .test_tracing import spans  # noqa: F401  (fixture)


def test_a_targets_secret_parameters_are_redacted_and_the_rest_kept_as_sent() -> None:
    assert redacted_target("/api/v1/inbox/stream?token=abc.def&x=1") == "/api/v1/inbox/stream?token=REDACTED&x=1"
    assert redacted_target("/s?ticket=t1&token=") == "/s?ticket=REDACTED&token=REDACTED"
    assert redacted_target("/api/v1/inbox/items?status=unread&cursor=a%2Bb") == "/api/v1/inbox/items?status=unread&cursor=a%2Bb"
    assert redacted_target("/api/v1/notifications") == "/api/v1/notifications"
    assert redacted_target("/s?%74oken=abc") == "/s?token=REDACTED"  # Django decodes the name too


def _values(exporter: InMemorySpanExporter) -> list[str]:
    return [str(value) for span in exporter.get_finished_spans() for value in (span.attributes or {}).values()]


def _stream_request(token: str) -> list[dict[str, Any]]:
    """GET /api/v1/inbox/stream?token=… on the ASGI application, the client gone after the first event."""
    sent: list[dict[str, Any]] = []
    first_event = asyncio.Event()
    body_read = False

    async def receive() -> dict[str, Any]:
        nonlocal body_read
        if not body_read:
            body_read = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await first_event.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and b"event: counts" in message.get("body", b""):
            first_event.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/api/v1/inbox/stream",
        "raw_path": b"/api/v1/inbox/stream",
        "query_string": f"token={token}".encode(),
        "headers": [(b"host", b"testserver")],
        "server": ("testserver", 80),
        "client": ("127.0.0.1", 5000),
        "root_path": "",
    }
    asyncio.run(asyncio.wait_for(application(scope, receive, send), timeout=30))
    return sent


@pytest.mark.django_db(transaction=True)
def test_a_trace_of_a_stream_request_carries_no_token(spans: InMemorySpanExporter) -> None:  # noqa: F811
    client, _ = make_api_client("shop")
    token, _ = inbox_token_issue(client=client, user_id="ann", ttl_seconds=600)
    sent = _stream_request(token)
    assert sent[0]["status"] == 200
    (span,) = [span for span in spans.get_finished_spans() if span.name == "GET /api/v1/inbox/stream"]
    assert span.attributes is not None
    assert span.attributes["http.target"] == "/api/v1/inbox/stream?token=REDACTED"
    assert span.attributes["http.status_code"] == 200
    assert not [value for value in _values(spans) if token in value]


@pytest.mark.django_db(transaction=True)
def test_a_django_request_span_records_its_query_with_the_token_redacted(spans: InMemorySpanExporter) -> None:  # noqa: F811
    client, _ = make_api_client("shop")
    token, _ = inbox_token_issue(client=client, user_id="ann", ttl_seconds=600)
    APIClient().get("/api/v1/inbox/items", {"status": "unread", "token": token})
    targets = [span.attributes.get("http.target") for span in spans.get_finished_spans() if span.attributes]
    assert "/api/v1/inbox/items?status=unread&token=REDACTED" in targets
    assert not [value for value in _values(spans) if token in value]
