"""Broadcasts: accepted once per key, fanned out into one notification per subscriber (consent and
locale applied per recipient), counted, cancelled, and resumed after a crash. Service-level tests
run the fan-out in this process; the end-to-end ones run real worker and sweeper processes on
RabbitMQ and deliver webhooks to a local receiver."""

from __future__ import annotations

import collections
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import requests
from django.db.models import Count
from django.utils import timezone
from dramatiq.brokers.stub import StubBroker
from rest_framework.test import APIClient

from notifications import actors, services
from notifications.conf import BROADCAST_QUEUE, BULK_QUEUE, HIGH_QUEUE
from notifications.models import (
    ApiClient,
    Broadcast,
    BroadcastStatus,
    Category,
    Notification,
    Recipient,
    Status,
    TemplateVariant,
)
from notifications.sql import returned_values

from .factories import accept_notification, make_template
from .fakes import override_notifications
from .faults import FaultPlatform, WebhookReceiver
from .helpers import wait_until
from .live_servers import embedded_platform
from .stub_broker import stub_broker_with

# --- Helpers -------------------------------------------------------------------------------------


def subscribe(client: ApiClient, topic: str, count: int, *, start: int = 0, **fields: Any) -> list[str]:
    """``count`` stored recipients (``fields`` for each; ``{n}`` in a str is replaced by its number)
    subscribed to ``topic`` (made if needed) through the service; returns their user ids."""
    services.topic_upsert(client=client, key=topic, name=topic)
    user_ids = [f"u{n}" for n in range(start, start + count)]
    Recipient.objects.bulk_create(
        Recipient(
            client=client,
            user_id=user_id,
            **{name: value.format(n=user_id) if isinstance(value, str) else value for name, value in fields.items()},
        )
        for user_id in user_ids
    )
    for first in range(0, count, 1000):
        services.topic_subscribe(client=client, key=topic, user_ids=user_ids[first : first + 1000])
    return user_ids


