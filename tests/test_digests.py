"""Digests: concurrent accepts of one key make exactly one digest, keys never merge, max_items and
the window's end close it, cancelled members are left out, and the API says what happened."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import dramatiq
import pytest
from django.core import mail
from django.db import connection
from rest_framework.test import APIClient

from notifications import services
from notifications.models import ApiClient, Category, Digest, DigestStatus, Notification, Status, StatusEvent

from .factories import accept_notification, make_api_client, make_template
from .fakes import override_notifications
from .helpers import wait_until

URL = "/api/v1/notifications"
BODY_TEMPLATE = "{{ count }} updates:{% for item in items %} {{ item.n }};{% endfor %}"


def make_activity_template() -> None:
    make_template("activity", subject="{{ count }} new", body=BODY_TEMPLATE, html_body="")


def digest_body(
    n: Any, *, key: str = "activity", user_id: str = "u1", window: int = 3600, max_items: int = 1000
) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "to": f"{user_id}@example.com",
        "template": "activity",
        "data": {"n": n},
        "digest": {"key": key, "window_seconds": window, "max_items": max_items},
    }


def accept_member(client: ApiClient, n: Any, *, key: str = "activity", window: int = 3600, max_items: int = 1000) -> Notification:
    """A digest member accepted through the service, as the API does."""
    return accept_notification(
        client,
        message="",
        to="u1@example.com",
        template="activity",
        data={"n": n},
        digest=services.DigestRequest(key=key, window_seconds=window, max_items=max_items),
    )


def api_for(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


def all_at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run every call in its own thread (its own database connection and transaction), released
    together by a barrier so they really overlap."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        try:
            barrier.wait(timeout=60)
            return call()
        finally:
            connection.close()

    # Every token authentication holds a slot of its address's failure budget while in flight
    # (api/auth.py FailedAuthenticationThrottle); fifty at once from one test address are no attack.
    with override_notifications(API_AUTH_FAILURE_RATE="10000/min"), ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


def sent_items(digest: Digest) -> list[str]:
    """The item numbers the digest's notification lists, in its order."""
    assert digest.notification is not None
    message = digest.notification.message
    return [part.strip() for part in message.split(":", 1)[1].split(";") if part.strip()]


# --- Concurrency ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_accepts_of_one_key_make_one_digest_sent_once_with_count_50(broker: dramatiq.Broker) -> None:
    make_activity_template()
    client, token = make_api_client("acme")

    responses = all_at_once([lambda n=n: api_for(token).post(URL, digest_body(n), format="json") for n in range(50)])

    assert [r.status_code for r in responses] == [202] * 50, [r.content for r in responses[:3]]
    assert {r.json()["status"] for r in responses} == {"digested"}
    [digest] = Digest.objects.all()
    assert (digest.status, digest.item_count) == (DigestStatus.OPEN, 50)
    members = Notification.objects.filter(digest=digest, status=Status.DIGESTED)
    assert members.count() == 50
    assert not Notification.objects.exclude(status=Status.DIGESTED).exists()  # nothing sent on its own

    # Two closers at once (the close message and the sweeper, say): one sends, the other finds it closed.
    closes = all_at_once([lambda: services.digest_close(digest_id=digest.pk, now=digest.closes_at)] * 2)

    assert sorted(result.outcome for result in closes) == ["closed", "sent"]
    digest.refresh_from_db()
    assert digest.status == DigestStatus.SENT
    [sent] = Notification.objects.exclude(status=Status.DIGESTED)
    assert digest.notification_id == sent.pk
    assert sent.status == Status.QUEUED and sent.enqueued_at is not None
    assert sent.subject == "50 new"
    assert sent.message.startswith("50 updates:")
    assert sorted(int(n) for n in sent_items(digest)) == list(range(50))


@pytest.mark.django_db(transaction=True)
def test_concurrent_accepts_of_two_keys_and_two_recipients_never_merge(broker: dramatiq.Broker) -> None:
    make_activity_template()
    client, token = make_api_client("acme")
    bodies = [
        digest_body(f"{key}-{user}-{n}", key=key, user_id=user) for n in range(5) for key in ("a", "b") for user in ("u1", "u2")
    ]

    responses = all_at_once([lambda body=body: api_for(token).post(URL, body, format="json") for body in bodies])

    assert [r.status_code for r in responses] == [202] * len(bodies)
    digests = {(d.key, d.user_id): d for d in Digest.objects.all()}
    assert sorted(digests) == [("a", "u1"), ("a", "u2"), ("b", "u1"), ("b", "u2")]
    for (key, user), digest in digests.items():
        assert digest.item_count == 5
        assert services.digest_close(digest_id=digest.pk, now=digest.closes_at).outcome == "sent"
        digest.refresh_from_db()
        assert sorted(sent_items(digest)) == sorted(f"{key}-{user}-{n}" for n in range(5))
        assert digest.notification is not None and digest.notification.address == f"{user}@example.com"


# --- Closing -------------------------------------------------------------------------------------


