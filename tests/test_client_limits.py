"""Per-client limits over the API (issue #22): subscribers per topic and broadcasts per hour, each
a setting's default that an API client's own value (admin) overrides; past one the client is
answered in the one error shape naming the limit, and nothing is kept."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from notifications import services
from notifications.conf import get_config
from notifications.models import ApiClient, Broadcast, Recipient, TopicSubscription

from .fakes import override_notifications

pytestmark = pytest.mark.django_db


def _recipients(client: ApiClient, count: int) -> list[str]:
    user_ids = [f"u{n}" for n in range(count)]
    Recipient.objects.bulk_create(Recipient(client=client, user_id=u, email=f"{u}@example.com") for u in user_ids)
    return user_ids


def _subscribe(api: APIClient, user_ids: list[str]) -> Any:
    return api.post("/api/v1/topics/news/subscribers", {"user_ids": user_ids}, format="json")


def _broadcast(api: APIClient, key: str) -> Any:
    body = {"topic": "news", "channel": "email", "message": "We launched!", "subject": "Launch"}
    return api.post("/api/v1/broadcasts", body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_the_defaults_are_a_million_subscribers_a_topic_and_100_broadcasts_an_hour() -> None:
    assert (get_config().topic_subscribers_max, get_config().broadcasts_per_hour_max) == (1_000_000, 100)


def test_a_subscribe_past_topic_subscribers_max_is_a_400_naming_the_limit_and_subscribes_nobody(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    _recipients(client_and_token[0], 5)
    api.put("/api/v1/topics/news", {}, format="json")
    with override_notifications(TOPIC_SUBSCRIBERS_MAX=3):
        assert _subscribe(api, ["u0", "u1"]).json() == {"added": 2, "subscriber_count": 2}
        refused = _subscribe(api, ["u1", "u2", "u3"])  # u1 is there already: 4 would be one too many
        assert refused.status_code == 400, refused.content
        error = refused.json()["error"]
        assert error["code"] == "limit_exceeded"
        assert (error["limit"], error["value"], error["field"]) == ("TOPIC_SUBSCRIBERS_MAX", 3, "user_ids")
        assert TopicSubscription.objects.count() == 2  # the whole call refused
        assert _subscribe(api, ["u1", "u2"]).json() == {"added": 1, "subscriber_count": 3}  # up to the limit
        assert _subscribe(api, ["u0", "u1", "u2"]).json() == {"added": 0, "subscriber_count": 3}  # nothing new


def test_a_clients_own_topic_subscribers_max_overrides_the_setting(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    client = client_and_token[0]
    _recipients(client, 5)
    api.put("/api/v1/topics/news", {}, format="json")
    services.api_client_limits_set(client=client, topic_subscribers_max=2, broadcasts_per_hour_max=None)
    refused = _subscribe(api, ["u0", "u1", "u2"])
    assert refused.status_code == 400
    assert (refused.json()["error"]["limit"], refused.json()["error"]["value"]) == ("TOPIC_SUBSCRIBERS_MAX", 2)
    other = ApiClient.objects.create(name="other", token_hash="x" * 64)
    services.topic_upsert(client=other, key="news", name="news")
    _recipients(other, 3)
    # The other client keeps the setting's default.
    assert services.topic_subscribe(client=other, key="news", user_ids=["u0", "u1", "u2"]).subscriber_count == 3


def test_broadcasts_past_broadcasts_per_hour_max_are_429_with_retry_after_until_the_oldest_leaves_the_hour(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    client = client_and_token[0]
    _recipients(client, 2)
    api.put("/api/v1/topics/news", {}, format="json")
    _subscribe(api, ["u0", "u1"])
    with override_notifications(BROADCASTS_PER_HOUR_MAX=2):
        assert _broadcast(api, "b1").status_code == 202
        assert _broadcast(api, "b2").status_code == 202
        refused = _broadcast(api, "b3")
        assert refused.status_code == 429, refused.content
        error = refused.json()["error"]
        assert error["code"] == "limit_exceeded"
        assert (error["limit"], error["value"]) == ("BROADCASTS_PER_HOUR_MAX", 2)
        assert 3590 <= int(refused["Retry-After"]) <= 3600
        assert Broadcast.objects.count() == 2
        replay = _broadcast(api, "b1")  # a replay is not a new broadcast
        assert replay.status_code == 202 and replay.headers["Idempotent-Replayed"] == "true"
        # Once the first is more than an hour old, one more may start; the refused key was not kept.
        first = Broadcast.objects.get(idempotency_key="b1")
        Broadcast.objects.filter(pk=first.pk).update(created_at=timezone.now() - timedelta(minutes=61))
        assert _broadcast(api, "b3").status_code == 202
        assert _broadcast(api, "b4").status_code == 429


def test_a_clients_own_broadcasts_per_hour_max_overrides_the_setting(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    client = client_and_token[0]
    _recipients(client, 1)
    api.put("/api/v1/topics/news", {}, format="json")
    _subscribe(api, ["u0"])
    services.api_client_limits_set(client=client, topic_subscribers_max=None, broadcasts_per_hour_max=1)
    assert _broadcast(api, "b1").status_code == 202
    refused = _broadcast(api, "b2")
    assert refused.status_code == 429
    assert (refused.json()["error"]["limit"], refused.json()["error"]["value"]) == ("BROADCASTS_PER_HOUR_MAX", 1)


def test_a_superuser_sets_and_clears_a_clients_own_limits_in_the_admin(client_and_token: tuple[ApiClient, str]) -> None:
    client = client_and_token[0]
    browser = Client()
    browser.force_login(User.objects.create_superuser("root", password="root-pass-1"))
    page = f"/admin/notifications/apiclient/{client.pk}/change/"
    shown = browser.get(page).content.decode()
    assert 'name="topic_subscribers_max"' in shown and 'name="broadcasts_per_hour_max"' in shown

    saved = browser.post(page, {"topic_subscribers_max": "500", "broadcasts_per_hour_max": "7"})
    assert saved.status_code == 302, saved.content
    client.refresh_from_db()
    assert (client.topic_subscribers_max, client.broadcasts_per_hour_max) == (500, 7)
    assert client.name == "acme" and client.is_active  # nothing else of the client changed

    browser.post(page, {"topic_subscribers_max": "", "broadcasts_per_hour_max": ""})
    client.refresh_from_db()
    assert (client.topic_subscribers_max, client.broadcasts_per_hour_max) == (None, None)
    refused = browser.post(page, {"topic_subscribers_max": "0", "broadcasts_per_hour_max": ""})
    assert refused.status_code == 200  # the form again, with its error
    client.refresh_from_db()
    assert client.topic_subscribers_max is None