def post_broadcast(api: APIClient, body: dict[str, Any], key: str = "launch-1") -> Any:
    return api.post("/api/v1/broadcasts", body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def fan_out_here(broadcast_id: Any) -> services.fanout.broadcasts.FanOutReport:
    """The fan-out, run in this process to its end (what the actor does, with the lease its
    message would carry: the one the last slice took)."""
    lease = Broadcast.objects.get(pk=broadcast_id).lease
    return services.broadcast_fan_out(broadcast_id=broadcast_id, lease=lease, slice_seconds=600)


def counts(api: APIClient, broadcast_id: Any) -> dict[str, Any]:
    response = api.get(f"/api/v1/broadcasts/{broadcast_id}")
    assert response.status_code == 200, response.content
    return dict(response.json())


EMAIL_BODY = {"topic": "news", "channel": "email", "message": "We launched!", "subject": "Launch"}


# --- Accepting -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_same_broadcast_posted_twice_with_its_key_makes_one(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    subscribe(client_and_token[0], "news", 3, email="{n}@example.com")
    first = post_broadcast(api, EMAIL_BODY)
    assert first.status_code == 202, first.content
    assert first.json()["status"] == "pending"
    again = post_broadcast(api, dict(reversed(list(EMAIL_BODY.items()))))  # same body, other key order
    assert again.status_code == 202
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert Broadcast.objects.count() == 1

    different = post_broadcast(api, {**EMAIL_BODY, "message": "We launched again!"})
    assert different.status_code == 422
    assert Broadcast.objects.count() == 1


@pytest.mark.django_db
def test_a_broadcast_is_checked_when_posted(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    make_template("launch", body="Hello {{ name }}")
    subscribe(client_and_token[0], "news", 1, email="{n}@example.com")
    unknown_topic = post_broadcast(api, {**EMAIL_BODY, "topic": "nope"}, key="k1")
    assert unknown_topic.status_code == 400 and unknown_topic.json()["error"]["field"] == "topic"
    missing_variable = post_broadcast(api, {"topic": "news", "template": "launch", "data": {}}, key="k2")
    assert missing_variable.status_code == 400 and missing_variable.json()["error"]["field"] == "data.name"
    both = post_broadcast(api, {**EMAIL_BODY, "channels": ["email"]}, key="k3")
    assert both.status_code == 400 and both.json()["error"]["field"] == "channels"
    unknown_category = post_broadcast(api, {**EMAIL_BODY, "category": "nope"}, key="k4")
    assert unknown_category.status_code == 400 and unknown_category.json()["error"]["field"] == "category"
    assert not Broadcast.objects.exists()


# --- Fanning out, in this process -----------------------------------------------------------------


@pytest.mark.django_db
def test_a_subscriber_who_opted_out_is_suppressed_and_counted(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    client = client_and_token[0]
    subscribe(client, "news", 5, email="{n}@example.com")
    api.put("/api/v1/recipients/u3/preferences", {"channels": {"email": False}}, format="json")
    Recipient.objects.filter(user_id="u4").update(email="")  # nowhere to send it
    broadcast_id = post_broadcast(api, EMAIL_BODY).json()["id"]

    report = fan_out_here(broadcast_id)

    assert report.created == 5
    by_user = {n.user_id: n for n in Notification.objects.filter(broadcast_id=broadcast_id)}
    assert by_user["u3"].status == Status.SUPPRESSED and by_user["u3"].suppressed_reason == "preference"
    assert by_user["u4"].status == Status.SUPPRESSED and by_user["u4"].suppressed_reason == "no_address"
    assert {by_user[u].status for u in ("u0", "u1", "u2")} == {Status.QUEUED}
    assert by_user["u0"].address == "u0@example.com" and by_user["u0"].subject == "Launch"
    assert by_user["u0"].headers["List-Unsubscribe"].startswith("<")  # as an accepted email would have
    body = counts(api, broadcast_id)
    assert body["status"] == "sent"
    assert (body["total"], body["created"], body["suppressed"], body["pending"]) == (5, 5, 2, 3)


@pytest.mark.django_db
def test_each_subscriber_gets_the_template_in_its_own_locale(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    template = make_template("launch", subject="Hello {{ name }}", body="Hello {{ name }}", html_body="")
    TemplateVariant.objects.create(template=template, channel="email", locale="fr", subject="Bonjour {{ name }}", body="Bonjour")
    client = client_and_token[0]
    subscribe(client, "news", 2, email="{n}@example.com")
    Recipient.objects.filter(user_id="u1").update(locale="fr-CA")
    broadcast_id = post_broadcast(api, {"topic": "news", "template": "launch", "data": {"name": "Ann"}}).json()["id"]

    fan_out_here(broadcast_id)

    by_user = {n.user_id: n for n in Notification.objects.filter(broadcast_id=broadcast_id)}
    assert (by_user["u0"].subject, by_user["u0"].locale) == ("Hello Ann", "en")
    assert (by_user["u1"].subject, by_user["u1"].locale) == ("Bonjour Ann", "fr")
    assert by_user["u0"].template_key == "launch"


@pytest.mark.django_db
def test_a_page_built_ahead_from_a_cursor_that_moved_is_given_up_and_the_batch_read_again(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    """broadcast_fan_out builds the next page while the last one is written; the write uses it only
    when it starts at the cursor found under the lock."""
    from notifications.services.fanout.broadcasts import _page_build

    client = client_and_token[0]
    user_ids = subscribe(client, "news", 10, email="{n}@example.com")
    broadcast_id = post_broadcast(api, EMAIL_BODY).json()["id"]
    with override_notifications(BROADCAST_BATCH_SIZE=4):
        services.broadcast_fan_out(broadcast_id=broadcast_id, slice_seconds=0)  # takes the lease, writes the first 4
        broadcast = Broadcast.objects.select_related("client", "category").get(pk=broadcast_id)
        stale = _page_build(broadcast, after=0)  # built from a cursor the fan-out has moved past
        assert [n.user_id for n in stale.built] == user_ids[:4]
        batch = services.broadcast_fan_out_batch(broadcast_id=broadcast_id, lease=broadcast.lease, page=stale)
        assert batch.created == 4 and batch.cursor is not None
        fan_out_here(broadcast_id)
    made = Notification.objects.filter(broadcast_id=broadcast_id)
    assert sorted(made.values_list("user_id", flat=True)) == sorted(user_ids)
    assert Broadcast.objects.get(pk=broadcast_id).status == BroadcastStatus.SENT


@pytest.mark.django_db
def test_a_resumed_fan_out_makes_no_duplicate_and_misses_nobody(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    client = client_and_token[0]
    user_ids = subscribe(client, "news", 25, email="{n}@example.com")
    broadcast_id = post_broadcast(api, EMAIL_BODY).json()["id"]
    with override_notifications(BROADCAST_BATCH_SIZE=4):
        assert services.broadcast_fan_out(broadcast_id=broadcast_id, slice_seconds=0).batches == 1  # a slice ends
        services.broadcast_fan_out_batch(broadcast_id=broadcast_id, lease=Broadcast.objects.get(pk=broadcast_id).lease)
        # As if the cursor's advance had been lost: the same subscribers are read again.
        Broadcast.objects.filter(pk=broadcast_id).update(cursor=0)
        fan_out_here(broadcast_id)

    made = Notification.objects.filter(broadcast_id=broadcast_id)
    assert sorted(made.values_list("user_id", flat=True)) == sorted(user_ids)
    assert counts(api, broadcast_id)["created"] == 25


@pytest.mark.django_db
def test_cancel_mid_fan_out_stops_it_and_cancels_what_has_not_started_sending(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    subscribe(client_and_token[0], "news", 10, email="{n}@example.com")
    broadcast_id = post_broadcast(api, EMAIL_BODY).json()["id"]
    with override_notifications(BROADCAST_BATCH_SIZE=3):
        services.broadcast_fan_out(broadcast_id=broadcast_id, slice_seconds=0)  # one batch of 3
        sending = Notification.objects.filter(broadcast_id=broadcast_id).order_by("user_id").first()
        assert sending is not None
        Notification.objects.filter(pk=sending.pk).update(status=Status.SENDING)

        cancelled = api.post(f"/api/v1/broadcasts/{broadcast_id}/cancel")
        assert cancelled.status_code == 200, cancelled.content
        report = fan_out_here(broadcast_id)

    assert report.created == 0 and report.finished
    body = counts(api, broadcast_id)
    assert body["status"] == "cancelled"
    assert (body["created"], body["cancelled"], body["pending"]) == (3, 2, 1)  # the one sending goes on
    assert api.post(f"/api/v1/broadcasts/{broadcast_id}/cancel").status_code == 409


@pytest.mark.django_db
def test_the_notification_list_filters_by_broadcast(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    subscribe(client_and_token[0], "news", 3, email="{n}@example.com")
    broadcast_id = post_broadcast(api, EMAIL_BODY).json()["id"]
    fan_out_here(broadcast_id)
    api.post("/api/v1/notifications", {"user_id": "u0", "message": "alone"}, format="json")

    listed = api.get(f"/api/v1/notifications?broadcast={broadcast_id}").json()["results"]
    assert sorted(n["user_id"] for n in listed) == ["u0", "u1", "u2"]
    assert len(api.get("/api/v1/notifications").json()["results"]) == 4
    assert api.get("/api/v1/notifications?broadcast=nope").status_code == 400


@pytest.fixture
def stub_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubBroker]:
    with stub_broker_with(
        monkeypatch, (actors.fan_out_broadcast, actors.deliver_notification, actors.deliver_bulk_notification)
    ) as broker:
        yield broker


@pytest.mark.django_db
def test_the_sweeper_enqueues_a_stalled_fan_out_again_once(
    api: APIClient, client_and_token: tuple[ApiClient, str], stub_broker: StubBroker
) -> None:
    subscribe(client_and_token[0], "news", 2, email="{n}@example.com")
    stalled = post_broadcast(api, EMAIL_BODY, key="a").json()["id"]
    fresh = post_broadcast(api, EMAIL_BODY, key="b").json()["id"]
    Broadcast.objects.filter(pk=stalled).update(
        status=BroadcastStatus.FANNING_OUT, updated_at=timezone.now() - timedelta(minutes=5)
    )

    report = services.notification_sweep()
    services.notification_sweep()  # its heartbeat moved: not again

    assert report.broadcasts == 1
    messages = [dramatiq.Message.decode(data) for data in stub_broker.queues[BROADCAST_QUEUE].queue]
    assert [m.args for m in messages] == [(stalled,)]
    assert fresh != stalled


# --- End to end: real workers and sweeper, webhooks to a local receiver ---------------------------


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver()
    yield server
    server.stop()


@pytest.fixture
def e2e(receiver: WebhookReceiver, transactional_db: None, broker: dramatiq.Broker) -> Iterator[FaultPlatform]:
    running = FaultPlatform(receiver, NOTIFICATIONS_RATE_LIMITS="webhook=100000/s", BROADCAST_STALE_SECONDS="1")
    yield running
    running.stop()


WEBHOOK_BODY = {"topic": "news", "channel": "webhook", "message": "launch"}


def _delivery_worker(platform: FaultPlatform) -> None:
    platform._start("rundramatiq", "--processes", "1", "--threads", "8", "--queues", HIGH_QUEUE, BULK_QUEUE)


def _webhook_subscribers(client: ApiClient, receiver: WebhookReceiver, count: int) -> list[str]:
    return subscribe(client, "news", count, webhook_url=receiver.url("/hooks/{n}"))


def _assert_one_webhook_each(receiver: WebhookReceiver, broadcast_id: str, user_ids: list[str]) -> None:
    made = Notification.objects.filter(broadcast_id=broadcast_id)
    per_user = made.values("user_id").annotate(n=Count("pk")).filter(n__gt=1)
    assert not per_user.exists()
    assert sorted(made.values_list("user_id", flat=True)) == sorted(user_ids)
    receipts = receiver.receipts()
    ids = {str(pk) for pk in made.values_list("pk", flat=True)}
    assert set(receipts) == ids
    assert max(receipts.values()) == 1
    paths = collections.Counter(request.path for request in receiver.requests)
    assert sorted(paths) == sorted(f"/hooks/{u}" for u in user_ids)


def test_a_broadcast_to_2000_subscribers_delivers_one_webhook_each_with_the_counts_right(
    e2e: FaultPlatform, receiver: WebhookReceiver, api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    user_ids = _webhook_subscribers(client_and_token[0], receiver, 2000)
    e2e.worker(threads=8)
    broadcast_id = post_broadcast(api, WEBHOOK_BODY).json()["id"]

    e2e.wait(lambda: len(receiver.requests) >= 2000, timeout=180, message="2000 webhooks")
    e2e.wait(lambda: counts(api, broadcast_id)["delivered"] == 2000, timeout=30, message="2000 delivered")

    _assert_one_webhook_each(receiver, broadcast_id, user_ids)
    body = counts(api, broadcast_id)
    assert body["status"] == "sent"
    assert (body["total"], body["created"], body["delivered"], body["suppressed"], body["failed"]) == (2000, 2000, 2000, 0, 0)


@pytest.mark.fault
def test_a_fan_out_killed_halfway_is_resumed_by_the_sweeper_with_no_duplicate_and_nobody_missed(
    e2e: FaultPlatform,
    receiver: WebhookReceiver,
    broker: dramatiq.Broker,
    api: APIClient,
    client_and_token: tuple[ApiClient, str],
) -> None:
    user_ids = _webhook_subscribers(client_and_token[0], receiver, 1500)
    _delivery_worker(e2e)
    fan_out = e2e._start(
        "rundramatiq", "--processes", "1", "--threads", "1", "--queues", BROADCAST_QUEUE, BROADCAST_BATCH_SIZE="10"
    )
    broadcast_id = post_broadcast(api, WEBHOOK_BODY).json()["id"]

    def made() -> int:
        return Notification.objects.filter(broadcast_id=broadcast_id).count()

    e2e.wait(lambda: made() >= 100, timeout=60, message="the first batches committed")
    e2e.kill(fan_out)
    at_kill = made()
    broadcast = Broadcast.objects.get(pk=broadcast_id)
    assert broadcast.status == BroadcastStatus.FANNING_OUT and 0 < at_kill < 1500
    assert broadcast.cursor > 0
    broker.flush(BROADCAST_QUEUE)  # the killed worker's message too: the sweeper alone brings it back

    e2e.sweeper()
    e2e._start("rundramatiq", "--processes", "1", "--threads", "1", "--queues", BROADCAST_QUEUE)
    e2e.wait(lambda: Broadcast.objects.get(pk=broadcast_id).status == BroadcastStatus.SENT, timeout=60, message="fanned out")
    e2e.wait(lambda: len(receiver.requests) >= 1500, timeout=120, message="1500 webhooks")
    e2e.wait(lambda: counts(api, broadcast_id)["delivered"] == 1500, timeout=30, message="1500 delivered")

    _assert_one_webhook_each(receiver, broadcast_id, user_ids)
    assert counts(api, broadcast_id)["total"] == 1500


@pytest.mark.django_db
def test_the_admin_shows_a_broadcast_with_its_progress_and_counts(
    admin_client: Any, api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    subscribe(client_and_token[0], "news", 4, email="{n}@example.com")
    api.put("/api/v1/recipients/u3/preferences", {"channels": {"email": False}}, format="json")
    broadcast_id = post_broadcast(api, EMAIL_BODY).json()["id"]
    fan_out_here(broadcast_id)
    Notification.objects.filter(broadcast_id=broadcast_id, user_id="u0").update(status=Status.DELIVERED)

    listing = admin_client.get("/admin/notifications/broadcast/")
    assert listing.status_code == 200
    page = listing.content.decode()
    assert '<progress value="4" max="4"></progress> 4 / 4' in page  # made
    assert '<progress value="1" max="4"></progress> 1 / 4' in page  # delivered
    detail = admin_client.get(f"/admin/notifications/broadcast/{broadcast_id}/change/")
    assert detail.status_code == 200
    assert "&quot;suppressed&quot;: 1" in detail.content.decode()
    notifications = admin_client.get(f"/admin/notifications/notification/?broadcast={broadcast_id}")
    assert notifications.status_code == 200
    assert admin_client.get("/admin/notifications/topic/").status_code == 200


@pytest.mark.django_db
def test_a_broadcast_with_a_fallback_route_plans_each_subscribers_route_as_a_notification_would(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    subscribe(client_and_token[0], "news", 2, email="{n}@example.com")
    Recipient.objects.filter(user_id="u1").update(phone="+14155550123")
    body = {"topic": "news", "channels": ["sms", "email"], "message": "We launched!"}
    response = post_broadcast(api, body)
    assert response.status_code == 202, response.content
    assert Broadcast.objects.get().channels == ["sms", "email"]

    fan_out_here(response.json()["id"])

    by_user = {n.user_id: n for n in Notification.objects.filter(broadcast_id=response.json()["id"])}
    assert (by_user["u0"].channel, by_user["u0"].address) == ("email", "u0@example.com")  # no phone: sms skipped
    assert (by_user["u1"].channel, by_user["u1"].address) == ("sms", "+14155550123")


# --- One fan-out chain at a time, caps, content, SQLite ---------------------------------------------


def _run_fan_out_message(queue: Any) -> services.fanout.broadcasts.FanOutReport:
    """Take the next fan-out message off the stub broker's queue and run it as the actor would,
    one batch a slice."""
    message = dramatiq.Message.decode(queue.get_nowait())
    broadcast_id, *lease = message.args
    return services.broadcast_fan_out(broadcast_id=broadcast_id, lease=lease[0] if lease else None, slice_seconds=0)


@pytest.mark.django_db
def test_a_fan_out_resumed_while_its_continuation_waits_leaves_one_chain_and_no_duplicate(
    api: APIClient, client_and_token: tuple[ApiClient, str], stub_broker: StubBroker
) -> None:
    user_ids = subscribe(client_and_token[0], "news", 10, email="{n}@example.com")
    broadcast_id = post_broadcast(api, EMAIL_BODY).json()["id"]
    queue = stub_broker.queues[BROADCAST_QUEUE]
    with override_notifications(BROADCAST_BATCH_SIZE=3):
        services.broadcast_fan_out(broadcast_id=broadcast_id, slice_seconds=0)  # one batch, then its continuation
        # The continuation waits in the queue past BROADCAST_STALE_SECONDS: the sweeper resumes the fan-out.
        Broadcast.objects.filter(pk=broadcast_id).update(updated_at=timezone.now() - timedelta(minutes=5))
        assert services.broadcast_resume_stale() == 1
        assert queue.qsize() == 2

        first, second = _run_fan_out_message(queue), _run_fan_out_message(queue)

        assert (first.batches, first.superseded) == (1, False)
        assert (second.batches, second.superseded) == (0, True)  # no batch, no continuation of its own
        assert queue.qsize() == 1
        runs = 0
        while queue.qsize():
            report = _run_fan_out_message(queue)
            assert queue.qsize() <= 1 and not report.superseded
            runs += 1
            assert runs < 10, "the fan-out never ended"

    made = Notification.objects.filter(broadcast_id=broadcast_id)
    assert sorted(made.values_list("user_id", flat=True)) == sorted(user_ids)
    assert counts(api, broadcast_id)["status"] == "sent"


def test_a_second_fan_out_message_exits_at_once_while_a_batch_holds_the_broadcast(
    transactional_db: None, stub_broker: StubBroker
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection, transaction

    from .factories import make_api_client

    client, _ = make_api_client("lease")
    subscribe(client, "news", 3, email="{n}@example.com")
    accepted = services.broadcast_create(
        client=client, request=services.BroadcastRequest(topic="news", message="hi"), idempotency_key="k", fingerprint="f"
    )

    def second_message() -> services.fanout.broadcasts.FanOutReport:
        try:
            return services.broadcast_fan_out(broadcast_id=accepted.notification_id, slice_seconds=600)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        with transaction.atomic():  # as a batch in flight holds it
            Broadcast.objects.select_for_update().get(pk=accepted.notification_id)
            report = pool.submit(second_message).result(timeout=20)  # would wait for the lock without skip_locked
        assert (report.batches, report.superseded) == (0, True)

    assert not Notification.objects.exists()


@pytest.mark.django_db
def test_a_broadcast_keeps_to_each_recipients_cap_and_a_redone_batch_does_not_count_twice(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    client = client_and_token[0]
    Category.objects.create(client=client, key="news", max_per_recipient={"count": 1, "per_seconds": 3600})
    subscribe(client, "news", 2, email="{n}@example.com")
    accept_notification(client, user_id="u0", to="u0@example.com", category="news")  # u0's one slot is used
    broadcast_id = post_broadcast(api, {**EMAIL_BODY, "category": "news"}).json()["id"]

    fan_out_here(broadcast_id)

    by_user = {n.user_id: n for n in Notification.objects.filter(broadcast_id=broadcast_id)}
    assert (by_user["u0"].status, by_user["u0"].suppressed_reason) == (Status.SUPPRESSED, "throttled")
    assert by_user["u1"].status == Status.QUEUED
    # A worker killed mid-batch: its rows rolled back, its slots still taken. Redone, the batch
    # finds u1's slot its own: u1 is neither throttled by it nor charged a second slot.
    Notification.objects.filter(broadcast_id=broadcast_id).delete()
    Broadcast.objects.filter(pk=broadcast_id).update(status=BroadcastStatus.FANNING_OUT, cursor=0)
    fan_out_here(broadcast_id)
    assert Notification.objects.get(broadcast_id=broadcast_id, user_id="u1").status == Status.QUEUED
    assert accept_notification(client, user_id="u1", to="u1@example.com", category="news").suppressed_reason == "throttled"


@pytest.mark.django_db
def test_a_template_deleted_after_the_broadcast_was_accepted_fails_each_notification_saying_why(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    template = make_template("launch", body="Hello {{ name }}")
    subscribe(client_and_token[0], "news", 2, email="{n}@example.com")
    broadcast_id = post_broadcast(api, {"topic": "news", "template": "launch", "data": {"name": "Ann"}}).json()["id"]
    template.delete()

    fan_out_here(broadcast_id)

    made = list(Notification.objects.filter(broadcast_id=broadcast_id))
    assert [n.status for n in made] == [Status.FAILED] * 2
    assert all("unknown template 'launch'" in n.last_error for n in made)


def test_returned_ids_are_the_fields_python_values_whatever_the_database_returns() -> None:
    # SQLite returns a UUID column as its 32-hex string: it must still match the notification's id.
    notification_id = uuid.uuid4()
    assert returned_values(Notification._meta.pk, [(notification_id.hex,)]) == {notification_id}
    assert returned_values(Notification._meta.pk, [(notification_id,)]) == {notification_id}


def test_a_broadcast_on_the_embedded_default_is_fanned_out_and_delivered(tmp_path: Path) -> None:
    """`make run`'s SQLite, in-process broker and workers: the fan-out publishes what it inserted."""
    with embedded_platform(tmp_path) as (server, token):

        def call(method: str, path: str, body: Any = None, **headers: str) -> requests.Response:
            auth = {"Authorization": f"Bearer {token}", **headers}
            return requests.request(method, server.url(path), json=body, headers=auth, timeout=30)

        for n in range(3):
            assert call("PUT", f"/api/v1/recipients/u{n}", {"email": f"u{n}@example.com"}).status_code in (200, 201)
        assert call("PUT", "/api/v1/topics/news", {}).status_code == 201
        assert call("POST", "/api/v1/topics/news/subscribers", {"user_ids": ["u0", "u1", "u2"]}).status_code == 200
        posted = call("POST", "/api/v1/broadcasts", EMAIL_BODY, **{"Idempotency-Key": "embedded-1"})
        assert posted.status_code == 202, posted.content

        def progress() -> dict[str, Any]:
            return dict(call("GET", f"/api/v1/broadcasts/{posted.json()['id']}").json())

        wait_until(lambda: progress()["delivered"] == 3, timeout=60, message="3 delivered on the embedded default")
        body = progress()
        assert (body["status"], body["total"], body["created"], body["pending"]) == ("sent", 3, 3, 0)
        assert "Traceback" not in server.output()
