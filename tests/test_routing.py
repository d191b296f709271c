"""Channel fallback: a notification's ordered route of channels, each skipped (no address, an
opt-out, a suppressed address), failed (a permanent error, its attempts spent) or delivered; the
API's route and attempts; one dead letter when every channel failed, and a redrive that starts the
route again. Service-level against the real PostgreSQL and the fake providers' HTTP server, and
one test through the real broker and a real worker process."""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from notifications import services
from notifications.models import (
    ApiClient,
    AttemptOutcome,
    DeadLetter,
    DeadLetterReason,
    Notification,
    Status,
    Suppression,
)
from notifications.services.policy.content import NotificationContent
from notifications.services.policy.routing import route_advance, route_plan, route_with_outcome

from .factories import make_recipient
from .fakes import (  # noqa: F401  (fixtures)
    FakeProviderServer,
    LocalSmtpServer,
    Reply,
    fcm_error,
    override_notifications,
    provider_server_fixture,
    provider_settings,
    smtp_server_fixture,
    twilio_error,
)
from .helpers import PlatformProcess, platform_env, wait_until

URL = "/api/v1/notifications"
PHONE = "+14155550123"
DEVICE = "fcm-device-token-abc123"
FAST_RETRIES = {"RETRY_MAX_ATTEMPTS": 2, "RETRY_BASE_SECONDS": 0.01, "RETRY_CAP_SECONDS": 0.02}


def accept(api: APIClient, channels: list[str], **fields: Any) -> str:
    response = api.post(URL, {"user_id": "u1", "channels": channels, "message": "Parcel 42 shipped", **fields}, format="json")
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


def route_of(api: APIClient, notification_id: str) -> list[tuple[str, str, str]]:
    body = api.get(f"{URL}/{notification_id}").json()
    return [(entry["channel"], entry["outcome"], entry["reason"]) for entry in body["route"]]


def due(notification_id: str) -> bool:
    next_attempt_at = Notification.objects.get(pk=notification_id).next_attempt_at
    return next_attempt_at is None or next_attempt_at <= timezone.now()


def deliver_until_final(notification_id: str, *, tries: int = 10) -> Notification:
    """Drive one notification through its sends in this process as a worker would, retries and
    fallbacks included (the broker messages they publish are not needed for that)."""
    for _ in range(tries):
        notification = Notification.objects.get(pk=notification_id)
        if notification.status not in (Status.ACCEPTED, Status.QUEUED, Status.RETRYING):
            return notification
        wait_until(lambda: due(notification_id), timeout=5, message="the retry is due")
        services.notification_deliver(notification_id=notification_id)
    return Notification.objects.get(pk=notification_id)


@pytest.fixture
def webhook_allowed(provider_server: FakeProviderServer) -> Any:
    with override_notifications(WEBHOOK_ALLOW_HOSTS=[provider_server.host_port], **FAST_RETRIES):
        yield


def test_a_channel_without_an_address_is_skipped_a_failing_one_fails_and_the_next_delivers(
    api: APIClient, client_and_token: tuple[ApiClient, str], provider_server: FakeProviderServer, webhook_allowed: None
) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", phone=PHONE, webhook_url=provider_server.url("/hooks/u1"))  # no push token
    provider_server.reply_next(twilio_error(503, 20503, "Service unavailable"), twilio_error(503, 20503, "Service unavailable"))

    notification_id = accept(api, ["push", "sms", "webhook"])
    body = api.get(f"{URL}/{notification_id}").json()
    assert body["channel"] == "sms" and body["to"] == PHONE and body["status"] == Status.QUEUED
    assert route_of(api, notification_id) == [
        ("push", "skipped", "no_address"),
        ("sms", "pending", ""),
        ("webhook", "pending", ""),
    ]

    notification = deliver_until_final(notification_id)

    assert notification.status == Status.DELIVERED
    assert route_of(api, notification_id) == [
        ("push", "skipped", "no_address"),
        ("sms", "failed", "retries_exhausted"),
        ("webhook", "delivered", ""),
    ]
    body = api.get(f"{URL}/{notification_id}").json()
    assert body["channel"] == "webhook" and body["to"] == provider_server.url("/hooks/u1")
    assert [(a["number"], a["channel"], a["outcome"]) for a in body["attempts"]] == [
        (1, "sms", AttemptOutcome.TRANSIENT_ERROR),
        (2, "sms", AttemptOutcome.TRANSIENT_ERROR),
        (3, "webhook", AttemptOutcome.DELIVERED),
    ]
    # The SMS account is named on its attempts; nothing went to a push provider.
    assert {a["account"] for a in body["attempts"] if a["channel"] == "sms"} == {
        provider_settings(provider_server)["TWILIO_ACCOUNT_SID"]
    }
    assert [r.path for r in provider_server.requests][-1] == "/hooks/u1"
    assert not [r for r in provider_server.requests if "messages:send" in r.path]
    assert DeadLetter.objects.count() == 0


