"""The in-app inbox over HTTP, through the web server as deployed (gunicorn with uvicorn workers,
platform/asgi.py) on the real PostgreSQL and Redis: user tokens and their scope, counts exact
under concurrent marks, and the live stream (delivery within a second, resume with Last-Event-ID)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from django.db.models import Count, Q

from notifications.models import InboxItem, InboxTokenGate

from .factories import make_api_client
from .helpers import wait_until
from .inbox_helpers import SseReader, bearer, deliver_item, user_token
from .live_servers import WebServer, gunicorn_server

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[WebServer]:
    with gunicorn_server(INBOX_STREAM_HEARTBEAT_SECONDS="1") as web:
        yield web


def test_a_user_token_reaches_only_that_users_items(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    other, _ = make_api_client("other-shop")
    mine = deliver_item(shop, "ann", "Yours")
    theirs = deliver_item(shop, "bob", "Bob's")
    other_clients = deliver_item(other, "ann", "Another client's ann")
    token = user_token(server.base_url, shop_token, "ann")

    feed = requests.get(server.url("/api/v1/inbox/items"), headers=bearer(token), timeout=10)

    assert feed.status_code == 200
    assert [item["id"] for item in feed.json()["items"]] == [str(mine.pk)]
    assert feed.json()["counts"] == {"unseen": 1, "unread": 1, "total": 1}
    for item in (theirs, other_clients):
        answer = requests.post(server.url(f"/api/v1/inbox/items/{item.pk}/read"), headers=bearer(token), timeout=10)
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == "not_found"
    assert InboxItem.objects.get(pk=theirs.pk).read_at is None
    assert InboxItem.objects.get(pk=other_clients.pk).read_at is None


def test_an_expired_token_is_refused_with_401(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    deliver_item(shop, "ann")
    token = user_token(server.base_url, shop_token, "ann", ttl_seconds=1)
    assert requests.get(server.url("/api/v1/inbox/counts"), headers=bearer(token), timeout=10).status_code == 200

    def refused() -> list[requests.Response]:  # a Response is falsy when it is an error: wrapped
        answer = requests.get(server.url("/api/v1/inbox/counts"), headers=bearer(token), timeout=10)
        return [answer] if answer.status_code != 200 else []

    [answer] = wait_until(refused, timeout=5, interval=0.2, message="the token expires")
    assert answer.status_code == 401
    assert "expired" in answer.json()["error"]["message"]


def test_revoking_refuses_the_users_earlier_tokens_and_not_later_ones(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    earlier = user_token(server.base_url, shop_token, "ann")
    bobs = user_token(server.base_url, shop_token, "bob")

    revoked = requests.delete(
        server.url("/api/v1/inbox/tokens"), params={"user_id": "ann"}, headers=bearer(shop_token), timeout=10
    )

    assert revoked.status_code == 204 and InboxTokenGate.objects.filter(user_id="ann").exists()
    answer = requests.get(server.url("/api/v1/inbox/items"), headers=bearer(earlier), timeout=10)
    assert answer.status_code == 401 and "revoked" in answer.json()["error"]["message"]
    stream = requests.get(server.url("/api/v1/inbox/stream"), params={"token": earlier}, timeout=10)
    assert stream.status_code == 401
    assert requests.get(server.url("/api/v1/inbox/counts"), headers=bearer(bobs), timeout=10).status_code == 200
    later = user_token(server.base_url, shop_token, "ann")
    assert requests.get(server.url("/api/v1/inbox/counts"), headers=bearer(later), timeout=10).status_code == 200


def test_a_client_token_is_refused_by_the_inbox_endpoints(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    item = deliver_item(shop, "ann")
    calls = [
        ("get", "/api/v1/inbox/items", {}),
        ("get", "/api/v1/inbox/counts", {}),
        ("post", f"/api/v1/inbox/items/{item.pk}/read", {}),
        ("post", "/api/v1/inbox/bulk", {"json": {"action": "read"}}),
    ]
    for method, path, extra in calls:
        answer = requests.request(method, server.url(path), headers=bearer(shop_token), timeout=10, **extra)
        assert answer.status_code == 401, (path, answer.text)
    assert requests.get(server.url("/api/v1/inbox/stream"), params={"token": shop_token}, timeout=10).status_code == 401
    assert InboxItem.objects.get(pk=item.pk).read_at is None


def test_counts_stay_exact_after_50_concurrent_marks(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    items = [deliver_item(shop, "ann", f"n{index}") for index in range(20)]
    token = user_token(server.base_url, shop_token, "ann")
    # Each item read twice at once, five archived while being read, and bulk "seen" of all: 50
    # requests that race on the same rows.
    marks = [(item.pk, "read") for item in items] * 2 + [(item.pk, "archive") for item in items[:5]]
    session = requests.Session()

    def mark(target: tuple[Any, str]) -> int:
        pk, action = target
        return session.post(server.url(f"/api/v1/inbox/items/{pk}/{action}"), headers=bearer(token), timeout=30).status_code

    def bulk_seen() -> int:
        return session.post(
            server.url("/api/v1/inbox/bulk"), json={"action": "seen"}, headers=bearer(token), timeout=30
        ).status_code

    with ThreadPoolExecutor(max_workers=50) as pool:
        futures = [pool.submit(mark, target) for target in marks] + [pool.submit(bulk_seen) for _ in range(5)]
        statuses = [future.result() for future in futures]

    assert len(statuses) == 50 and set(statuses) == {200}
    truth = InboxItem.objects.filter(user_id="ann").aggregate(
        unseen=Count("pk", filter=Q(seen_at__isnull=True, archived_at__isnull=True)),
        unread=Count("pk", filter=Q(read_at__isnull=True, archived_at__isnull=True)),
        total=Count("pk", filter=Q(archived_at__isnull=True)),
    )
    counts = requests.get(server.url("/api/v1/inbox/counts"), headers=bearer(token), timeout=10).json()
    assert counts == truth == {"unseen": 0, "unread": 0, "total": 15}


def test_the_feed_pages_newest_first_with_filters(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    made = [deliver_item(shop, "ann", f"n{index}", thread_key="order-1" if index % 2 else "") for index in range(5)]
    token = user_token(server.base_url, shop_token, "ann")
    url = server.url("/api/v1/inbox/items")

    first = requests.get(url, params={"limit": 2}, headers=bearer(token), timeout=10).json()
    second = requests.get(url, params={"limit": 2, "cursor": first["next_cursor"]}, headers=bearer(token), timeout=10).json()
    thread = requests.get(url, params={"thread": "order-1"}, headers=bearer(token), timeout=10).json()
    bad = requests.get(url, params={"cursor": "nope", "status": "x"}, headers=bearer(token), timeout=10)

    newest = [str(item.pk) for item in reversed(made)]
    assert [i["id"] for i in first["items"]] + [i["id"] for i in second["items"]] == newest[:4]
    assert {i["id"] for i in thread["items"]} == {str(made[1].pk), str(made[3].pk)}
    assert bad.status_code == 400 and bad.json()["error"]["field"] in ("status", "cursor")


def test_the_stream_sends_item_created_within_a_second_of_delivery(server: WebServer, worker: Any) -> None:
    shop, shop_token = make_api_client("shop")
    token = user_token(server.base_url, shop_token, "ann")
    with SseReader(server.url("/api/v1/inbox/stream"), token=token) as stream:
        start = stream.next_of("counts")
        assert start.data == {"unseen": 0, "unread": 0, "total": 0}

        accepted = requests.post(
            server.url("/api/v1/notifications"),
            json={"user_id": "ann", "channel": "in_app", "subject": "Shipped", "message": "Your order is on its way"},
            headers=bearer(shop_token),
            timeout=10,
        )
        assert accepted.status_code == 202, accepted.text
        created = stream.next_of("item.created", timeout=15)
        delivered_at = InboxItem.objects.get(notification_id=accepted.json()["id"]).created_at

    assert created.data["notification_id"] == accepted.json()["id"] and created.data["title"] == "Shipped"
    # The client's clock is this machine's: the event came within a second of the item's commit.
    latency = time.time() - delivered_at.timestamp() - (time.monotonic() - created.received_at)
    assert latency < 1.0, latency


def test_the_stream_resumes_from_last_event_id_with_nothing_lost_or_doubled(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    token = user_token(server.base_url, shop_token, "ann")
    with SseReader(server.url("/api/v1/inbox/stream"), token=token) as stream:
        stream.next_of("counts")
        deliver_item(shop, "ann", "before the drop")
        seen = [stream.next_of("item.created"), stream.next_of("counts")]
    # The connection is gone; these happen while the page is away.
    missed = [deliver_item(shop, "ann", f"while away {index}") for index in range(3)]

    with SseReader(server.url("/api/v1/inbox/stream"), token=token, last_event_id=seen[-1].id) as resumed:
        events = [resumed.next() for _ in range(6)]
        deliver_item(shop, "ann", "after the resume")
        later = resumed.next_of("item.created")
        after = resumed.next()

    assert [event.type for event in events] == ["item.created", "counts"] * 3
    assert [event.data["id"] for event in events if event.type == "item.created"] == [str(item.pk) for item in missed]
    ids = [seen[-1].id] + [event.id for event in events] + [later.id, after.id]
    assert ids == sorted(set(ids)), "ids strictly increase: nothing sent twice"
    assert events[-1].data == {"unseen": 4, "unread": 4, "total": 4}
    assert later.data["title"] == "after the resume" and after.type == "counts" and after.data["total"] == 5
    assert resumed.events.empty()


def test_pages_of_an_allowed_origin_may_call_the_inbox_and_others_may_not(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    deliver_item(shop, "ann")
    refused = requests.patch(
        server.url("/api/v1/client"), json={"inbox_allowed_origins": ["app.example.com"]}, headers=bearer(shop_token), timeout=10
    )
    allowed = requests.patch(
        server.url("/api/v1/client"),
        json={"inbox_allowed_origins": ["https://App.example.com/"]},
        headers=bearer(shop_token),
        timeout=10,
    )
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "inbox_allowed_origins"
    assert allowed.status_code == 200 and allowed.json()["inbox_allowed_origins"] == ["https://app.example.com"]
    token = user_token(server.base_url, shop_token, "ann")
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}

    def origin_answers(origin: str) -> tuple[requests.Response, requests.Response, requests.Response]:
        url = server.url("/api/v1/inbox/items")
        with_origin = {"Origin": origin}
        return (
            requests.options(url, headers={**with_origin, **preflight}, timeout=10),
            requests.get(url, headers={**with_origin, **bearer(token)}, timeout=10),
            requests.get(server.url("/api/v1/inbox/stream"), params={"token": "x"}, headers=with_origin, timeout=10),
        )

    options, feed, stream = origin_answers("https://app.example.com")
    assert options.status_code == 204 and options.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert "Authorization" in options.headers["Access-Control-Allow-Headers"]
    assert feed.status_code == 200 and feed.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert stream.status_code == 401 and stream.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    for answer in origin_answers("https://evil.example.net"):
        assert "Access-Control-Allow-Origin" not in answer.headers
