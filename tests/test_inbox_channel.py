"""The in_app channel in the platform's pipeline (on the embedded default as on the services):
accept with no stored address, delivery as an inbox item once, templates, preferences, quiet
hours, fallback routes, broadcasts and digests; the counters through every mark."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from notifications import services
from notifications.errors import NotFound
from notifications.inbox.store import inbox_item_deliver, inbox_items_change
from notifications.models import ApiClient, Digest, InboxCounter, InboxEvent, InboxItem, Notification, Status
from notifications.selectors.inbox import inbox_counts
from notifications.services.inbox import InboxUser, inbox_item_mark, inbox_items_bulk_mark

from .factories import make_recipient, make_template
from .inbox_helpers import deliver_item
from .test_broadcasts import fan_out_here, post_broadcast, subscribe

pytestmark = pytest.mark.django_db

URL = "/api/v1/notifications"


def deliver(notification_id: Any) -> Notification:
    outcome = services.notification_deliver(notification_id=notification_id)
    assert outcome.outcome == "delivered", outcome
    return Notification.objects.get(pk=notification_id)


def accept(api: APIClient, **body: Any) -> Any:
    content = {} if "template" in body else {"subject": "Hi", "message": "Hello"}
    return api.post(URL, {"user_id": "ann", "channel": "in_app", **content, **body}, format="json")


def user(client: ApiClient, user_id: str = "ann") -> InboxUser:
    now = timezone.now()
    return InboxUser(client=client, user_id=user_id, expires_at=now + timedelta(hours=1), issued_at=now)


def test_an_in_app_notification_needs_no_stored_address_and_becomes_one_item(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    answer = accept(api, action_url="https://shop.example.com/orders/7", thread_key="order-7", metadata={"order": 7})
    assert answer.status_code == 202, answer.content

    notification = deliver(answer.json()["id"])

    assert notification.status == Status.DELIVERED and notification.address == "ann"
    item = InboxItem.objects.get()
    assert (item.user_id, item.title, item.body, item.category) == ("ann", "Hi", "Hello", "transactional")
    assert (item.action_url, item.thread_key, item.data) == ("https://shop.example.com/orders/7", "order-7", {"order": 7})
    assert notification.provider_message_id == str(item.pk)
    assert inbox_counts(client_id=client_and_token[0].pk, user_id="ann").as_dict() == {"unseen": 1, "unread": 1, "total": 1}
    assert list(InboxEvent.objects.values_list("type", flat=True).order_by("id")) == ["item.created", "counts"]


def test_a_redelivery_of_the_same_notification_makes_no_second_item(client_and_token: tuple[ApiClient, str]) -> None:
    client = client_and_token[0]
    item = deliver_item(client, "ann")
    values = {"client_id": client.pk, "user_id": "ann", "notification_id": item.notification_id, "title": "again"}

    again, made = inbox_item_deliver(values=values)

    assert (again.pk, made) == (item.pk, False)
    assert InboxItem.objects.count() == 1 and InboxCounter.objects.get().total == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action_url": "javascript:alert(1)"}, "action_url"),
        ({"action_url": "https://x.example/" + "a" * 2000}, "action_url"),
        ({"to": "someone-else"}, "to"),
        ({"thread_key": "t" * 256}, "thread_key"),
    ],
)
def test_bad_in_app_fields_are_400_naming_the_field(api: APIClient, body: dict[str, Any], field: str) -> None:
    answer = accept(api, **body)
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["field"] == field


def test_quiet_hours_do_not_hold_an_in_app_notification(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    now = timezone.now()
    window = {"start": (now - timedelta(hours=1)).strftime("%H:%M"), "end": (now + timedelta(hours=2)).strftime("%H:%M")}
    make_recipient(client_and_token[0], "ann", email="ann@example.com", timezone="UTC", quiet_hours=window)

    in_app = Notification.objects.get(pk=accept(api).json()["id"])
    email = Notification.objects.get(pk=api.post(URL, {"user_id": "ann", "message": "m"}, format="json").json()["id"])

    assert in_app.status == Status.QUEUED and in_app.next_attempt_at <= timezone.now()
    assert email.status == Status.ACCEPTED and email.next_attempt_at > timezone.now()  # held to the window's end


def test_an_opt_out_of_in_app_suppresses_it(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    make_recipient(client_and_token[0], "ann")
    services.recipient_preferences_replace(client=client_and_token[0], user_id="ann", channels={"in_app": False}, categories={})

    notification = Notification.objects.get(pk=accept(api).json()["id"])

    assert notification.status == Status.SUPPRESSED and not InboxItem.objects.exists()


def test_a_fallback_route_falls_to_in_app_when_the_recipient_has_no_push_token(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    make_recipient(client_and_token[0], "ann")
    answer = api.post(URL, {"user_id": "ann", "channels": ["push", "in_app"], "message": "Sale"}, format="json")

    notification = deliver(answer.json()["id"])

    assert notification.channel == "in_app" and [entry["outcome"] for entry in notification.route] == ["skipped", "delivered"]
    assert InboxItem.objects.get().body == "Sale"


def test_a_template_renders_its_in_app_variant(api: APIClient) -> None:
    make_template("shipped", channel="in_app", subject="Order {{ order }} shipped", body="It is on its way", html_body="")

    notification = deliver(accept(api, template="shipped", data={"order": 7}).json()["id"])

    assert notification.status == Status.DELIVERED
    assert InboxItem.objects.values_list("title", "body").get() == ("Order 7 shipped", "It is on its way")


def test_a_broadcast_on_in_app_puts_an_item_in_every_subscribers_inbox(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    subscribe(client_and_token[0], "news", 3)
    broadcast = post_broadcast(api, {"topic": "news", "channel": "in_app", "message": "We launched!", "subject": "Launch"})
    assert broadcast.status_code == 202, broadcast.content
    fan_out_here(broadcast.json()["id"])

    for notification in Notification.objects.filter(broadcast_id=broadcast.json()["id"]):
        deliver(notification.pk)

    assert sorted(InboxItem.objects.values_list("user_id", flat=True)) == ["u0", "u1", "u2"]


def test_a_digest_on_in_app_is_one_item(api: APIClient) -> None:
    make_template(
        "activity", channel="in_app", subject="{{ count }} new", body="{% for i in items %}{{ i.n }} {% endfor %}", html_body=""
    )
    for n in range(3):
        answer = accept(api, template="activity", data={"n": n}, digest={"key": "activity", "window_seconds": 60})
        assert answer.status_code == 202, answer.content
    digest = Digest.objects.get()

    assert services.digest_close(digest_id=digest.pk, now=digest.closes_at).outcome == "sent"
    digest.refresh_from_db()
    # Closed as of its window's end, a minute from now: that is when it is due.
    Notification.objects.filter(pk=digest.notification_id).update(next_attempt_at=timezone.now())
    deliver(digest.notification_id)

    assert InboxItem.objects.values_list("title", "body").get() == ("3 new", "0 1 2 ")


def test_the_counters_follow_every_mark(client_and_token: tuple[ApiClient, str]) -> None:
    client = client_and_token[0]
    items = [deliver_item(client, "ann", f"n{index}", category="orders" if index < 2 else "news") for index in range(4)]
    ann = user(client)

    def counts() -> dict[str, int]:
        return inbox_counts(client_id=client.pk, user_id="ann").as_dict()

    inbox_item_mark(user=ann, item_id=str(items[0].pk), action="seen")
    assert counts() == {"unseen": 3, "unread": 4, "total": 4}
    inbox_item_mark(user=ann, item_id=str(items[0].pk), action="read")
    inbox_item_mark(user=ann, item_id=str(items[0].pk), action="read")  # already read: nothing moves
    assert counts() == {"unseen": 3, "unread": 3, "total": 4}
    inbox_item_mark(user=ann, item_id=str(items[1].pk), action="archive")
    assert counts() == {"unseen": 2, "unread": 2, "total": 3}
    inbox_item_mark(user=ann, item_id=str(items[0].pk), action="unread")
    assert counts() == {"unseen": 2, "unread": 3, "total": 3}
    assert inbox_items_bulk_mark(user=ann, action="read", category="news") == 2
    assert counts() == {"unseen": 0, "unread": 1, "total": 3}
    inbox_item_mark(user=ann, item_id=str(items[1].pk), action="unarchive")
    assert counts() == {"unseen": 1, "unread": 2, "total": 4}
    assert inbox_items_bulk_mark(user=ann, action="archive") == 4
    assert counts() == {"unseen": 0, "unread": 0, "total": 0}
    assert inbox_items_change(client_id=client.pk, user_id="ann", items=InboxItem.objects.none(), action="read") == []


def test_another_users_item_is_not_found(client_and_token: tuple[ApiClient, str]) -> None:
    client = client_and_token[0]
    bobs = deliver_item(client, "bob")

    with pytest.raises(NotFound):
        inbox_item_mark(user=user(client), item_id=str(bobs.pk), action="read")
    assert InboxItem.objects.get(pk=bobs.pk).read_at is None


def test_a_stream_sends_what_its_wake_ups_carried_only_when_they_follow_its_last_event() -> None:
    from notifications.api.inbox.stream_events import told_events as _told
    from notifications.inbox.live import Told

    first, second = Told(10, [(11, "item.created", {}), (12, "counts", {})]), Told(12, [(13, "counts", {})])

    assert [event[0] for event in _told([first, second], 10) or []] == [11, 12, 13]
    assert [event[0] for event in _told([first, second], 12) or []] == [13]  # the first was read already
    assert _told([second], 10) is None  # a wake-up between was lost or comes later: read the database
    assert _told([first, None], 10) is None  # one carried nothing (too large, or a revocation)
    assert _told([], 10) == []
