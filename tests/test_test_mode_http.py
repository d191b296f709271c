"""Test mode over HTTP with a real worker process: a test token sends email, SMS, push and webhook
notifications; nothing reaches the local SMTP server, the fake Twilio and FCM or the webhook
receiver; GET /api/v1/test/messages shows each message rendered; the reserved addresses give
their outcomes and fire the client's status webhooks, verified with ``standardwebhooks``; and a
live token never sees a test row, nor a test token a live one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from standardwebhooks import Webhook

from notifications import services
from notifications.models import CapturedMessage, DeadLetter, Notification, Status, Suppression

from .factories import make_api_client
from .fakes import (  # noqa: F401  (fixtures)
    FakeProviderServer,
    LocalSmtpServer,
    override_notifications,
    provider_server_fixture,
    provider_settings,
    smtp_server_fixture,
)
from .helpers import PlatformProcess, platform_env, wait_until
from .live_servers import embedded_env, embedded_platform, manage

STATUS_PATH = "/status-events"
FINAL = {Status.DELIVERED, Status.FAILED, Status.DEAD}


class Api:
    """A token's requests to the live server, as an integration makes them."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url, self.session = base_url, requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def __call__(self, method: str, path: str, body: Any = None) -> requests.Response:
        return self.session.request(method, self.base_url + "/api/v1" + path, json=body, timeout=10)

    def send(self, **fields: Any) -> str:
        response = self("POST", "/notifications", {"user_id": "u1", **fields})
        assert response.status_code == 202, response.text
        return str(response.json()["id"])


@pytest.fixture
def worker(provider_server: FakeProviderServer, smtp_server: LocalSmtpServer, transactional_db: None) -> Any:
    """``rundramatiq`` with every channel pointed at the local fakes (were anything sent, they
    would receive it), short retries, and the receiver allowed as a webhook host."""
    env = platform_env(
        **{name: str(value) for name, value in provider_settings(provider_server).items()},
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(smtp_server.port),
        WEBHOOK_ALLOW_HOSTS=provider_server.host_port,
        RETRY_BASE_SECONDS="0.05",
        RETRY_CAP_SECONDS="0.2",
        RETRY_MAX_ATTEMPTS="3",
        STATUS_WEBHOOK_RETRY_POLICY="0.05:0.2:3",
    )
    with PlatformProcess("rundramatiq", "--processes", "1", "--threads", "4", env=env) as process:
        yield process