def test_when_every_channel_fails_there_is_one_dead_letter_and_its_redrive_starts_the_route_again(
    api: APIClient, client_and_token: tuple[ApiClient, str], provider_server: FakeProviderServer, webhook_allowed: None
) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", phone=PHONE, push_tokens=[DEVICE], webhook_url=provider_server.url("/hooks/u1"))
    provider_server.reply_next(
        twilio_error(400, 21211, "The 'To' number is not a valid phone number."),
        fcm_error(404, "NOT_FOUND", "Requested entity was not found.", "NOT_FOUND"),
        Reply(503, {"detail": "down"}),
        Reply(503, {"detail": "down"}),
    )
    notification_id = accept(api, ["sms", "push", "webhook"])

    notification = deliver_until_final(notification_id)

    assert notification.status in (Status.FAILED, Status.DEAD)
    assert route_of(api, notification_id) == [
        ("sms", "failed", "permanent_error"),
        ("push", "failed", "permanent_error"),
        ("webhook", "failed", "retries_exhausted"),
    ]
    [dead_letter] = DeadLetter.objects.filter(notification_id=notification_id)
    assert (dead_letter.channel, dead_letter.reason) == ("webhook", DeadLetterReason.RETRIES_EXHAUSTED)
    assert notification.attempts.count() == 4
    # Its attempt count is every attempt of its route; each channel had its own budget.
    assert (notification.attempt_count, dead_letter.attempts) == (4, 4)
    assert [entry.get("attempts") for entry in notification.route] == [1, 1, 2]

    result = services.dead_letter_redrive(dead_letter=dead_letter, by=None)
    assert result.done, result.detail
    notification.refresh_from_db()
    assert (notification.status, notification.channel, notification.address, notification.attempt_count) == (
        Status.QUEUED,
        "sms",
        PHONE,
        0,
    )
    assert route_of(api, notification_id) == [("sms", "pending", ""), ("push", "pending", ""), ("webhook", "pending", "")]

    notification = deliver_until_final(notification_id)  # the SMS provider answers 201 now
    assert notification.status == Status.DELIVERED
    assert route_of(api, notification_id) == [("sms", "delivered", ""), ("push", "pending", ""), ("webhook", "pending", "")]
    assert list(notification.attempts.order_by("number").values_list("number", "channel"))[-1] == (5, "sms")


def test_a_route_whose_every_channel_is_skipped_is_suppressed_and_sends_nothing(
    api: APIClient, client_and_token: tuple[ApiClient, str], provider_server: FakeProviderServer
) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", email="ann@example.com")
    services.recipient_preferences_replace(client=client, user_id="u1", channels={"email": False}, categories={})

    notification_id = accept(api, ["push", "email"])

    notification = Notification.objects.get(pk=notification_id)
    assert (notification.status, notification.suppressed_reason) == (Status.SUPPRESSED, "no_address")
    assert route_of(api, notification_id) == [("push", "skipped", "no_address"), ("email", "skipped", "preference")]
    assert notification.attempts.count() == 0 and provider_server.requests == []


def test_a_suppressed_address_is_skipped(api: APIClient, client_and_token: tuple[ApiClient, str]) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", email="ann@example.com", phone=PHONE)
    Suppression.objects.create(client=client, channel="email", address="ann@example.com", reason="bounced")

    notification_id = accept(api, ["email", "sms"])

    assert route_of(api, notification_id) == [("email", "skipped", "bounced"), ("sms", "pending", "")]
    assert Notification.objects.get(pk=notification_id).channel == "sms"