def test_max_items_closes_early_so_seven_accepts_of_max_three_make_digests_of_three_three_and_one_open(
    broker: dramatiq.Broker, db: None, django_capture_on_commit_callbacks: Any
) -> None:
    make_activity_template()
    client, _ = make_api_client()

    with django_capture_on_commit_callbacks(execute=True):
        members = [accept_member(client, n, max_items=3) for n in range(7)]

    assert {m.status for m in members} == {Status.DIGESTED}
    digests = list(Digest.objects.order_by("opened_at"))
    assert [(d.status, d.item_count) for d in digests] == [(DigestStatus.SENT, 3), (DigestStatus.SENT, 3), (DigestStatus.OPEN, 1)]
    assert [sent_items(d) for d in digests[:2]] == [["0", "1", "2"], ["3", "4", "5"]]
    assert digests[0].notification is not None and digests[0].notification.message.startswith("3 updates:")
    assert Notification.objects.get(pk=members[6].pk).digest_id == digests[2].pk


def test_a_digest_is_sent_by_its_close_message_when_its_window_ends(worker: dramatiq.Worker) -> None:
    make_activity_template()
    client, _ = make_api_client()
    members = [accept_member(client, n, window=1) for n in range(3)]
    digest = Digest.objects.get()
    assert {m.digest_id for m in members} == {digest.pk}

    # No sweeper runs here: the delayed close message at the window's end is what closes it.
    wait_until(lambda: Digest.objects.filter(pk=digest.pk, status=DigestStatus.SENT).exists(), timeout=15)
    digest.refresh_from_db()
    assert digest.closed_at is not None and digest.closed_at >= digest.closes_at - timedelta(seconds=1)
    assert sent_items(digest) == ["0", "1", "2"]
    wait_until(lambda: Notification.objects.filter(pk=digest.notification_id, status=Status.DELIVERED).exists(), timeout=15)
    [email] = [m for m in mail.outbox if m.to == ["u1@example.com"]]
    assert email.body.startswith("3 updates: 0; 1; 2;")


def test_an_accept_after_the_window_ended_opens_the_next_digest_and_the_ended_one_is_sent(
    broker: dramatiq.Broker, db: None, django_capture_on_commit_callbacks: Any
) -> None:
    make_activity_template()
    client, _ = make_api_client()
    with django_capture_on_commit_callbacks(execute=True):
        accept_member(client, 0)
        first = Digest.objects.get()
        # Its window is over and its closer has not come yet (a sweeper a moment behind).
        Digest.objects.filter(pk=first.pk).update(closes_at=first.opened_at - timedelta(seconds=1))
        late = accept_member(client, 1)

    first.refresh_from_db()
    assert first.status == DigestStatus.SENT and sent_items(first) == ["0"]
    second = Digest.objects.get(status=DigestStatus.OPEN)
    assert late.digest_id == second.pk and second.item_count == 1


def test_the_sweeper_closes_a_digest_whose_window_is_longer_than_a_broker_delay(broker: dramatiq.Broker, db: None) -> None:
    make_activity_template()
    client, _ = make_api_client()
    accept_member(client, 0, window=3600)
    digest = Digest.objects.get()

    assert services.digest_sweep(now=digest.closes_at - timedelta(seconds=10)) == 0
    assert services.digest_close(digest_id=digest.pk, now=digest.closes_at - timedelta(seconds=10)).outcome == "not_due"
    services.notification_sweep(now=digest.closes_at + timedelta(seconds=5))

    digest.refresh_from_db()
    assert digest.status == DigestStatus.SENT
    assert sent_items(digest) == ["0"]


# --- Cancelling ----------------------------------------------------------------------------------


