"""A render failure is an outcome: a digest or broadcast whose template raises ends ``failed`` with
its reason, once, and the sweeps take the oldest due first in turns by client, so one client's
backlog of poisoned work never hides another client's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import dramatiq
import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from notifications import services
from notifications.models import (
    ApiClient,
    Broadcast,
    DeadLetter,
    DeadLetterReason,
    Digest,
    DigestStatus,
    Notification,
    Recipient,
    Status,
    TemplateVariant,
)
from notifications.services import sweeper as sweeper_module
from notifications.services.digests import close as digests_module

from .factories import accept_notification, make_api_client, make_template
from .fakes import override_notifications
from .helpers import wait_until

# Renders with the one item the accept checks it with; raises once a digest has two.
# (Literal forms such as {{ "a"|ljust:"b" }} or {% url %} are refused when stored: templates bounds.)
POISONED = {
    "value_error": '{{ count }} updates{% if count > 1 %}{{ count|divisibleby:"x" }}{% endif %}',
    "zero_division": "{{ count }} updates{% if count > 1 %}{{ count|divisibleby:0 }}{% endif %}",
}
GOOD = "{{ count }} updates:{% for item in items %} {{ item.n }};{% endfor %}"


def accept_member(client: ApiClient, n: int, *, template: str, key: str = "activity", user_id: str = "u1") -> Notification:
    return accept_notification(
        client,
        user_id=user_id,
        message="",
        to=f"{user_id}@example.com",
        template=template,
        data={"n": n},
        digest=services.DigestRequest(key=key, window_seconds=3600),
    )


def due_at(digest_id: Any, when: Any) -> None:
    """Move a digest's window end (to make it due, or older than another)."""
    Digest.objects.filter(pk=digest_id).update(closes_at=when)


# --- Digests -------------------------------------------------------------------------------------


@pytest.mark.parametrize("poison", sorted(POISONED))
def test_a_digest_whose_template_raises_at_its_close_ends_failed_with_one_dead_letter_and_is_not_tried_again(
    broker: dramatiq.Broker, db: None, poison: str
) -> None:
    client, _ = make_api_client()
    make_template("activity", client=client, subject="news", body=POISONED[poison], html_body="")
    members = [accept_member(client, n, template="activity") for n in range(2)]
    digest = Digest.objects.get()
    now = digest.closes_at + timedelta(seconds=5)

    services.notification_sweep(now=now)
    services.notification_sweep(now=now + timedelta(seconds=1))  # a second pass finds nothing to do

    digest.refresh_from_db()
    assert digest.status == "failed"  # DigestStatus.FAILED
    assert "could not be rendered" in digest.failure_reason
    assert digest.notification is not None and digest.notification.status == Status.FAILED
    [dead_letter] = DeadLetter.objects.all()
    assert (dead_letter.reason, dead_letter.notification_id) == (DeadLetterReason.RENDER_FAILED, digest.notification_id)
    assert dead_letter.last_error == digest.failure_reason
    # Its members stay with it, reached from the dead letter's notification.
    reached = Notification.objects.filter(digest_id=dead_letter.notification.digest_id, status=Status.DIGESTED)
    assert sorted(reached.values_list("pk", flat=True)) == sorted(m.pk for m in members)
    assert services.digest_close(digest_id=digest.pk, now=now).outcome == "closed"
    redrive = services.dead_letter_redrive(dead_letter=dead_letter, by=None)
    assert not redrive.done and "could not be rendered" in redrive.detail