def test_a_test_token_runs_the_whole_pipeline_over_http_and_sends_nothing(
    live_server: Any, worker: PlatformProcess, provider_server: FakeProviderServer, smtp_server: LocalSmtpServer
) -> None:
    live_client, live_token = make_api_client("acme")
    _, test_token = services.api_client_test_token_issue(name="acme")
    live, test = Api(live_server.url, live_token), Api(live_server.url, test_token)
    receiver = provider_server.url(STATUS_PATH)
    with override_notifications(WEBHOOK_ALLOW_HOSTS=[provider_server.host_port]):
        assert test("PATCH", "/client", {"status_webhook_url": receiver}).status_code == 200
    secret = test("POST", "/client/webhook-secret").json()["webhook_secret"]
    # The live client's template, which its test side reads (templates are shared).
    variant = {"channel": "email", "locale": "en", "subject": "Welcome, {{ name }}", "body": "Hello {{ name }}"}
    html = {**variant, "html_body": "<p>Hello {{ name }}</p>"}
    assert live("PUT", "/templates/welcome", {"variants": [html]}).status_code == 201

    ids = {
        "email": test.send(to="ann@example.com", template="welcome", data={"name": "Ann"}),
        "sms": test.send(channel="sms", to="+14155550123", message="Your code is 1234"),
        "push": test.send(channel="push", to="device-token-1", subject="Shipped", message="Parcel 42 is on its way"),
        "webhook": test.send(channel="webhook", to=provider_server.url("/hooks/acme"), message="order.shipped"),
        "bounce": test.send(to="bounce@test.invalid", message="bounce me"),
        "complaint": test.send(to="complaint@test.invalid", message="complain"),
        "fail": test.send(to="fail@test.invalid", message="fail me"),
        "phone": test.send(channel="sms", to="+15005550001", message="refused"),
        "unregistered": test.send(channel="push", to="test-unregistered", message="gone"),
    }

    def ended_statuses() -> dict[str, str] | None:
        found = {name: test("GET", f"/notifications/{pk}").json()["status"] for name, pk in ids.items()}
        return found if set(found.values()) <= FINAL else None

    try:
        ended = wait_until(ended_statuses, timeout=60, interval=0.2)
    except AssertionError:
        raise AssertionError(f"not all ended; worker log:\n{worker.output()[-3000:]}") from None
    assert ended == {
        **dict.fromkeys(("email", "sms", "push", "webhook", "bounce", "complaint"), Status.DELIVERED),
        "fail": Status.DEAD,
        "phone": Status.FAILED,
        "unregistered": Status.FAILED,
    }

    # Each rendered, captured; nothing sent.
    captured = {item["notification_id"]: item for item in test("GET", "/test/messages").json()["results"]}
    assert set(captured) == {ids[name] for name in ("email", "sms", "push", "webhook", "bounce", "complaint")}
    email = captured[ids["email"]]
    assert (email["channel"], email["to"], email["subject"], email["body"]) == (
        "email",
        "ann@example.com",
        "Welcome, Ann",
        "Hello Ann",
    )
    assert email["html_body"] == "<p>Hello Ann</p>" and email["captured_at"]
    assert (captured[ids["sms"]]["to"], captured[ids["sms"]]["body"]) == ("+14155550123", "Your code is 1234")
    assert (captured[ids["push"]]["subject"], captured[ids["webhook"]]["body"]) == ("Shipped", "order.shipped")

    # The reserved addresses' outcomes, on the test side only.
    detail = {name: test("GET", f"/notifications/{ids[name]}").json() for name in ("bounce", "complaint")}
    assert (detail["bounce"]["provider_status"], detail["complaint"]["provider_status"]) == ("bounced", "complained")
    assert DeadLetter.objects.filter(notification_id=ids["fail"]).count() == 1
    assert Notification.objects.get(pk=ids["fail"]).attempt_count == 3
    listed = {(s["address"], s["reason"]) for s in test("GET", "/suppressions").json()["results"]}
    assert listed == {
        ("bounce@test.invalid", "bounced"),
        ("complaint@test.invalid", "complained"),
        ("test-unregistered", "unregistered"),
    }
    assert live("GET", "/suppressions").json()["results"] == []

    # The status webhooks, each verified with standardwebhooks.
    expected = {(ids[name], "notification.delivered") for name in ("email", "sms", "push", "webhook", "bounce", "complaint")} | {
        (ids["bounce"], "notification.bounced"),
        (ids["complaint"], "notification.complained"),
        (ids["fail"], "notification.dead"),
        (ids["phone"], "notification.failed"),
        (ids["unregistered"], "notification.failed"),
    }

    def events() -> set[tuple[str, str]] | None:
        posts = [request for request in provider_server.requests if request.path == STATUS_PATH]
        found = {(post.json["data"]["notification_id"], post.json["type"]) for post in posts}
        return found if found >= expected else None

    wait_until(events, timeout=30, message="status webhooks")
    for post in (request for request in provider_server.requests if request.path == STATUS_PATH):
        event = Webhook(secret).verify(post.body, post.headers)
        assert post.headers["webhook-id"] == event["data"]["event_id"]

    # Nothing reached a provider, the SMTP server or the webhook receiver: only status events came.
    assert smtp_server.received == []
    assert {request.path for request in provider_server.requests} == {STATUS_PATH}

    # Test and live never mix, both ways.
    live_id = live.send(to="live@example.com", message="live", send_at="2099-01-01T00:00:00Z")
    assert {item["id"] for item in live("GET", "/notifications").json()["results"]} == {live_id}
    assert all(live("GET", f"/notifications/{pk}").status_code == 404 for pk in ids.values())
    assert test("GET", f"/notifications/{live_id}").status_code == 404
    assert live_id not in {item["id"] for item in test("GET", "/notifications?page_size=200").json()["results"]}
    assert live("GET", "/test/messages").status_code == 403
    assert not CapturedMessage.objects.filter(client=live_client).exists()
    assert not Suppression.objects.filter(client=live_client).exists()

    assert test("DELETE", "/test/messages").status_code == 204
    assert test("GET", "/test/messages").json()["results"] == []


def test_a_test_token_on_the_embedded_default_captures_instead_of_writing_the_email(tmp_path: Path) -> None:
    """`make run`'s SQLite, in-process broker and workers: the test token from
    `create_api_client NAME --test` is captured, and no email file is written."""
    with embedded_platform(tmp_path) as (server, _):
        printed = manage(embedded_env(tmp_path), "create_api_client", "embedded", "--test")
        token = printed.strip().splitlines()[-1]
        assert token.startswith("ntf_test_")
        test = Api(server.base_url, token)
        notification_id = test.send(to="ann@example.com", subject="Hi", message="Hello Ann")
        wait_until(lambda: test("GET", f"/notifications/{notification_id}").json()["status"] == Status.DELIVERED, timeout=30)
        [captured] = test("GET", "/test/messages").json()["results"]
        assert (captured["notification_id"], captured["subject"], captured["body"]) == (notification_id, "Hi", "Hello Ann")
    mail = tmp_path / "mail"
    assert not mail.exists() or not any(mail.iterdir())
