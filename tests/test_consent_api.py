"""Categories, recipients' preferences and the one-click unsubscribe through the API on the real
services: what is sent, what is suppressed and why, and that a suppressed one reaches no provider."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from notifications import services
from notifications.models import DeliveryAttempt, Notification, Status
from notifications.services.policy.unsubscribe import UnsubscribeTarget, unsubscribe_token

from .factories import make_api_client, make_recipient
from .fakes import LocalSmtpServer, smtp_server_fixture  # noqa: F401  (fixture)


def put(api: APIClient, url: str, body: dict[str, Any]) -> Any:
    return api.put(url, body, format="json")


def notify(api: APIClient, key: str | None = None, **body: Any) -> Any:
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    payload = {"user_id": "u1", "to": "ann@example.com", **({} if "template" in body else {"message": "hello"}), **body}
    return api.post("/api/v1/notifications", payload, format="json", **headers)


def accepted(response: Any) -> Notification:
    assert response.status_code == 202, response.content
    return Notification.objects.get(pk=response.json()["id"])


def suppressed_count(channel: str, reason: str) -> float:
    return (
        REGISTRY.get_sample_value("notifications_suppressed_total", {"channel": channel, "reason": reason, "mode": "live"}) or 0.0
    )


@pytest.fixture
def categories(api: APIClient) -> None:
    for key, body in {
        "marketing": {"critical": False, "default_enabled": True},
        "digest": {"critical": False, "default_enabled": False},
        "security": {"critical": True, "default_enabled": True},
    }.items():
        assert put(api, f"/api/v1/categories/{key}", body).status_code == 201


# --- Categories ---------------------------------------------------------------------------------


def test_put_creates_a_category_with_201_replaces_it_with_200_and_get_reads_it(api: APIClient) -> None:
    assert put(api, "/api/v1/categories/marketing", {"default_enabled": False}).status_code == 201
    replaced = put(api, "/api/v1/categories/marketing", {"critical": True})
    assert replaced.status_code == 200
    body = api.get("/api/v1/categories/marketing").json()
    assert {k: body[k] for k in ("key", "critical", "default_enabled", "platform")} == {
        "key": "marketing",
        "critical": True,
        "default_enabled": True,
        "platform": False,
    }
    assert api.get("/api/v1/categories/nope").status_code == 404


def test_the_default_category_is_the_platforms_transactional_not_critical_and_enabled(api: APIClient) -> None:
    body = api.get("/api/v1/categories/transactional").json()
    assert (body["critical"], body["default_enabled"], body["platform"]) == (False, True, True)
    assert accepted(notify(api)).category.key == "transactional"


def test_a_clients_category_shadows_the_platforms_for_that_client_only(api: APIClient) -> None:
    assert put(api, "/api/v1/categories/transactional", {"critical": True}).status_code == 201
    _, token = make_api_client("other")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert api.get("/api/v1/categories/transactional").json()["critical"] is True
    assert other.get("/api/v1/categories/transactional").json()["critical"] is False


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/v1/categories/has space", {}, "category"),
        ("/api/v1/categories/ok", {"critical": "maybe"}, "critical"),
        ("/api/v1/categories/ok", {"crtical": True}, "crtical"),
    ],
)
def test_an_invalid_category_is_400_naming_the_field(api: APIClient, url: str, body: dict[str, Any], field: str) -> None:
    response = put(api, url, body)
    assert response.status_code == 400 and response.json()["error"]["field"] == field


def test_a_notification_of_an_unknown_category_is_400(api: APIClient) -> None:
    response = notify(api, category="nope")
    assert response.status_code == 400 and response.json()["error"]["field"] == "category"
    assert not Notification.objects.exists()


# --- Preferences --------------------------------------------------------------------------------


def test_preferences_of_a_recipient_nobody_stored_are_empty(api: APIClient) -> None:
    assert api.get("/api/v1/recipients/u9/preferences").json() == {"channels": {}, "categories": {}, "unsubscribed": []}


def test_put_preferences_replaces_them_and_keeps_the_recipients_addresses(
    api: APIClient, client_and_token: Any, categories: None
) -> None:
    make_recipient(client_and_token[0], "u1", email="ann@example.com")
    body = {"channels": {"sms": False}, "categories": {"marketing": False, "security": {"sms": False}}}
    response = put(api, "/api/v1/recipients/u1/preferences", body)
    assert response.status_code == 200, response.content
    assert api.get("/api/v1/recipients/u1/preferences").json() == {**body, "unsubscribed": []}
    assert api.get("/api/v1/recipients/u1").json()["email"] == "ann@example.com"
    # A recipient PUT replaces the addresses and keeps the preferences.
    put(api, "/api/v1/recipients/u1", {"email": "new@example.com"})
    assert api.get("/api/v1/recipients/u1/preferences").json()["channels"] == {"sms": False}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"channels": {"pigeon": False}}, "channels.pigeon"),
        ({"channels": {"sms": "no"}}, "channels.sms"),
        ({"categories": {"unknown": False}}, "categories.unknown"),
        ({"categories": {"marketing": "no"}}, "categories.marketing"),
        ({"categories": {"marketing": {"sms": 0}}}, "categories.marketing.sms"),
        ({"categories": {"marketing": {"fax": False}}}, "categories.marketing.fax"),
        ({"chanels": {}}, "chanels"),
    ],
)
def test_invalid_preferences_are_400_naming_the_entry(api: APIClient, categories: None, body: dict[str, Any], field: str) -> None:
    response = put(api, "/api/v1/recipients/u1/preferences", body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == field


# Every row of docs/api.md's resolution table: most specific first, then the category's default.
@pytest.mark.parametrize(
    ("category", "preferences", "expected"),
    [
        # category + channel wins over everything less specific
        ("marketing", {"channels": {"email": True}, "categories": {"marketing": {"email": False}}}, "preference"),
        ("marketing", {"channels": {"email": False}, "categories": {"marketing": {"email": True}}}, "sent"),
        ("digest", {"categories": {"digest": {"email": True}}}, "sent"),
        # category, when it says nothing of this channel
        ("marketing", {"channels": {"email": True}, "categories": {"marketing": False}}, "preference"),
        ("marketing", {"channels": {"email": False}, "categories": {"marketing": True}}, "sent"),
        ("marketing", {"categories": {"marketing": {"sms": False}}}, "sent"),
        # channel, when the category says nothing
        ("marketing", {"channels": {"email": False}}, "preference"),
        ("digest", {"channels": {"email": True}}, "sent"),
        # the category's default_enabled, when nothing is said
        ("marketing", {}, "sent"),
        ("digest", {}, "default_off"),
        # a critical category is always allowed
        ("security", {"channels": {"email": False}, "categories": {"security": False}}, "sent"),
        ("security", {"categories": {"security": {"email": False}}}, "sent"),
    ],
)
def test_each_row_of_the_preference_table(
    api: APIClient, categories: None, category: str, preferences: dict[str, Any], expected: str
) -> None:
    assert put(api, "/api/v1/recipients/u1/preferences", preferences).status_code == 200

    response = notify(api, category=category)

    notification = accepted(response)
    read = api.get(f"/api/v1/notifications/{notification.pk}").json()
    if expected == "sent":
        assert (read["status"], read["suppressed_reason"]) == ("queued", "")
    else:
        assert response.json()["status"] == "suppressed"
        assert (read["status"], read["suppressed_reason"], read["category"]) == ("suppressed", expected, category)


# --- Suppression --------------------------------------------------------------------------------


def test_a_suppressed_notification_is_202_idempotent_counted_and_never_reaches_a_provider(
    api: APIClient, categories: None, smtp_server: LocalSmtpServer, django_capture_on_commit_callbacks: Any
) -> None:
    put(api, "/api/v1/recipients/u1/preferences", {"categories": {"marketing": False}})
    before = suppressed_count("email", "preference")

    with django_capture_on_commit_callbacks(execute=True) as published:
        first = notify(api, key="promo-1", category="marketing")
        again = notify(api, key="promo-1", category="marketing")

    assert first.status_code == again.status_code == 202
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert published and suppressed_count("email", "preference") == before + 1  # once, not per replay
    notification = Notification.objects.get()
    assert (notification.status, notification.suppressed_reason, notification.enqueued_at) == (
        Status.SUPPRESSED,
        "preference",
        None,
    )
    # Delivery finds nothing to do: no claim, no attempt row, no SMTP session.
    assert services.notification_deliver(notification_id=notification.pk).outcome == "skipped"
    assert not DeliveryAttempt.objects.exists() and smtp_server.received == []
    assert api.get("/api/v1/notifications?status=suppressed").json()["results"][0]["id"] == str(notification.pk)


def test_a_preference_changed_after_accept_suppresses_it_at_the_claim_without_an_attempt(
    api: APIClient, categories: None, smtp_server: LocalSmtpServer
) -> None:
    notification = accepted(notify(api, category="marketing"))
    assert notification.status == Status.QUEUED
    put(api, "/api/v1/recipients/u1/preferences", {"channels": {"email": False}})

    outcome = services.notification_deliver(notification_id=notification.pk)

    notification.refresh_from_db()
    assert outcome.outcome == "suppressed"
    assert (notification.status, notification.suppressed_reason, notification.attempt_count) == (
        Status.SUPPRESSED,
        "preference",
        0,
    )
    assert not DeliveryAttempt.objects.exists() and smtp_server.received == []


def test_suppressed_counts_as_finished_for_retention(api: APIClient, categories: None) -> None:
    put(api, "/api/v1/recipients/u1/preferences", {"categories": {"marketing": False}})
    notification = accepted(notify(api, category="marketing"))
    Notification.objects.filter(pk=notification.pk).update(created_at=timezone.now() - timedelta(days=40))
    report = services.notification_purge(older_than=timedelta(days=30))
    assert report.notifications == 1 and not Notification.objects.exists()


# --- One-click unsubscribe ----------------------------------------------------------------------


def unsubscribe_path(notification: Notification) -> str:
    return urlsplit(notification.headers["List-Unsubscribe"].strip("<>")).path


def test_one_click_unsubscribe_opts_out_and_the_next_of_that_category_is_suppressed_while_a_critical_one_goes(
    api: APIClient, categories: None, smtp_server: LocalSmtpServer
) -> None:
    first = accepted(notify(api, category="marketing", subject="Sale"))
    assert services.notification_deliver(notification_id=first.pk).outcome == "delivered"
    [mail] = smtp_server.received
    link = mail.message["List-Unsubscribe"].strip().strip("<>")
    assert mail.message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"

    # As a mail provider does it: a form POST, no login, no cookie, no CSRF token.
    response = Client(enforce_csrf_checks=True).post(urlsplit(link).path, {"List-Unsubscribe": "One-Click"})

    assert response.status_code == 200 and b"You are unsubscribed" in response.content
    preferences = api.get("/api/v1/recipients/u1/preferences").json()
    assert preferences["categories"] == {"marketing": {"email": False}}
    assert [(m["category"], m["channel"]) for m in preferences["unsubscribed"]] == [("marketing", "email")]
    second = accepted(notify(api, category="marketing", subject="Sale again"))
    critical = accepted(notify(api, category="security", subject="Your code"))
    assert (second.status, second.suppressed_reason) == (Status.SUPPRESSED, "unsubscribed")
    assert services.notification_deliver(notification_id=critical.pk).outcome == "delivered"
    assert [m.message["Subject"] for m in smtp_server.received] == ["Sale", "Your code"]
    # Other channels of the category, and the category on other channels, are untouched.
    assert accepted(notify(api, category="marketing", channel="sms", to="+14155550123")).status == Status.QUEUED


def test_an_unsubscribe_between_accept_and_send_suppresses_it_as_unsubscribed(api: APIClient, categories: None) -> None:
    notification = accepted(notify(api, category="marketing"))
    assert Client().post(unsubscribe_path(notification), {"List-Unsubscribe": "One-Click"}).status_code == 200
    assert services.notification_deliver(notification_id=notification.pk).outcome == "suppressed"
    notification.refresh_from_db()
    assert (notification.status, notification.suppressed_reason) == (Status.SUPPRESSED, "unsubscribed")


def test_a_put_of_preferences_that_opts_back_in_ends_the_unsubscribe(api: APIClient, categories: None) -> None:
    notification = accepted(notify(api, category="marketing"))
    Client().post(unsubscribe_path(notification), {"List-Unsubscribe": "One-Click"})
    put(api, "/api/v1/recipients/u1/preferences", {"categories": {"marketing": {"email": True}}})
    assert api.get("/api/v1/recipients/u1/preferences").json()["unsubscribed"] == []
    assert accepted(notify(api, category="marketing")).status == Status.QUEUED


def test_the_unsubscribe_page_shows_a_button_that_posts_the_one_click_form(api: APIClient, categories: None) -> None:
    notification = accepted(notify(api, category="marketing"))
    page = Client().get(unsubscribe_path(notification))
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "<strong>marketing</strong>" in html and "<strong>email</strong>" in html
    assert '<form method="post">' in html and 'name="List-Unsubscribe" value="One-Click"' in html
    # Showing the page changes nothing; only the POST does.
    assert api.get("/api/v1/recipients/u1/preferences").json()["categories"] == {}


@pytest.mark.parametrize("method", ["get", "post"])
def test_a_tampered_or_foreign_token_is_a_400_page_and_changes_nothing(api: APIClient, categories: None, method: str) -> None:
    notification = accepted(notify(api, category="marketing"))
    path = unsubscribe_path(notification)
    payload, _, signature = path.removeprefix("/u/").rpartition(":")
    forged = unsubscribe_token(
        UnsubscribeTarget(client_id=notification.client_id, user_id="u2", category="marketing", channel="email")
    )
    tampered = [
        f"/u/{payload}:{signature[:-2]}xx",
        f"/u/{forged.rpartition(':')[0]}:{signature}",  # another recipient's payload, this signature
        "/u/not-a-token",
        "/u/%00%ff",
    ]
    for url in tampered:
        response = getattr(Client(), method)(url, {"List-Unsubscribe": "One-Click"})
        assert response.status_code == 400, (url, response.status_code)
        assert b"This link is not valid" in response.content
    assert api.get("/api/v1/recipients/u1/preferences").json()["categories"] == {}
    assert api.get("/api/v1/recipients/u2/preferences").json()["categories"] == {}


def test_a_post_without_the_one_click_body_changes_nothing(api: APIClient, categories: None) -> None:
    notification = accepted(notify(api, category="marketing"))
    response = Client().post(unsubscribe_path(notification), {"something": "else"})
    assert response.status_code == 400
    assert api.get("/api/v1/recipients/u1/preferences").json()["categories"] == {}


def test_a_critical_email_carries_no_unsubscribe_headers_and_its_templates_get_no_link(api: APIClient, categories: None) -> None:
    put(
        api,
        "/api/v1/templates/code",
        {
            "variants": [
                {"channel": "email", "locale": "en", "body": "Code{% if unsubscribe_url %} {{ unsubscribe_url }}{% endif %}"}
            ]
        },
    )
    notification = accepted(notify(api, category="security", template="code", data={}))
    assert notification.headers == {} and notification.message == "Code"