def test_the_admin_shows_a_failed_digests_reason_and_reaches_its_members_from_its_dead_letter(
    broker: dramatiq.Broker, db: None
) -> None:
    client, _ = make_api_client()
    make_template("activity", client=client, subject="news", body=POISONED["value_error"], html_body="")
    members = [accept_member(client, n, template="activity") for n in range(2)]
    digest = Digest.objects.get()
    services.digest_close(digest_id=digest.pk, now=digest.closes_at)
    digest.refresh_from_db()
    dead_letter = DeadLetter.objects.get()
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="root-pass-1"))

    page = admin.get(f"/admin/notifications/deadletter/{dead_letter.pk}/change/").content.decode()
    assert f"/admin/notifications/digest/{digest.pk}/change/" in page
    members_url = f"/admin/notifications/notification/?digest={digest.pk}&amp;status__exact=digested"
    assert members_url in page
    digest_page = admin.get(f"/admin/notifications/digest/{digest.pk}/change/").content.decode()
    assert "ValueError" in digest_page and members_url in digest_page
    listed = admin.get(members_url.replace("&amp;", "&"))
    assert listed.status_code == 200
    assert {str(n.pk) for n in listed.context["cl"].result_list} == {str(m.pk) for m in members}


def test_with_300_poisoned_digests_of_one_client_due_another_clients_digest_closes_in_the_first_pass(
    broker: dramatiq.Broker, db: None
) -> None:
    poisoner, _ = make_api_client()
    other, _ = make_api_client()
    poisoned = make_template("activity", client=poisoner, subject="news", body=GOOD, html_body="")
    make_template("activity", client=other, subject="news", body=GOOD, html_body="")
    accept_member(other, 1, template="activity")  # opened first: then the other client's flood
    for n in range(300):
        accept_member(poisoner, n, template="activity", key=f"k{n}")
    poisoned.variants.update(body='{{ 1|divisibleby:"x" }}')  # edited since: every close of its digests raises
    now = timezone.now()
    # The poisoned ones are all older than the other client's; the other client's is the newest due.
    for n, digest_id in enumerate(Digest.objects.filter(client=poisoner).order_by("key").values_list("pk", flat=True)):
        due_at(digest_id, now - timedelta(seconds=600 - n))
    good = Digest.objects.get(client=other)
    due_at(good.pk, now - timedelta(seconds=5))

    services.notification_sweep(now=now)

    good.refresh_from_db()
    assert good.status == DigestStatus.SENT
    assert good.notification is not None and good.notification.message.startswith("1 updates: 1;")
    # As many of the poisoned as the pass had time for ended failed; none is left half-closed.
    assert Digest.objects.filter(client=poisoner, status="failed").count() >= 1
    assert Digest.objects.filter(client=poisoner).exclude(status__in=["open", "failed"]).count() == 0