@pytest.mark.parametrize(
    ("withhold", "reason"),
    [
        (
            lambda client: services.recipient_preferences_replace(
                client=client, user_id="u1", channels={"email": False}, categories={}
            ),
            "preference",
        ),
        (
            lambda client: Suppression.objects.create(
                client=client, channel="email", address="ann@example.com", reason="bounced"
            ),
            "bounced",
        ),
    ],
    ids=["opted-out", "suppressed-address"],
)
def test_a_channel_withheld_after_accept_is_skipped_at_its_send_and_the_next_channel_delivers(
    api: APIClient, client_and_token: tuple[ApiClient, str], provider_server: FakeProviderServer, withhold: Any, reason: str
) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", email="ann@example.com", phone=PHONE)
    notification_id = accept(api, ["email", "sms"])
    assert Notification.objects.get(pk=notification_id).channel == "email"
    withhold(client)  # a one-click unsubscribe, a bounce of another email, between accept and send

    assert services.notification_deliver(notification_id=notification_id).outcome == "fallback"
    notification = deliver_until_final(notification_id)

    assert (notification.status, notification.channel) == (Status.DELIVERED, "sms")
    assert route_of(api, notification_id) == [("email", "skipped", reason), ("sms", "delivered", "")]
    assert list(notification.attempts.values_list("channel", flat=True)) == ["sms"]
    assert [r.form["To"] for r in provider_server.requests] == [PHONE]


def test_a_fallback_notification_withheld_on_its_last_channel_is_suppressed_with_its_route(
    api: APIClient, client_and_token: tuple[ApiClient, str], provider_server: FakeProviderServer
) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", email="ann@example.com", phone=PHONE)
    notification_id = accept(api, ["email", "sms"])
    services.recipient_preferences_replace(client=client, user_id="u1", channels={"email": False, "sms": False}, categories={})

    assert services.notification_deliver(notification_id=notification_id).outcome == "suppressed"

    notification = Notification.objects.get(pk=notification_id)
    assert (notification.status, notification.suppressed_reason) == (Status.SUPPRESSED, "preference")
    assert route_of(api, notification_id) == [("email", "skipped", "preference"), ("sms", "skipped", "preference")]
    assert notification.attempts.count() == 0 and provider_server.requests == []


