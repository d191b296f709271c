"""Test mode: test tokens (ntf_test_...), a client's test side kept apart from its live side, the
capture sink in place of every provider with its reserved addresses, captured messages in the API
and the admin, and the mode label on the metrics. The run over HTTP with a real worker process is
tests/test_test_mode_http.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from django.contrib.auth.models import User
from django.test import Client
from dramatiq.brokers.stub import StubBroker
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from notifications import actors, services
from notifications.conf import BULK_QUEUE, HIGH_QUEUE, STATUS_EVENT_QUEUE
from notifications.errors import ValidationFailed
from notifications.models import (
    ApiClient,
    CapturedMessage,
    DeadLetter,
    Notification,
    ProviderStatus,
    Recipient,
    Status,
    Suppression,
)

from .factories import make_api_client, make_recipient
from .fakes import FakeProviderServer, LocalSmtpServer, override_notifications, provider_server_fixture, smtp_server_fixture  # noqa: F401
from .stub_broker import drain, stub_broker_with, stub_worker_on

ACTORS = (actors.deliver_notification, actors.deliver_bulk_notification, actors.deliver_status_event)


def api_for(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


@pytest.fixture
def sides(db: None) -> tuple[ApiClient, APIClient, ApiClient, APIClient]:
    """The client acme's live side and test side, each with its token's API client."""
    live, live_token = make_api_client("acme")
    test, test_token = services.api_client_test_token_issue(name="acme")
    return live, api_for(live_token), test, api_for(test_token)


def send(api: APIClient, **fields: Any) -> str:
    body = {"user_id": "u1", **({} if "template" in fields else {"message": "hello"}), **fields}
    response = api.post("/api/v1/notifications", body, format="json")
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


# --- Tokens --------------------------------------------------------------------------------------


def test_live_and_test_tokens_say_their_mode_and_the_test_side_belongs_to_the_live_client(sides: Any) -> None:
    live, live_api, test, test_api = sides
    assert live.token_prefix.startswith("ntf_live_") and test.token_prefix.startswith("ntf_test_")
    assert (test.name, test.is_test, test.live_client_id, str(test)) == ("acme", True, live.pk, "acme (test)")
    assert live_api.get("/api/v1/client").status_code == test_api.get("/api/v1/client").status_code == 200


def test_the_request_log_names_a_test_tokens_client_as_its_test_mode(sides: Any, caplog: pytest.LogCaptureFixture) -> None:
    _, live_api, _, test_api = sides
    with caplog.at_level("INFO", logger="notifications.request"):
        live_api.get("/api/v1/client")
        test_api.get("/api/v1/client")
    assert [getattr(r, "client", None) for r in caplog.records if r.name == "notifications.request"] == ["acme", "acme (test)"]


def test_a_second_test_token_ends_the_first_and_revoking_the_client_ends_both(sides: Any) -> None:
    live, _, test, test_api = sides
    _, second = services.api_client_test_token_issue(name="acme")
    assert test_api.get("/api/v1/notifications").status_code == 401
    assert api_for(second).get("/api/v1/notifications").status_code == 200
    services.api_client_revoke(client=live)
    assert api_for(second).get("/api/v1/notifications").status_code == 401
    with pytest.raises(ValidationFailed, match="revoked"):
        services.api_client_test_token_issue(name="acme")


# --- Each side sees only its own -----------------------------------------------------------------


def test_a_live_token_never_sees_test_rows_and_a_test_token_never_sees_live_ones(sides: Any) -> None:
    live, live_api, test, test_api = sides
    for api in (live_api, test_api):
        assert api.put("/api/v1/recipients/u1", {"email": "ann@example.com"}, format="json").status_code == 201
        assert api.put("/api/v1/topics/news", {"name": "News"}, format="json").status_code in (200, 201)
    live_id, test_id = send(live_api, to="live@example.com"), send(test_api, to="test@example.com")
    Suppression.objects.create(client=test, channel="email", address="gone@example.com", reason="bounced")

    for api, own, other in ((live_api, live_id, test_id), (test_api, test_id, live_id)):
        listed = {item["id"] for item in api.get("/api/v1/notifications").json()["results"]}
        assert listed == {own}
        assert api.get(f"/api/v1/notifications/{other}").status_code == 404
        assert api.post(f"/api/v1/notifications/{other}/cancel").status_code == 404
    assert test_api.get("/api/v1/suppressions").json()["results"][0]["address"] == "gone@example.com"
    assert live_api.get("/api/v1/suppressions").json()["results"] == []
    assert Recipient.objects.filter(user_id="u1").count() == 2  # one a side, with the same user_id


def test_templates_and_categories_are_shared_read_by_both_and_changed_only_with_the_live_token(sides: Any) -> None:
    _, live_api, _, test_api = sides
    variants = [{"channel": "email", "locale": "en", "subject": "Hi {{ name }}", "body": "Hello {{ name }}"}]
    assert live_api.put("/api/v1/templates/welcome", {"variants": variants}, format="json").status_code == 201
    assert live_api.put("/api/v1/categories/news", {"critical": False, "default_enabled": True}, format="json").status_code == 201
    assert test_api.get("/api/v1/templates/welcome").json()["platform"] is False
    assert test_api.get("/api/v1/categories/news").status_code == 200
    test_id = send(test_api, to="t@example.com", template="welcome", data={"name": "Ann"}, category="news")
    assert Notification.objects.get(pk=test_id).subject == "Hi Ann"

    refused = test_api.put("/api/v1/templates/welcome", {"variants": variants}, format="json")
    assert refused.status_code == 403 and "live token" in refused.json()["error"]["message"]
    assert test_api.put("/api/v1/categories/news", {"critical": True}, format="json").status_code == 403


# --- Captured messages API -----------------------------------------------------------------------


def test_captured_messages_answer_a_live_token_403_and_a_test_token_its_own_list(sides: Any) -> None:
    live, live_api, test, test_api = sides
    refused = live_api.get("/api/v1/test/messages")
    assert refused.status_code == 403 and refused.json()["error"]["code"]
    assert live_api.delete("/api/v1/test/messages").status_code == 403
    own = Notification.objects.get(pk=send(test_api, to="t@example.com"))
    other_test, _ = services.api_client_test_token_issue(name="other")
    other = Notification.objects.get(pk=send(api_for(services.api_client_test_token_issue(name="other")[1]), to="o@example.com"))
    CapturedMessage.objects.create(client=test, notification=own, channel="email", to="t@example.com", body="hello")
    CapturedMessage.objects.create(client=other.client, notification=other, channel="email", to="o@example.com", body="x")

    page = test_api.get("/api/v1/test/messages?page_size=1").json()
    assert set(page) == {"next", "previous", "results"} and page["next"] is None
    [item] = page["results"]
    assert set(item) == {"notification_id", "channel", "to", "subject", "body", "html_body", "captured_at"}
    assert (item["notification_id"], item["to"]) == (str(own.pk), "t@example.com")
    assert test_api.delete("/api/v1/test/messages").status_code == 204
    assert test_api.get("/api/v1/test/messages").json()["results"] == []
    assert CapturedMessage.objects.filter(client=other_test).count() == 1  # another client's test side keeps its own


# --- Admin ---------------------------------------------------------------------------------------


@pytest.fixture
def superuser(db: None) -> Client:
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="root-pass-1"))
    return admin


def test_the_admin_issues_a_test_token_once_and_filters_test_and_live(superuser: Client, sides: Any) -> None:
    live, live_api, test, test_api = sides
    response = superuser.post(
        "/admin/notifications/apiclient/",
        {"action": "issue_test_token_selected", "_selected_action": [live.pk], "index": "0"},
        follow=True,
    )
    messages = [str(m) for m in response.context["messages"]]
    [token] = [word for message in messages for word in message.split() if word.startswith("ntf_test_")]
    assert api_for(token).get("/api/v1/notifications").status_code == 200
    assert test_api.get("/api/v1/notifications").status_code == 401  # the one before ends
    assert "1 issued a test token, 0 skipped" in messages

    live_id, test_id = send(live_api, to="l@example.com"), send(api_for(token), to="t@example.com")
    test_rows = superuser.get("/admin/notifications/notification/?mode=test").content.decode()
    live_rows = superuser.get("/admin/notifications/notification/?mode=live").content.decode()
    assert test_id[:8] in test_rows and live_id[:8] not in test_rows
    assert live_id[:8] in live_rows and test_id[:8] not in live_rows
    clients = superuser.get("/admin/notifications/apiclient/?mode=test").content.decode()
    assert "ntf_test_" in clients and live.token_prefix not in clients


def test_the_admin_shows_a_captured_message_as_rendered(superuser: Client, sides: Any) -> None:
    _, _, test, test_api = sides
    notification = Notification.objects.get(pk=send(test_api, to="t@example.com"))
    captured = CapturedMessage.objects.create(
        client=test, notification=notification, channel="email", to="t@example.com", subject="S", body="B", html_body="<p>H</p>"
    )
    assert "t@example.com" in superuser.get("/admin/notifications/capturedmessage/").content.decode()
    page = superuser.get(f"/admin/notifications/capturedmessage/{captured.pk}/change/").content.decode()
    assert "&lt;p&gt;H&lt;/p&gt;" in page and str(notification.pk) in page


# --- The capture sink and its reserved addresses (StubBroker, an in-process worker) ---------------


@pytest.fixture
def stub_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubBroker]:
    with stub_broker_with(monkeypatch, ACTORS) as broker:
        yield broker


@pytest.fixture
def stub_worker(stub_broker: StubBroker, transactional_db: None) -> Iterator[dramatiq.Worker]:
    with stub_worker_on(stub_broker) as worker:
        yield worker


def sent_total(**labels: str) -> float:
    return REGISTRY.get_sample_value("notifications_sent_total", labels) or 0.0


def test_the_capture_sink_replaces_every_provider_and_the_reserved_addresses_force_their_outcomes(
    stub_broker: StubBroker,
    stub_worker: dramatiq.Worker,
    provider_server: FakeProviderServer,
    smtp_server: LocalSmtpServer,
) -> None:
    live, _ = make_api_client("acme")
    test, token = services.api_client_test_token_issue(name="acme")
    api = api_for(token)
    make_recipient(test, "u1", push_tokens=["test-unregistered"])
    before = sent_total(channel="email", status="delivered", mode="test")
    with override_notifications(WEBHOOK_ALLOW_HOSTS=[provider_server.host_port], RETRY_BASE_SECONDS=0.01, RETRY_MAX_ATTEMPTS=2):
        ids = {
            "email": send(api, to="ann@example.com", subject="Hi"),
            "sms": send(api, channel="sms", to="+14155550123"),
            "push": send(api, channel="push", to="device-1"),
            "webhook": send(api, channel="webhook", to=provider_server.url("/hook")),
            "bounce": send(api, to="bounce@test.invalid"),
            "complaint": send(api, to="complaint@test.invalid"),
            "fail": send(api, to="fail@test.invalid"),
            "phone": send(api, channel="sms", to="+15005550001"),
            "unregistered": send(api, channel="push"),
        }
        drain(stub_broker, stub_worker, (HIGH_QUEUE, BULK_QUEUE, STATUS_EVENT_QUEUE))

    def row(name: str) -> Notification:
        return Notification.objects.get(pk=ids[name])

    assert smtp_server.received == [] and provider_server.requests == []
    for name in ("email", "sms", "push", "webhook", "bounce", "complaint"):
        assert row(name).status == Status.DELIVERED, name
    assert (row("bounce").provider_status, row("complaint").provider_status) == (
        ProviderStatus.BOUNCED,
        ProviderStatus.COMPLAINED,
    )
    assert (row("fail").status, row("fail").attempt_count) == (Status.DEAD, 2)
    assert (row("phone").status, row("unregistered").status) == (Status.FAILED, Status.FAILED)
    assert DeadLetter.objects.filter(notification_id=ids["fail"]).count() == 1
    suppressed = set(Suppression.objects.filter(client=test).values_list("address", "reason"))
    assert suppressed == {
        ("bounce@test.invalid", "bounced"),
        ("complaint@test.invalid", "complained"),
        ("test-unregistered", "unregistered"),
    }
    assert not Suppression.objects.filter(client=live).exists()
    assert Recipient.objects.get(client=test, user_id="u1").push_tokens == []
    captured = {m.notification_id for m in CapturedMessage.objects.filter(client=test)}
    assert captured == {row(name).pk for name in ("email", "sms", "push", "webhook", "bounce", "complaint")}
    assert sent_total(channel="email", status="delivered", mode="test") - before == 3
    # The next email to a bounced address is suppressed on the test side, as in live mode.
    again = Notification.objects.get(pk=send(api, to="bounce@test.invalid"))
    assert (again.status, again.suppressed_reason) == (Status.SUPPRESSED, "bounced")
