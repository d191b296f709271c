"""Topics over the API: create and rename, subscribe (idempotent, up to 1,000, stored recipients
only), unsubscribe, and each client seeing its own."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from notifications.models import ApiClient, Recipient, TopicSubscription

from .factories import make_api_client

pytestmark = pytest.mark.django_db


def _recipients(client: ApiClient, count: int) -> list[str]:
    user_ids = [f"u{n}" for n in range(count)]
    Recipient.objects.bulk_create(Recipient(client=client, user_id=u, email=f"{u}@example.com") for u in user_ids)
    return user_ids


def test_put_creates_then_renames_a_topic_and_get_counts_its_subscribers(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    created = api.put("/api/v1/topics/product-news", {"name": "Product news"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["subscriber_count"] == 0
    renamed = api.put("/api/v1/topics/product-news", {"name": "News"}, format="json")
    assert renamed.status_code == 200
    assert renamed.json()["name"] == "News"

    _recipients(client_and_token[0], 3)
    api.post("/api/v1/topics/product-news/subscribers", {"user_ids": ["u0", "u1", "u2"]}, format="json")
    fetched = api.get("/api/v1/topics/product-news")
    assert fetched.status_code == 200
    assert fetched.json()["subscriber_count"] == 3
    assert fetched.json()["name"] == "News"


def test_subscribing_is_idempotent_and_says_how_many_were_added(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    _recipients(client_and_token[0], 5)
    api.put("/api/v1/topics/news", {}, format="json")
    first = api.post("/api/v1/topics/news/subscribers", {"user_ids": ["u0", "u1", "u2"]}, format="json")
    assert first.status_code == 200, first.content
    assert first.json() == {"added": 3, "subscriber_count": 3}
    again = api.post("/api/v1/topics/news/subscribers", {"user_ids": ["u1", "u2", "u3", "u3"]}, format="json")
    assert again.json() == {"added": 1, "subscriber_count": 4}
    pairs = TopicSubscription.objects.values("topic", "recipient").annotate(n=Count("pk")).filter(n__gt=1)
    assert not pairs.exists()


def test_unknown_user_ids_refuse_the_whole_call_listing_each(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    _recipients(client_and_token[0], 2)
    api.put("/api/v1/topics/news", {}, format="json")
    response = api.post("/api/v1/topics/news/subscribers", {"user_ids": ["u0", "ghost", "u1", "nobody"]}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == "user_ids"
    assert error["details"]["unknown_user_ids"] == ["ghost", "nobody"]
    assert TopicSubscription.objects.count() == 0


def test_more_than_a_thousand_user_ids_is_a_400_and_a_thousand_is_fine(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    user_ids = _recipients(client_and_token[0], 1001)
    api.put("/api/v1/topics/news", {}, format="json")
    too_many = api.post("/api/v1/topics/news/subscribers", {"user_ids": user_ids}, format="json")
    assert too_many.status_code == 400
    assert too_many.json()["error"]["field"] == "user_ids"
    enough = api.post("/api/v1/topics/news/subscribers", {"user_ids": user_ids[:1000]}, format="json")
    assert enough.json() == {"added": 1000, "subscriber_count": 1000}


def test_delete_unsubscribes_once_and_is_idempotent(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    _recipients(client_and_token[0], 2)
    api.put("/api/v1/topics/news", {}, format="json")
    api.post("/api/v1/topics/news/subscribers", {"user_ids": ["u0", "u1"]}, format="json")
    assert api.delete("/api/v1/topics/news/subscribers/u0").status_code == 204
    assert api.delete("/api/v1/topics/news/subscribers/u0").status_code == 204
    assert api.get("/api/v1/topics/news").json()["subscriber_count"] == 1
    assert api.delete("/api/v1/topics/nope/subscribers/u0").status_code == 404


def test_a_topic_belongs_to_its_client(api: APIClient) -> None:
    other, token = make_api_client("other")
    other_api = APIClient()
    other_api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    other_api.put("/api/v1/topics/news", {"name": "theirs"}, format="json")
    assert api.get("/api/v1/topics/news").status_code == 404
    assert api.post("/api/v1/topics/news/subscribers", {"user_ids": ["u0"]}, format="json").status_code == 404
    assert api.put("/api/v1/topics/news", {"name": "mine"}, format="json").status_code == 201


def test_a_bad_key_or_unknown_field_is_a_400_naming_it(api: APIClient) -> None:
    bad_key = api.put("/api/v1/topics/no spaces", {}, format="json")
    assert bad_key.status_code == 400
    assert bad_key.json()["error"]["field"] == "key"
    unknown = api.put("/api/v1/topics/news", {"nmae": "typo"}, format="json")
    assert unknown.status_code == 400
    assert unknown.json()["error"]["field"] == "nmae"


def test_subscribing_counts_the_topics_subscribers_once(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    _recipients(client_and_token[0], 3)
    api.put("/api/v1/topics/news", {}, format="json")

    with CaptureQueriesContext(connection) as queries:
        response = api.post("/api/v1/topics/news/subscribers", {"user_ids": ["u0", "u1", "u2"]}, format="json")

    assert response.json() == {"added": 3, "subscriber_count": 3}
    counting = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert len(counting) == 1, counting


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/topics/bad%00key"),
        ("post", "/api/v1/topics/bad%00key/subscribers"),
        ("delete", "/api/v1/topics/bad%00key/subscribers/u0"),
    ],
)
def test_a_topic_key_holding_nul_is_a_400_naming_the_key_on_every_path(api: APIClient, method: str, path: str) -> None:
    response = getattr(api, method)(path, {"user_ids": ["u0"]} if method == "post" else None, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "key"