def test_a_route_reads_the_suppression_list_once_for_all_its_channels(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    client, _ = client_and_token
    recipient = make_recipient(client, "u1", email="ann@example.com", phone=PHONE, webhook_url="https://hooks.example.com/u1")
    Suppression.objects.create(client=client, channel="sms", address=PHONE, reason="unsubscribed_sms")
    contents = {channel: NotificationContent(subject="", message="hi") for channel in ("email", "sms", "webhook")}

    def suppression_queries(captured: CaptureQueriesContext) -> list[str]:
        return [q["sql"] for q in captured.captured_queries if '"notifications_suppression"' in q["sql"]]

    with CaptureQueriesContext(connection) as planning:
        plan = route_plan(client=client, recipient=recipient, category=None, contents=contents)
    assert [(e["channel"], e["outcome"], e["reason"]) for e in plan.route] == [
        ("email", "pending", ""),
        ("sms", "skipped", "unsubscribed_sms"),
        ("webhook", "pending", ""),
    ]
    assert suppression_queries(planning) == [ANY]  # read before the API call below resets Django's query log

    # Moving on checks every channel still pending in the same one read: sms (suppressed after
    # accept) and webhook.
    suppressed = Suppression.objects.get(client=client)
    suppressed.delete()
    notification_id = accept(api, ["email", "sms", "webhook"])
    suppressed.save()
    [claim] = Notification.claim_for_delivery([notification_id], now=(now := timezone.now()))
    with CaptureQueriesContext(connection) as advancing:
        step = route_advance(claim.notification, claimed_at=now, reason="permanent_error", error="refused")

    assert step.advanced and Notification.objects.get(pk=notification_id).channel == "webhook"
    assert [(e["channel"], e["outcome"]) for e in Notification.objects.get(pk=notification_id).route] == [
        ("email", "failed"),
        ("sms", "skipped"),
        ("webhook", "pending"),
    ]
    assert suppression_queries(advancing) == [ANY]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"channel": "email"}, "channels"),
        ({"to": "ann@example.com"}, "to"),
        ({"channels": ["sms", "sms"]}, "channels"),
        ({"channels": []}, "channels"),
        ({"channels": ["fax"]}, "channels"),
    ],
)
def test_a_bad_route_is_refused_with_400_naming_the_field(api: APIClient, fields: dict[str, Any], field: str) -> None:
    body = {"user_id": "u1", "message": "hi", "channels": ["email", "sms"], **fields}
    response = api.post(URL, body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error.get("field") == field or field in (error.get("details") or {}), error


def test_a_notification_on_one_channel_has_an_empty_route(api: APIClient) -> None:
    response = api.post(URL, {"user_id": "u1", "to": "ann@example.com", "message": "hi"}, format="json")
    assert api.get(f"{URL}/{response.json()['id']}").json()["route"] == []


def test_two_workers_ending_the_same_claim_advance_the_route_once(
    api: APIClient, client_and_token: tuple[ApiClient, str]
) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", email="ann@example.com", phone=PHONE, webhook_url="https://hooks.example.com/u1")
    notification_id = accept(api, ["email", "sms", "webhook"])
    now = timezone.now()
    [claim] = Notification.claim_for_delivery([notification_id], now=now)
    twin = Notification.objects.get(pk=notification_id)  # what a second worker holding the same claim has

    first = route_advance(claim.notification, claimed_at=now, reason="permanent_error", error="refused")
    second = route_advance(twin, claimed_at=now, reason="permanent_error", error="refused")

    assert (first.advanced, second.advanced, second.lost) == (True, False, True)
    notification = Notification.objects.get(pk=notification_id)
    assert (notification.status, notification.channel) == (Status.QUEUED, "sms")
    assert [e["outcome"] for e in notification.route] == ["failed", "pending", "pending"]


def test_route_with_outcome_changes_only_the_named_channel_and_keeps_the_route_as_given() -> None:
    route = [
        {"channel": "push", "outcome": "skipped", "reason": "no_address"},
        {"channel": "sms", "outcome": "pending", "reason": ""},
    ]
    changed = route_with_outcome(route, "sms", "delivered")
    assert changed == [route[0], {"channel": "sms", "outcome": "delivered", "reason": ""}]
    assert route[1]["outcome"] == "pending"  # a copy
    assert route_with_outcome([], "sms", "delivered") == []


# --- End to end: API -> RabbitMQ -> worker process -> providers --------------------------------


def test_a_fallback_route_is_followed_by_a_real_worker_process(
    transactional_db: None,
    broker: Any,
    api: APIClient,
    client_and_token: tuple[ApiClient, str],
    provider_server: FakeProviderServer,
    smtp_server: LocalSmtpServer,
) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", phone=PHONE, webhook_url=provider_server.url("/hooks/e2e"))
    provider_server.reply_next(twilio_error(503, 20503, "Service unavailable"), twilio_error(503, 20503, "Service unavailable"))
    env = platform_env(
        **{name: str(value) for name, value in provider_settings(provider_server).items()},
        WEBHOOK_ALLOW_HOSTS=provider_server.host_port,
        RETRY_MAX_ATTEMPTS="2",
        RETRY_BASE_SECONDS="0.05",
        RETRY_CAP_SECONDS="0.1",
        LOG_FORMAT="text",
    )
    with PlatformProcess("rundramatiq", "--processes", "1", "--threads", "2", env=env) as worker:
        notification_id = accept(api, ["push", "sms", "webhook"])
        try:
            wait_until(
                lambda: Notification.objects.filter(pk=notification_id, status=Status.DELIVERED).exists(),
                timeout=30,
                message="delivered on the webhook after SMS failed",
            )
        except AssertionError:
            raise AssertionError(f"not delivered; worker log:\n{worker.output()[-3000:]}") from None

    assert route_of(api, notification_id) == [
        ("push", "skipped", "no_address"),
        ("sms", "failed", "retries_exhausted"),
        ("webhook", "delivered", ""),
    ]
    assert [r.reply_status for r in provider_server.requests] == [503, 503, 200]
    assert provider_server.requests[-1].headers["idempotency-key"] == notification_id
    assert "falls back from sms to webhook" in worker.output()


# --- A channel without its provider settings: one attempt, and the route moves on at once -------

UNCONFIGURED_SMS = {"TWILIO_ACCOUNT_SID": "", "TWILIO_AUTH_TOKEN": "", "TWILIO_FROM_NUMBER": "", "LOG_FORMAT": "text"}


def smtp_worker_env(smtp_server: LocalSmtpServer) -> dict[str, str]:
    """A worker with the default retry policy (5 attempts), no Twilio settings, email to ``smtp_server``."""
    return platform_env(
        **UNCONFIGURED_SMS,
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(smtp_server.port),
        EMAIL_HOST_USER="",
        EMAIL_HOST_PASSWORD="",
    )


def worker_ready(worker: PlatformProcess) -> None:
    wait_until(lambda: "ready for action" in worker.output(), timeout=60, message="the worker is up")


def test_an_sms_without_twilio_settings_is_failed_after_one_attempt_at_once_by_a_real_worker(
    transactional_db: None, broker: Any, api: APIClient, client_and_token: tuple[ApiClient, str], smtp_server: LocalSmtpServer
) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", phone=PHONE)
    with PlatformProcess("rundramatiq", "--processes", "1", "--threads", "2", env=smtp_worker_env(smtp_server)) as worker:
        worker_ready(worker)
        response = api.post(URL, {"user_id": "u1", "channel": "sms", "message": "Parcel 42 shipped"}, format="json")
        assert response.status_code == 202, response.content
        notification_id = response.json()["id"]
        try:
            wait_until(
                lambda: Notification.objects.filter(pk=notification_id, status=Status.FAILED).exists(),
                timeout=5,
                message="failed within 5 s",
            )
        except AssertionError:
            raise AssertionError(f"not failed; worker log:\n{worker.output()[-3000:]}") from None

    notification = Notification.objects.get(pk=notification_id)
    [attempt] = notification.attempts.all()
    assert (attempt.outcome, attempt.error_class) == (
        AttemptOutcome.PERMANENT_ERROR,
        "notifications.errors.PermanentChannelError",
    )
    assert "TWILIO_ACCOUNT_SID" in attempt.error_message
    assert notification.attempt_count == 1
    [dead_letter] = DeadLetter.objects.filter(notification_id=notification_id)
    assert dead_letter.reason == DeadLetterReason.PERMANENT_FAILURE


def test_a_route_sms_then_email_without_twilio_settings_delivers_by_email_at_once_by_a_real_worker(
    transactional_db: None, broker: Any, api: APIClient, client_and_token: tuple[ApiClient, str], smtp_server: LocalSmtpServer
) -> None:
    client, _ = client_and_token
    make_recipient(client, "u1", phone=PHONE, email="u1@example.com")
    with PlatformProcess("rundramatiq", "--processes", "1", "--threads", "2", env=smtp_worker_env(smtp_server)) as worker:
        worker_ready(worker)
        notification_id = accept(api, ["sms", "email"], subject="Parcel 42")
        try:
            wait_until(
                lambda: Notification.objects.filter(pk=notification_id, status=Status.DELIVERED).exists(),
                timeout=5,
                message="delivered by email within 5 s",
            )
        except AssertionError:
            raise AssertionError(f"not delivered; worker log:\n{worker.output()[-3000:]}") from None

    assert [mail.rcpt_tos for mail in smtp_server.received] == [["u1@example.com"]]
    assert route_of(api, notification_id) == [("sms", "failed", "permanent_error"), ("email", "delivered", "")]
    notification = Notification.objects.get(pk=notification_id)
    attempts = list(notification.attempts.order_by("number").values_list("channel", "outcome"))
    assert attempts == [("sms", AttemptOutcome.PERMANENT_ERROR), ("email", AttemptOutcome.DELIVERED)]
    assert notification.attempt_count == len(attempts)  # every attempt of its route
    assert notification.route[0]["attempts"] == 1