def test_the_digest_sweep_takes_the_oldest_due_first_in_turns_by_client(
    broker: dramatiq.Broker, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    clients = {name: make_api_client()[0] for name in "XYZ"}
    for client in clients.values():
        make_template("activity", client=client, subject="news", body=GOOD, html_body="")
    now = timezone.now()
    ages = {"X": [30, 20, 10], "Y": [25, 5], "Z": [1]}
    label: dict[Any, str] = {}
    for name, seconds in ages.items():
        for age in seconds:
            accept_member(clients[name], age, template="activity", key=f"k{age}")
            digest = Digest.objects.get(client=clients[name], key=f"k{age}")
            due_at(digest.pk, now - timedelta(seconds=age + digests_module.DIGEST_SWEEP_GRACE_SECONDS))
            label[digest.pk] = f"{name}{age}"
    order: list[str] = []
    close = digests_module.digest_close

    def recorded(*, digest_id: Any, now: Any) -> Any:
        order.append(label[digest_id])
        return close(digest_id=digest_id, now=now)

    monkeypatch.setattr(digests_module, "digest_close", recorded)
    monkeypatch.setattr(digests_module, "DIGEST_SWEEP_BATCH", 5)
    monkeypatch.setattr(digests_module, "DIGEST_SWEEP_SECONDS", 60.0)

    assert services.digest_sweep(now=now) == 5

    # Every client's oldest, oldest first; then every client's second; the last X waits its turn.
    assert order == ["X30", "Y25", "Z1", "X20", "Y5"]


def test_the_notification_sweep_takes_the_oldest_due_first_in_turns_by_client(
    broker: dramatiq.Broker, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    backlog, _ = make_api_client()
    other, _ = make_api_client()
    now = timezone.now()
    ids = {}
    for name, client, ages in (("B", backlog, [50, 40, 30, 20]), ("O", other, [10])):
        for age in ages:
            notification = accept_notification(client, send_at=now + timedelta(hours=1))
            Notification.objects.filter(pk=notification.pk).update(
                next_attempt_at=now - timedelta(seconds=age), enqueued_at=None, status=Status.ACCEPTED
            )
            ids[notification.pk] = f"{name}{age}"
    taken: list[list[str]] = []
    monkeypatch.setattr(
        sweeper_module, "notifications_enqueue", lambda *, notification_ids: taken.append([ids[i] for i in notification_ids]) or 0
    )
    monkeypatch.setattr(sweeper_module, "SWEEP_BATCH", 3)

    services.notification_sweep(now=now)

    assert taken[0] == ["B50", "O10", "B40"]


# --- Broadcasts ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_broadcast_whose_template_raises_ends_failed_and_the_notifications_it_made_are_delivered(
    worker: dramatiq.Worker,
) -> None:
    client, token = make_api_client()
    template = make_template("launch", client=client, subject="Launch", body="Hello {{ name }}", html_body="")
    # Checked at accept in the default locale only; the French variant raises for every subscriber who reads it.
    TemplateVariant.objects.create(
        template=template, channel="email", locale="fr", subject="Lancement", body='{{ 1|divisibleby:"x" }}'
    )
    services.topic_upsert(client=client, key="news", name="news")
    user_ids = [f"u{n}" for n in range(10)]
    Recipient.objects.bulk_create(
        Recipient(client=client, user_id=user_id, email=f"{user_id}@example.com", locale="fr" if n >= 6 else "")
        for n, user_id in enumerate(user_ids)
    )
    services.topic_subscribe(client=client, key="news", user_ids=user_ids)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    with override_notifications(BROADCAST_BATCH_SIZE=4):
        response = api.post("/api/v1/broadcasts", {"topic": "news", "template": "launch", "data": {"name": "Ann"}}, format="json")
        assert response.status_code == 202, response.content
        broadcast_id = response.json()["id"]
        wait_until(lambda: Broadcast.objects.get(pk=broadcast_id).status == "failed", timeout=20)

    broadcast = Broadcast.objects.get(pk=broadcast_id)
    assert "ValueError" in broadcast.failure_reason and broadcast.finished_at is not None
    body = api.get(f"/api/v1/broadcasts/{broadcast_id}").json()
    assert (body["status"], body["failure_reason"]) == ("failed", broadcast.failure_reason)
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="root-pass-1"))
    assert "ValueError" in admin.get(f"/admin/notifications/broadcast/{broadcast_id}/change/").content.decode()
    # The first batch (u0-u3, in English) was made before the second raised; it is delivered.
    made = Notification.objects.filter(broadcast_id=broadcast_id)
    assert sorted(made.values_list("user_id", flat=True)) == user_ids[:4]
    wait_until(lambda: made.filter(status=Status.DELIVERED).count() == 4, timeout=20)
    assert sorted(m.to[0] for m in mail.outbox if m.subject == "Launch") == [f"{u}@example.com" for u in user_ids[:4]]
    # The sweeper leaves it be: nothing is enqueued again once its heartbeat is old.
    assert services.broadcast_resume_stale(now=timezone.now() + timedelta(hours=1)) == 0


# --- At the API ----------------------------------------------------------------------------------


@pytest.mark.parametrize("poison", sorted(POISONED))
def test_a_template_that_raises_while_rendering_is_a_400_at_preview_not_a_500(api: APIClient, poison: str) -> None:
    body = POISONED[poison].replace("{% if count > 1 %}", "").replace("{% endif %}", "")
    saved = api.put("/api/v1/templates/raises", {"variants": [{"channel": "email", "locale": "en", "body": body}]}, format="json")
    assert saved.status_code in (200, 201), saved.content

    preview = api.post("/api/v1/templates/raises/preview", {"channel": "email", "data": {"count": 2}}, format="json")

    assert preview.status_code == 400, preview.content
    error = preview.json()["error"]
    assert (error["code"], error["field"]) == ("template_render_failed", "template")
    assert "could not be rendered" in error["message"]