def test_a_member_cancelled_before_the_close_is_not_in_the_items_and_one_after_it_is_refused(
    broker: dramatiq.Broker, client_and_token: tuple[ApiClient, str], api: APIClient
) -> None:
    make_activity_template()
    client, _ = client_and_token
    ids = [api.post(URL, digest_body(n), format="json").json()["id"] for n in range(3)]

    cancelled = api.post(f"{URL}/{ids[1]}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    digest = Digest.objects.get()
    assert digest.item_count == 2
    services.digest_close(digest_id=digest.pk, now=digest.closes_at)

    digest.refresh_from_db()
    assert sent_items(digest) == ["0", "2"]
    assert digest.notification is not None and digest.notification.message.startswith("2 updates:")
    late = api.post(f"{URL}/{ids[0]}/cancel")
    assert late.status_code == 409, late.content
    assert Notification.objects.get(pk=ids[0]).status == Status.DIGESTED


def test_a_digest_whose_members_were_all_cancelled_sends_nothing(
    broker: dramatiq.Broker, db: None, django_capture_on_commit_callbacks: Any
) -> None:
    make_activity_template()
    client, _ = make_api_client()
    members = [accept_member(client, n) for n in range(2)]
    for member in members:
        services.notification_cancel(client=client, notification_id=member.pk)
    digest = Digest.objects.get()

    result = services.digest_close(digest_id=digest.pk, now=digest.closes_at)

    digest.refresh_from_db()
    assert (result.outcome, digest.status, digest.item_count, digest.notification_id) == ("empty", DigestStatus.EMPTY, 0, None)
    assert Notification.objects.exclude(digest=digest).count() == 0
    assert set(Notification.objects.values_list("status", flat=True)) == {Status.CANCELLED}


# --- The API -------------------------------------------------------------------------------------


def test_the_api_answers_a_member_digested_and_shows_its_digest_id_and_a_replay_joins_nothing(
    broker: dramatiq.Broker, api: APIClient
) -> None:
    make_activity_template()
    first = api.post(URL, digest_body(1), format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = api.post(URL, digest_body(1), format="json", HTTP_IDEMPOTENCY_KEY="k1")

    assert (first.status_code, first.json()["status"]) == (202, "digested")
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    digest = Digest.objects.get()
    assert digest.item_count == 1
    shown = api.get(f"{URL}/{first.json()['id']}").json()
    assert (shown["status"], shown["digest_id"]) == ("digested", str(digest.pk))
    assert shown["message"] == "1 updates: 1;"  # what a digest of this one item would say
    plain = api.post(URL, {"user_id": "u1", "to": "u1@example.com", "message": "hi"}, format="json").json()
    assert api.get(f"{URL}/{plain['id']}").json()["digest_id"] is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"digest": {"key": "", "window_seconds": 60}}, "digest.key"),
        ({"digest": {"key": "k" * 101, "window_seconds": 60}}, "digest.key"),
        ({"digest": {"key": "k", "window_seconds": 0}}, "digest.window_seconds"),
        ({"digest": {"key": "k", "window_seconds": 86401}}, "digest.window_seconds"),
        ({"digest": {"key": "k", "window_seconds": "60"}}, "digest.window_seconds"),
        ({"digest": {"key": "k", "window_seconds": 60, "max_items": 1001}}, "digest.max_items"),
        ({"digest": {"key": "k", "window_seconds": 60, "max_itms": 3}}, "digest.max_itms"),
        ({"digest": {"key": "k"}}, "digest.window_seconds"),
        ({"template": "", "message": "hi", "data": {}}, "template"),
        ({"send_at": "2030-01-01T00:00:00Z"}, "send_at"),
    ],
)
def test_a_bad_digest_is_a_400_naming_the_field(api: APIClient, change: dict[str, Any], field: str) -> None:
    make_activity_template()
    body = {**digest_body(1), **change}
    if change.get("template") == "":
        del body["template"], body["data"]

    response = api.post(URL, body, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == field
    assert not Digest.objects.exists() and not Notification.objects.exists()


def test_a_batch_refuses_a_digest_in_its_slot_and_accepts_the_rest(broker: dramatiq.Broker, api: APIClient) -> None:
    make_activity_template()
    plain = {"user_id": "u1", "to": "u1@example.com", "message": "hi"}

    response = api.post(f"{URL}/batch", {"notifications": [digest_body(1), plain]}, format="json")

    assert response.status_code == 202, response.content
    refused, accepted = response.json()["results"]
    assert (refused["status"], refused["error"]["field"]) == (400, "digest")
    assert accepted["status"] == 202
    assert not Digest.objects.exists()


def test_a_digest_its_template_can_no_longer_render_ends_failed_with_a_failed_notification_saying_why(
    broker: dramatiq.Broker, db: None
) -> None:
    template = make_template("activity", subject="", body=BODY_TEMPLATE, html_body="")
    client, _ = make_api_client()
    accept_member(client, 0)
    template.variants.update(body="{{ count }} from {{ author }}")  # edited since: needs what the items lack
    digest = Digest.objects.get()

    result = services.digest_close(digest_id=digest.pk, now=digest.closes_at)

    sent = Notification.objects.get(pk=result.notification_id)
    assert (result.outcome, sent.status, sent.enqueued_at) == ("failed", Status.FAILED, None)
    assert "author" in sent.last_error
    digest.refresh_from_db()
    assert (digest.status, digest.failure_reason) == (DigestStatus.FAILED, sent.last_error)


@pytest.mark.parametrize("ending", ["suppressed", "failed"])
def test_a_digest_whose_notification_ends_at_its_close_tells_the_client_with_a_status_event(
    broker: dramatiq.Broker, db: None, ending: str
) -> None:
    template = make_template("activity", subject="", body=BODY_TEMPLATE, html_body="")
    client, _ = make_api_client()
    ApiClient.objects.filter(pk=client.pk).update(status_webhook_url="https://hooks.example.com/status")
    Category.objects.create(client=client, key="news", max_per_recipient={"count": 1, "per_seconds": 3600})
    accept_notification(
        client,
        message="",
        template="activity",
        data={"n": 1},
        category="news",
        digest=services.DigestRequest(key="activity", window_seconds=60),
    )
    if ending == "suppressed":
        accept_notification(client, category="news")  # the recipient's one slot: the digest is throttled
    else:
        template.variants.update(body="{{ count }} from {{ author }}")  # edited since: no longer renders
    digest = Digest.objects.get()

    result = services.digest_close(digest_id=digest.pk, now=digest.closes_at)

    sent = Notification.objects.get(pk=result.notification_id)
    assert sent.status == ending
    [event] = StatusEvent.objects.filter(notification=sent)
    assert (event.type, event.status) == (f"notification.{ending}", ending)
