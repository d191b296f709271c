"""Per-recipient caps: exactly ``count`` of a category reach one recipient in any ``per_seconds``,
the next is suppressed (throttled), concurrent accepts never slip past, critical categories are
never capped, and with Redis down the cap fails open, counted as degraded."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dramatiq
import pytest
from django.db import connection
from django.test import override_settings
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from notifications import services
from notifications.models import ApiClient, Category, Digest, Notification, Status
from notifications.services import DigestRequest
from notifications.services.intake import accept as accept_service
from notifications.services.policy import caps

from .factories import accept_notification, make_api_client, make_template
from .helpers import wait_until
from .test_degraded import cache_at

URL = "/api/v1/notifications"
CATEGORIES = "/api/v1/categories"


@pytest.fixture(autouse=True)
def _redis_trusted_again() -> Iterator[None]:
    yield
    caps.redis_outage.reset()


def capped(client: ApiClient, key: str = "news", *, count: int = 5, per_seconds: int = 3600, critical: bool = False) -> Category:
    return Category.objects.create(
        client=client, key=key, critical=critical, max_per_recipient={"count": count, "per_seconds": per_seconds}
    )


def send(client: ApiClient, category: str = "news", user_id: str = "u1", **fields: Any) -> Notification:
    return accept_notification(client, category=category, user_id=user_id, **fields)


def statuses(notifications: list[Notification]) -> list[str]:
    return [n.status if n.status != Status.SUPPRESSED else f"suppressed:{n.suppressed_reason}" for n in notifications]


def test_exactly_count_pass_and_the_next_is_suppressed_throttled_per_recipient_and_category(
    broker: dramatiq.Broker, api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    client, _ = client_and_token
    capped(client, count=5)
    body = {"user_id": "u1", "to": "u1@example.com", "message": "news", "category": "news"}

    answers = [api.post(URL, body, format="json").json() for _ in range(6)]

    assert [a["status"] for a in answers] == ["queued"] * 5 + ["suppressed"]
    shown = api.get(f"{URL}/{answers[5]['id']}").json()
    assert (shown["status"], shown["suppressed_reason"]) == ("suppressed", "throttled")
    # Another recipient, and the same recipient in an uncapped category, have budgets of their own.
    assert api.post(URL, {**body, "user_id": "u2"}, format="json").json()["status"] == "queued"
    assert api.post(URL, {**body, "category": "transactional"}, format="json").json()["status"] == "queued"


def test_after_the_window_one_passes_again(broker: dramatiq.Broker, db: None) -> None:
    client, _ = make_api_client()
    capped(client, count=2, per_seconds=1)
    assert statuses([send(client) for _ in range(3)]) == ["queued", "queued", "suppressed:throttled"]

    # Throttled tries take no slot, so trying until the window has passed is harmless.
    passed = wait_until(lambda: (n := send(client)).status == Status.QUEUED and n, timeout=5, interval=0.2)

    assert passed
    assert statuses([send(client)]) == ["queued"]  # the window's second slot
    assert statuses([send(client)]) == ["suppressed:throttled"]


def test_a_critical_category_is_never_capped(broker: dramatiq.Broker, db: None) -> None:
    client, _ = make_api_client()
    capped(client, "security", count=1, critical=True)

    assert statuses([send(client, "security") for _ in range(4)]) == ["queued"] * 4


def test_concurrent_accepts_at_the_boundary_never_let_more_than_count_through(
    broker: dramatiq.Broker, transactional_db: None
) -> None:
    client, _ = make_api_client()
    capped(client, count=5)
    barrier = threading.Barrier(20)

    def one() -> str:
        try:
            barrier.wait(timeout=60)
            return send(client).status
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(lambda _: one(), range(20)))

    assert results.count(Status.QUEUED) == 5
    assert results.count(Status.SUPPRESSED) == 15
    assert Notification.objects.filter(suppressed_reason="throttled").count() == 15


def test_a_replay_takes_no_slot(broker: dramatiq.Broker, db: None) -> None:
    client, _ = make_api_client()
    capped(client, count=3)
    for _ in range(3):
        send(client, key="same")

    assert statuses([send(client) for _ in range(3)]) == ["queued", "queued", "suppressed:throttled"]


def test_a_batch_keeps_to_the_cap(broker: dramatiq.Broker, api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    capped(client_and_token[0], count=2)
    item = {"user_id": "u1", "to": "u1@example.com", "message": "news", "category": "news"}

    results = api.post(f"{URL}/batch", {"notifications": [item] * 3}, format="json").json()["results"]

    assert [r["body"]["status"] for r in results] == ["queued", "queued", "suppressed"]


def test_with_redis_down_the_cap_fails_open_and_counts_it_as_degraded(broker: dramatiq.Broker, db: None) -> None:
    client, _ = make_api_client()
    capped(client, count=1)

    def degraded() -> float:
        return REGISTRY.get_sample_value("notifications_degraded_total", {"component": "recipient_caps"}) or 0.0

    before = degraded()
    # Nothing listens on port 1: connection refused, as from a Redis that is down.
    with override_settings(CACHES=cache_at(1)):
        sent = [send(client) for _ in range(3)]

    assert statuses(sent) == ["queued"] * 3
    assert degraded() - before == 3


@pytest.mark.parametrize(
    ("cap", "field"),
    [
        ({"count": 0, "per_seconds": 60}, "max_per_recipient.count"),
        ({"count": True, "per_seconds": 60}, "max_per_recipient.count"),
        ({"count": "5", "per_seconds": 60}, "max_per_recipient.count"),
        ({"count": 5}, "max_per_recipient.per_seconds"),
        ({"count": 5, "per_seconds": 60, "burst": 2}, "max_per_recipient.burst"),
        ([5, 60], "max_per_recipient.non_field_errors"),
    ],
)
def test_a_bad_cap_is_a_400_naming_the_field(api: APIClient, cap: Any, field: str) -> None:
    response = api.put(f"{CATEGORIES}/news", {"max_per_recipient": cap}, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == field
    assert not Category.objects.filter(key="news").exists()


def test_the_category_api_sets_shows_and_clears_a_cap(api: APIClient) -> None:
    created = api.put(f"{CATEGORIES}/news", {"max_per_recipient": {"count": 5, "per_seconds": 3600}}, format="json")
    assert created.status_code == 201, created.content
    assert api.get(f"{CATEGORIES}/news").json()["max_per_recipient"] == {"count": 5, "per_seconds": 3600}

    cleared = api.put(f"{CATEGORIES}/news", {"max_per_recipient": None}, format="json")
    assert cleared.json()["max_per_recipient"] is None
    assert Category.objects.get(key="news").max_per_recipient is None


def test_without_redis_the_embedded_log_keeps_the_same_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caps, "_local", caps._LocalLog())
    cap = caps.RecipientCap(count=2, per_seconds=3600)
    takes: Callable[[str], bool] = lambda member: caps._local.take("k", member, cap)  # noqa: E731

    assert [takes("a"), takes("b"), takes("c")] == [True, True, False]
    caps._local.release("k", "b")
    assert [takes("d"), takes("e")] == [True, False]


class Boom(Exception):
    pass


def test_an_accept_that_fails_after_taking_a_slot_gives_it_back(
    broker: dramatiq.Broker, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = make_api_client()
    capped(client, count=1)

    def fail(**_: Any) -> None:
        raise Boom("the accept's transaction fails after the slot was taken")

    with monkeypatch.context() as patched:
        patched.setattr(accept_service, "digest_join", fail)
        with pytest.raises(Boom):
            send(client)

    assert not Notification.objects.exists()
    assert statuses([send(client), send(client)]) == ["queued", "suppressed:throttled"]


def test_a_digest_close_that_fails_after_taking_a_slot_gives_it_back(
    broker: dramatiq.Broker, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_template("activity", subject="{{ count }} new", body="{{ count }} updates", html_body="")
    client, _ = make_api_client()
    capped(client, count=1)
    send(client, message="", template="activity", data={"n": 1}, digest=DigestRequest(key="a", window_seconds=60))
    digest = Digest.objects.get()

    def fail(*args: Any, **kwargs: Any) -> None:
        raise Boom("the close's transaction fails after the slot was taken")

    with monkeypatch.context() as patched:
        patched.setattr(Digest, "save", fail)
        with pytest.raises(Boom):
            services.digest_close(digest_id=digest.pk, now=digest.closes_at)

    result = services.digest_close(digest_id=digest.pk, now=digest.closes_at)
    assert result.outcome == "sent"
    assert Notification.objects.get(pk=result.notification_id).status == Status.QUEUED  # not throttled by a lost slot
