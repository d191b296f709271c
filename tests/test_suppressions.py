"""The suppression list: what accept does with a suppressed address, the lookups other services
use, the API (list, filter, remove) and the admin (search, support staff remove, audited)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from notifications import services
from notifications.models import ApiClient, Status, SuppressedReason, Suppression, SuppressionReason

from .factories import accept_notification, make_api_client

pytestmark = pytest.mark.django_db
User = get_user_model()
ADMIN_URL = "/admin/notifications/suppression/"


def suppress(client: ApiClient, address: str, channel: str = "email", reason: str = SuppressionReason.BOUNCED) -> None:
    assert services.policy.suppressions.suppression_add(client_id=client.pk, channel=channel, address=address, reason=reason)


def test_every_suppression_reason_is_a_suppressed_reason_of_the_notification() -> None:
    assert set(SuppressionReason.values) <= set(SuppressedReason.values)


def test_adding_an_address_twice_keeps_the_first_reason() -> None:
    client, _ = make_api_client()
    suppress(client, "ann@example.com", reason=SuppressionReason.BOUNCED)
    assert not services.policy.suppressions.suppression_add(
        client_id=client.pk, channel="email", address="ann@example.com", reason=SuppressionReason.COMPLAINED
    )
    assert list(Suppression.objects.values_list("reason", flat=True)) == ["bounced"]


def test_the_lookups_say_why_an_address_is_suppressed_per_client_and_channel() -> None:
    client, _ = make_api_client()
    other, _ = make_api_client()
    suppress(client, "ann@example.com", reason=SuppressionReason.COMPLAINED)
    suppress(client, "+14155550123", channel="sms", reason=SuppressionReason.UNSUBSCRIBED_SMS)

    assert services.address_suppressed_reason(client_id=client.pk, channel="email", address="ann@example.com") == "complained"
    assert services.address_suppressed_reason(client_id=client.pk, channel="sms", address="ann@example.com") == ""
    assert services.address_suppressed_reason(client_id=other.pk, channel="email", address="ann@example.com") == ""
    with CaptureQueriesContext(connection) as queries:
        reasons = services.addresses_suppressed_reasons(
            client_id=client.pk,
            addresses=[("email", "ann@example.com"), ("sms", "+14155550123"), ("push", "token"), ("email", "bob@example.com")],
        )
    assert reasons == {("email", "ann@example.com"): "complained", ("sms", "+14155550123"): "unsubscribed_sms"}
    assert len(queries.captured_queries) == 1


def test_accepting_to_a_suppressed_address_costs_one_index_probe_and_ends_suppressed() -> None:
    client, _ = make_api_client()
    suppress(client, "ann@example.com")
    request = services.NotificationRequest(user_id="u1", message="hello", to="ann@example.com")
    with CaptureQueriesContext(connection) as queries:
        result = services.notification_accept(client=client, request=request, idempotency_key="k1", fingerprint="f1")
    suppression_reads = [q["sql"] for q in queries.captured_queries if "notifications_suppression" in q["sql"]]
    assert len(suppression_reads) == 1
    assert result.body["status"] == Status.SUPPRESSED
    assert accept_notification(client, to="bob@example.com").status == Status.QUEUED


# --- API -----------------------------------------------------------------------------------------


def test_a_notification_accepted_before_its_address_bounced_is_suppressed_at_delivery() -> None:
    from notifications.models import DeliveryAttempt
    from notifications.services.policy.suppressions import suppression_add

    client, _ = make_api_client()
    notification = accept_notification(client, to="late@example.com")
    assert notification.status == Status.QUEUED
    suppression_add(client_id=client.pk, channel="email", address="late@example.com", reason=SuppressionReason.BOUNCED)
    # The pending read that consent already makes carries the suppression: no query of its own.
    assert services.notification_deliver(notification_id=notification.pk).outcome == "suppressed"
    notification.refresh_from_db()
    assert (notification.status, notification.suppressed_reason) == (Status.SUPPRESSED, SuppressedReason.BOUNCED)
    assert not DeliveryAttempt.objects.filter(notification=notification).exists()


@pytest.fixture
def acme(client_and_token: tuple[ApiClient, str]) -> ApiClient:
    return client_and_token[0]


def test_the_api_lists_the_clients_own_suppressions_newest_first_with_filters(api: APIClient, acme: ApiClient) -> None:
    other, _ = make_api_client()
    suppress(acme, "ann@example.com")
    suppress(acme, "+14155550123", channel="sms", reason=SuppressionReason.UNSUBSCRIBED_SMS)
    suppress(other, "carl@example.com")

    page = api.get("/api/v1/suppressions").json()
    assert [(s["channel"], s["address"], s["reason"]) for s in page["results"]] == [
        ("sms", "+14155550123", "unsubscribed_sms"),
        ("email", "ann@example.com", "bounced"),
    ]
    assert page["next"] is None and set(page["results"][0]) == {"channel", "address", "reason", "created_at", "notification"}
    assert [s["address"] for s in api.get("/api/v1/suppressions", {"channel": "email"}).json()["results"]] == ["ann@example.com"]
    assert [s["address"] for s in api.get("/api/v1/suppressions", {"address": "+14155550123"}).json()["results"]] == [
        "+14155550123"
    ]
    two_pages = api.get("/api/v1/suppressions", {"page_size": 1}).json()
    assert len(two_pages["results"]) == 1 and two_pages["next"]
    for bad in ({"channel": "fax"}, {"channel": ""}, {"address": ""}):
        response = api.get("/api/v1/suppressions", bad)
        assert response.status_code == 400 and response.json()["error"]["field"] in bad


def test_deleting_a_suppression_lets_the_address_be_sent_to_again(api: APIClient, acme: ApiClient) -> None:
    other, _ = make_api_client()
    suppress(acme, "ann@example.com")
    suppress(other, "ann@example.com")
    assert accept_notification(acme, to="ann@example.com").status == Status.SUPPRESSED

    response = api.delete("/api/v1/suppressions/ann@example.com")

    assert response.status_code == 204
    assert accept_notification(acme, to="ann@example.com").status == Status.QUEUED
    assert Suppression.objects.filter(client=other).count() == 1  # the other client's is its own
    again = api.delete("/api/v1/suppressions/ann@example.com")
    assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"


def test_deleting_with_a_channel_removes_only_that_channels_suppression(api: APIClient, acme: ApiClient) -> None:
    token = "shared-address-token"
    suppress(acme, token, channel="push", reason=SuppressionReason.UNREGISTERED)
    suppress(acme, token, channel="sms", reason=SuppressionReason.UNSUBSCRIBED_SMS)
    assert api.delete(f"/api/v1/suppressions/{token}?channel=email").status_code == 404
    assert api.delete(f"/api/v1/suppressions/{token}?channel=fax").status_code == 400
    assert api.delete(f"/api/v1/suppressions/{token}?channel=push").status_code == 204
    assert list(Suppression.objects.values_list("channel", flat=True)) == ["sms"]


@pytest.mark.parametrize("address", ["ann%00@example.com", "a" * 2001])
def test_deleting_an_address_with_a_nul_or_over_2000_characters_is_a_400_naming_the_address(
    api: APIClient, acme: ApiClient, address: str
) -> None:
    response = api.delete(f"/api/v1/suppressions/{address}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "address"


def test_the_suppression_endpoints_need_a_token(db: None) -> None:
    assert APIClient().get("/api/v1/suppressions").status_code == 401
    assert APIClient().delete("/api/v1/suppressions/ann@example.com").status_code == 401


# --- Admin ---------------------------------------------------------------------------------------


@pytest.fixture
def support() -> Client:
    group = Group.objects.get(name="support")  # with the permissions migration 0008 gave it
    user = User.objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(group)
    browser = Client()
    browser.force_login(user)
    return browser


def test_support_staff_search_suppressions_and_remove_one_which_is_audited(support: Client) -> None:
    client, _ = make_api_client("acme")
    suppress(client, "ann@example.com")
    suppress(client, "bob@example.com", reason=SuppressionReason.COMPLAINED)
    suppression = Suppression.objects.get(address="ann@example.com")

    listing = support.get(ADMIN_URL, {"q": "ann@example.com"})
    assert listing.status_code == 200
    assert b"ann@example.com" in listing.content and b"bob@example.com" not in listing.content
    assert support.get(ADMIN_URL, {"reason__exact": "complained"}).content.count(b"bob@example.com") >= 1
    confirm = support.get(f"{ADMIN_URL}{suppression.pk}/delete/")
    assert confirm.status_code == 200

    response = support.post(f"{ADMIN_URL}{suppression.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert list(Suppression.objects.values_list("address", flat=True)) == ["bob@example.com"]
    [entry] = LogEntry.objects.filter(object_id=str(suppression.pk), content_type__model="suppression")
    assert (entry.action_flag, entry.user.get_username()) == (DELETION, "sam")
    assert accept_notification(client, to="ann@example.com").status == Status.QUEUED


def test_staff_without_the_support_role_cannot_remove_a_suppression(db: None) -> None:
    client, _ = make_api_client()
    suppress(client, "ann@example.com")
    suppression = Suppression.objects.get()
    user: Any = User.objects.create_user("eve", password="x-pass-1", is_staff=True)
    browser = Client()
    browser.force_login(user)
    assert browser.post(f"{ADMIN_URL}{suppression.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Suppression.objects.count() == 1
