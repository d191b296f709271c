"""Delivery status from providers: Twilio's status callbacks and Mailgun's event webhooks, signed
as the providers sign them, and what they change (provider_status, the suppression list); and the
permanent send errors (Twilio 21610, FCM UNREGISTERED) that suppress an address."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
import uuid
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from rest_framework.test import APIClient

from notifications import services
from notifications.channels import OutgoingMessage
from notifications.channels.providers import get_provider
from notifications.channels.sms.feedback import twilio_signature
from notifications.models import (
    ApiClient,
    Notification,
    ProviderStatus,
    Recipient,
    Status,
    StatusEvent,
    Suppression,
    SuppressionReason,
)

from .factories import accept_notification, make_api_client, make_recipient
from .fakes import (  # noqa: F401  (fixtures)
    TWILIO_SID,
    TWILIO_TOKEN,
    FakeProviderServer,
    LocalSmtpServer,
    fcm_error,
    override_notifications,
    provider_server_fixture,
    provider_settings,
    smtp_server_fixture,
    twilio_error,
)
from .helpers import PlatformProcess, platform_env, wait_until

PUBLIC = "https://notify.example.com"
TWILIO_STATUS = "/api/v1/providers/twilio/status"
MAILGUN_EVENTS = "/api/v1/providers/mailgun/events"
MAILGUN_KEY = "key-mailgun-webhook-signing-test"
PHONE = "+14155550123"
DEVICE = "fcm-device-token-abc123"


# --- Signing as the providers do (written from their documentation, not from our code) ---------


def twilio_sign(url: str, params: dict[str, str], token: str = TWILIO_TOKEN) -> str:
    """https://www.twilio.com/docs/usage/webhooks/webhooks-security: the full URL, then each POST
    parameter's name and value sorted by name; HMAC-SHA1 with the auth token; base64."""
    data = url + "".join(name + params[name] for name in sorted(params))
    return base64.b64encode(hmac.new(token.encode(), data.encode(), hashlib.sha1).digest()).decode()


def post_twilio_status(callback_url: str, *, signature: str | None = None, **params: str) -> Any:
    """POST a status callback to the URL Twilio was given, as Twilio does (form-encoded, signed)."""
    form = {"AccountSid": TWILIO_SID, "ApiVersion": "2010-04-01", "To": PHONE, **params}
    parts = urlsplit(callback_url)
    path = f"{parts.path}?{parts.query}" if parts.query else parts.path
    return APIClient().post(
        path,
        urlencode(form),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=signature if signature is not None else twilio_sign(callback_url, form),
    )


def mailgun_body(event_data: dict[str, Any], *, key: str = MAILGUN_KEY, timestamp: float | None = None) -> dict[str, Any]:
    """Mailgun's JSON webhook body: the event and its signature, hex HMAC-SHA256(key, timestamp + token)."""
    stamp = str(int(time.time() if timestamp is None else timestamp))
    token = secrets.token_hex(25)  # Mailgun's tokens are 50 characters
    signature = hmac.new(key.encode(), (stamp + token).encode(), hashlib.sha256).hexdigest()
    return {"signature": {"timestamp": stamp, "token": token, "signature": signature}, "event-data": event_data}


def mailgun_event(notification: Notification, event: str, severity: str = "", **extra: Any) -> dict[str, Any]:
    data = {
        "event": event,
        "id": uuid.uuid4().hex,
        "timestamp": time.time(),
        "recipient": notification.address,
        "message": {"headers": {"message-id": notification.provider_message_id.strip("<>"), "to": notification.address}},
        **extra,
    }
    if severity:
        data["severity"] = severity
    return data


def post_mailgun(body: dict[str, Any]) -> Any:
    return APIClient().post(MAILGUN_EVENTS, body, format="json")


# --- Fixtures ------------------------------------------------------------------------------------


@pytest.fixture
def public_base_url(provider_server: FakeProviderServer) -> Any:
    with override_notifications(**provider_settings(provider_server), PUBLIC_BASE_URL=PUBLIC):
        yield PUBLIC


@pytest.fixture
def mailgun_key(db: None) -> Any:
    with override_notifications(MAILGUN_WEBHOOK_SIGNING_KEY=MAILGUN_KEY):
        yield MAILGUN_KEY


def sent_sms(client: ApiClient, server: FakeProviderServer) -> tuple[Notification, str]:
    """An SMS delivered through the fake Twilio, and the StatusCallback URL it was sent with."""
    notification = accept_notification(client, channel="sms", to=PHONE)
    assert services.notification_deliver(notification_id=notification.pk).outcome == "delivered"
    notification.refresh_from_db()
    callback_url = server.requests[-1].form["StatusCallback"]
    return notification, callback_url


def sent_email(client: ApiClient, to: str = "ann@example.com") -> Notification:
    notification = accept_notification(client, to=to)
    assert services.notification_deliver(notification_id=notification.pk).outcome == "delivered"
    notification.refresh_from_db()
    return notification


# --- Twilio ------------------------------------------------------------------------------------


def test_twilio_signature_matches_twilios_documented_example() -> None:
    params = {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+14158675309",
        "Digits": "1234",
        "From": "+14158675309",
        "To": "+18005551212",
    }
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    assert (
        twilio_signature(url=url, params={k: [v] for k, v in params.items()}, auth_token="12345")
        == "RSOYDt4T1cUTdK1PDd93/VVr8B8="
    )


def test_outgoing_sms_carry_a_status_callback_under_public_base_url_and_none_without_it(
    provider_server: FakeProviderServer,
) -> None:
    message = OutgoingMessage(notification_id=str(uuid.uuid4()), channel="sms", address=PHONE, subject="", body="hi")
    get_provider("sms").send(message)
    with override_notifications(**provider_settings(provider_server), PUBLIC_BASE_URL=PUBLIC + "/"):
        get_provider("sms").send(message)
    without, with_callback = provider_server.requests
    assert "StatusCallback" not in without.form
    assert with_callback.form["StatusCallback"] == f"{PUBLIC}{TWILIO_STATUS}?notification={message.notification_id}"


@pytest.mark.django_db
def test_a_correctly_signed_twilio_callback_records_delivered(public_base_url: str, provider_server: FakeProviderServer) -> None:
    client, token = make_api_client()
    notification, callback_url = sent_sms(client, provider_server)
    assert notification.provider_status == ""

    response = post_twilio_status(callback_url, MessageSid=notification.provider_message_id, MessageStatus="delivered")

    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "recorded"
    notification.refresh_from_db()
    assert (notification.provider_status, notification.status) == (ProviderStatus.DELIVERED, Status.DELIVERED)
    assert notification.provider_status_at is not None
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    shown = api.get(f"/api/v1/notifications/{notification.pk}").json()
    assert shown["provider_status"] == "delivered" and shown["provider_status_at"]


@pytest.mark.django_db
def test_a_twilio_callback_with_a_wrong_signature_is_refused_with_403(
    public_base_url: str, provider_server: FakeProviderServer
) -> None:
    client, _ = make_api_client()
    notification, callback_url = sent_sms(client, provider_server)
    form = {"MessageSid": notification.provider_message_id, "MessageStatus": "undelivered"}
    forged = twilio_sign(callback_url, {"AccountSid": TWILIO_SID, **form}, token="not-the-auth-token")

    for signature in (forged, ""):
        response = post_twilio_status(callback_url, signature=signature, **form)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "invalid_signature"
    # Signed for another URL (another notification's id in the query) does not verify either.
    other = callback_url.replace(str(notification.pk), str(uuid.uuid4()))
    response = post_twilio_status(
        callback_url,
        signature=twilio_sign(other, {"AccountSid": TWILIO_SID, "ApiVersion": "2010-04-01", "To": PHONE, **form}),
        **form,
    )
    assert response.status_code == 403
    notification.refresh_from_db()
    assert notification.provider_status == ""


@pytest.mark.django_db
def test_a_twilio_callback_signed_with_a_backup_accounts_token_is_recorded(public_base_url: str) -> None:
    """A message sent through a backup account (SMS_FAILOVER_ACCOUNTS) is signed with its token."""
    client, _ = make_api_client()
    notification = accept_notification(client, channel="sms", to=PHONE)
    callback_url = f"{PUBLIC}{TWILIO_STATUS}?notification={notification.pk}"
    form = {"AccountSid": "AC-backup", "ApiVersion": "2010-04-01", "To": PHONE, "MessageSid": "SM" + "2" * 32}
    form["MessageStatus"] = "delivered"
    backups = '[{"account_sid": "AC-backup", "auth_token": "backup-auth-token"}]'

    with override_notifications(SMS_FAILOVER_ACCOUNTS=backups):
        response = post_twilio_status(callback_url, signature=twilio_sign(callback_url, form, token="backup-auth-token"), **form)
        forged = post_twilio_status(callback_url, signature=twilio_sign(callback_url, form, token="nobody-s-token"), **form)

    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "recorded"
    assert Notification.objects.get(pk=notification.pk).provider_status == ProviderStatus.DELIVERED
    assert forged.status_code == 403


@pytest.mark.django_db
def test_twilio_callbacks_out_of_order_keep_the_later_status_and_a_repeat_changes_nothing(
    public_base_url: str, provider_server: FakeProviderServer
) -> None:
    client, _ = make_api_client()
    notification, callback_url = sent_sms(client, provider_server)
    sid = notification.provider_message_id

    assert post_twilio_status(callback_url, MessageSid=sid, MessageStatus="delivered").json()["outcome"] == "recorded"
    notification.refresh_from_db()
    delivered_at = notification.provider_status_at
    for late in ("sent", "queued", "delivered"):
        response = post_twilio_status(callback_url, MessageSid=sid, MessageStatus=late)
        assert (response.status_code, response.json()["outcome"]) == (200, "unchanged")
    notification.refresh_from_db()
    assert (notification.provider_status, notification.provider_status_at) == (ProviderStatus.DELIVERED, delivered_at)


@pytest.mark.django_db
def test_a_twilio_callback_that_outruns_the_sends_commit_finds_its_notification_by_the_callback_url(
    public_base_url: str,
) -> None:
    """Twilio may call back before the worker stored the message's sid: the URL names the notification."""
    client, _ = make_api_client()
    notification = accept_notification(client, channel="sms", to=PHONE)
    callback_url = f"{PUBLIC}{TWILIO_STATUS}?notification={notification.pk}"

    response = post_twilio_status(callback_url, MessageSid="SM" + "0" * 32, MessageStatus="sent")

    assert response.json() == {
        "outcome": "recorded",
        "notification_id": str(notification.pk),
        "provider_status": "sent",
        "suppressed": "",
    }
    # A sid that is not the one stored (a callback about an earlier send of a redriven notification) is not its.
    Notification.objects.filter(pk=notification.pk).update(provider_message_id="SM" + "1" * 32)
    stale = post_twilio_status(callback_url, MessageSid="SM" + "0" * 32, MessageStatus="undelivered")
    assert stale.json()["outcome"] == "unknown_message"
    assert Notification.objects.get(pk=notification.pk).provider_status == ProviderStatus.SENT


@pytest.mark.django_db
def test_twilio_21610_on_send_suppresses_the_number_and_the_next_sms_to_it_is_not_sent(
    provider_server: FakeProviderServer,
) -> None:
    client, _ = make_api_client()
    notification = accept_notification(client, channel="sms", to=PHONE)
    provider_server.reply_next(twilio_error(400, 21610, "Attempt to send to unsubscribed recipient"))

    assert services.notification_deliver(notification_id=notification.pk).outcome == "failed"

    suppression = Suppression.objects.get(client=client)
    assert (suppression.channel, suppression.address, suppression.reason) == ("sms", PHONE, SuppressionReason.UNSUBSCRIBED_SMS)
    assert suppression.notification_id == notification.pk
    again = accept_notification(client, channel="sms", to=PHONE)
    assert (again.status, again.suppressed_reason) == (Status.SUPPRESSED, "unsubscribed_sms")
    assert services.notification_deliver(notification_id=again.pk).outcome == "skipped"
    assert len(provider_server.requests) == 1
    # Another refusal (an invalid number) says nothing about the recipient's wishes.
    other = accept_notification(client, channel="sms", to="+14155550124")
    provider_server.reply_next(twilio_error(400, 21211, "The 'To' number is not a valid phone number."))
    assert services.notification_deliver(notification_id=other.pk).outcome == "failed"
    assert Suppression.objects.count() == 1


@pytest.mark.django_db
def test_fcm_unregistered_suppresses_the_token_and_drops_it_from_the_recipient(provider_server: FakeProviderServer) -> None:
    client, _ = make_api_client()
    make_recipient(client, "u1", push_tokens=["older-device-token", DEVICE])
    notification = accept_notification(client, channel="push", to="")
    assert notification.address == DEVICE
    provider_server.reply_next(fcm_error(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED"))

    assert services.notification_deliver(notification_id=notification.pk).outcome == "failed"

    suppression = Suppression.objects.get(client=client)
    assert (suppression.channel, suppression.address, suppression.reason) == ("push", DEVICE, SuppressionReason.UNREGISTERED)
    assert Recipient.objects.get(client=client, user_id="u1").push_tokens == ["older-device-token"]
    # The next push goes to the token left, and the dead one given explicitly is suppressed.
    assert accept_notification(client, channel="push", to="").address == "older-device-token"
    explicit = accept_notification(client, channel="push", to=DEVICE)
    assert (explicit.status, explicit.suppressed_reason) == (Status.SUPPRESSED, "unregistered")


# --- Mailgun -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "severity", "status", "reason"),
    [("failed", "permanent", "bounced", "bounced"), ("complained", "", "complained", "complained")],
)
def test_a_mailgun_hard_bounce_or_complaint_suppresses_the_address_and_the_next_email_is_not_sent(
    event: str, severity: str, status: str, reason: str, mailgun_key: str, smtp_server: LocalSmtpServer
) -> None:
    client, _ = make_api_client()
    ApiClient.objects.filter(pk=client.pk).update(status_webhook_url="https://hooks.example.com/status")
    notification = sent_email(client)
    assert notification.provider_message_id.startswith(f"<{notification.pk}@")

    response = post_mailgun(mailgun_body(mailgun_event(notification, event, severity, reason="bounce")))

    assert response.status_code == 200, response.content
    assert response.json() == {
        "outcome": "recorded",
        "notification_id": str(notification.pk),
        "provider_status": status,
        "suppressed": reason,
    }
    notification.refresh_from_db()
    assert notification.provider_status == status
    assert Suppression.objects.get(client=client, channel="email", address="ann@example.com").reason == reason
    # The client's status webhook hears of it (services/records/status_events.py).
    assert StatusEvent.objects.filter(notification=notification, type=f"notification.{status}").count() == 1
    again = accept_notification(client, to="ann@example.com")
    assert (again.status, again.suppressed_reason) == (Status.SUPPRESSED, reason)
    assert services.notification_deliver(notification_id=again.pk).outcome == "skipped"
    assert len(smtp_server.received) == 1
    # Another client's list is its own.
    other, _ = make_api_client()
    assert accept_notification(other, to="ann@example.com").status == Status.QUEUED


def ignored_count(provider: str, reason: str) -> float:
    from prometheus_client import REGISTRY

    return (
        REGISTRY.get_sample_value("notifications_provider_feedback_ignored_total", {"provider": provider, "reason": reason})
        or 0.0
    )


@pytest.mark.parametrize(("event", "severity"), [("failed", "permanent"), ("complained", ""), ("delivered", "")])
def test_a_signed_mailgun_event_whose_recipient_is_another_address_is_acknowledged_and_ignored(
    event: str, severity: str, mailgun_key: str, smtp_server: LocalSmtpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Mailgun signs only timestamp and token: an event naming our Message-Id but another recipient
    must not bounce, complain or suppress anything."""
    client, _ = make_api_client()
    notification = sent_email(client)
    before = ignored_count("mailgun", "recipient_mismatch")
    for recipient in ("mallory@example.com", "", None):
        data = mailgun_event(notification, event, severity, reason="bounce", recipient=recipient)
        if recipient is None:
            del data["recipient"]
        with caplog.at_level("WARNING", logger="notifications.services"):
            response = post_mailgun(mailgun_body(data))

        assert response.status_code == 200, response.content
        assert response.json() == {"outcome": "ignored", "notification_id": "", "provider_status": "", "suppressed": ""}
    notification.refresh_from_db()
    assert notification.provider_status == ""
    assert not Suppression.objects.exists() and not StatusEvent.objects.exists()
    assert ignored_count("mailgun", "recipient_mismatch") == before + 3
    warnings = [r for r in caplog.records if getattr(r, "reason", "") == "recipient_mismatch"]
    assert len(warnings) == 3 and all(r.levelname == "WARNING" for r in warnings)
    assert warnings[0].notification_id == str(notification.pk)  # type: ignore[attr-defined]
    # The next email to the address goes out.
    assert accept_notification(client, to="ann@example.com").status == Status.QUEUED


def test_a_mailgun_event_for_the_notifications_address_in_another_case_is_applied(
    mailgun_key: str, smtp_server: LocalSmtpServer
) -> None:
    client, _ = make_api_client()
    notification = sent_email(client, to="Ann.Lee@Example.com")
    before = ignored_count("mailgun", "recipient_mismatch")

    data = mailgun_event(notification, "failed", "permanent", reason="bounce", recipient="ann.lee@example.com")
    response = post_mailgun(mailgun_body(data))

    assert response.status_code == 200, response.content
    assert response.json()["outcome"] == "recorded" and response.json()["suppressed"] == "bounced"
    notification.refresh_from_db()
    assert notification.provider_status == ProviderStatus.BOUNCED
    assert Suppression.objects.get(client=client, channel="email").address == "Ann.Lee@Example.com"
    assert ignored_count("mailgun", "recipient_mismatch") == before


def test_a_mailgun_event_about_another_send_of_the_notification_is_ignored_and_counted(
    mailgun_key: str, smtp_server: LocalSmtpServer
) -> None:
    """Found by the id in its Message-Id, but the stored Message-Id is another: not this send's."""
    client, _ = make_api_client()
    notification = sent_email(client)
    data = mailgun_event(notification, "failed", "permanent", reason="bounce")
    data["message"]["headers"]["message-id"] = f"{notification.pk}@elsewhere.example.net"
    before = ignored_count("mailgun", "message_id_mismatch")

    response = post_mailgun(mailgun_body(data))

    assert (response.status_code, response.json()["outcome"]) == (200, "unknown_message")
    assert ignored_count("mailgun", "message_id_mismatch") == before + 1
    notification.refresh_from_db()
    assert notification.provider_status == "" and not Suppression.objects.exists()


def test_a_mailgun_delivery_then_a_complaint_end_complained_and_a_late_delivery_changes_nothing(
    mailgun_key: str, smtp_server: LocalSmtpServer
) -> None:
    client, _ = make_api_client()
    notification = sent_email(client)
    assert post_mailgun(mailgun_body(mailgun_event(notification, "delivered"))).json()["outcome"] == "recorded"
    assert post_mailgun(mailgun_body(mailgun_event(notification, "complained"))).json()["outcome"] == "recorded"
    assert post_mailgun(mailgun_body(mailgun_event(notification, "delivered"))).json()["outcome"] == "unchanged"
    notification.refresh_from_db()
    assert notification.provider_status == ProviderStatus.COMPLAINED


def test_a_mailgun_soft_bounce_keeps_the_status_and_suppresses_nothing(mailgun_key: str, smtp_server: LocalSmtpServer) -> None:
    client, _ = make_api_client()
    notification = sent_email(client)
    body = mailgun_body(mailgun_event(notification, "failed", "temporary", reason="generic"))
    assert post_mailgun(body).json()["outcome"] == "ignored"
    notification.refresh_from_db()
    assert notification.provider_status == "" and not Suppression.objects.exists()


def test_a_mailgun_event_with_a_bad_signature_is_refused_with_403(mailgun_key: str, smtp_server: LocalSmtpServer) -> None:
    client, _ = make_api_client()
    notification = sent_email(client)
    forged = mailgun_body(mailgun_event(notification, "failed", "permanent"), key="key-someone-else")
    unsigned = {"event-data": forged["event-data"]}
    for body in (forged, unsigned):
        response = post_mailgun(body)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "invalid_signature"
    notification.refresh_from_db()
    assert notification.provider_status == "" and not Suppression.objects.exists()


def test_a_stale_or_replayed_mailgun_event_is_refused_with_403(mailgun_key: str, smtp_server: LocalSmtpServer) -> None:
    client, _ = make_api_client()
    notification = sent_email(client)
    stale = mailgun_body(mailgun_event(notification, "delivered"), timestamp=time.time() - 16 * 60)
    response = post_mailgun(stale)
    assert response.status_code == 403 and "ago" in response.json()["error"]["message"]

    fresh = mailgun_body(mailgun_event(notification, "delivered"))
    assert post_mailgun(fresh).status_code == 200
    replayed = post_mailgun(fresh)
    assert replayed.status_code == 403 and "used before" in replayed.json()["error"]["message"]


def test_a_mailgun_event_whose_recording_failed_is_taken_when_mailgun_retries_it(
    mailgun_key: str, smtp_server: LocalSmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token is stored before the event is recorded; a recording that fails (PostgreSQL gone,
    a 503) must not leave Mailgun's retry, which carries the same token, refused as a replay."""
    from django.db import OperationalError

    from notifications.services.feedback import provider_feedback

    client, _ = make_api_client()
    notification = sent_email(client)
    body = mailgun_body(mailgun_event(notification, "failed", "permanent", reason="bounce"))
    recorded = provider_feedback.notification_provider_status_record

    def database_gone(**kwargs: Any) -> bool:
        raise OperationalError("connection to server at 127.0.0.1, port 5432 failed: Connection refused")

    monkeypatch.setattr(provider_feedback, "notification_provider_status_record", database_gone)
    assert post_mailgun(body).status_code == 503
    monkeypatch.setattr(provider_feedback, "notification_provider_status_record", recorded)

    retried = post_mailgun(body)

    assert retried.status_code == 200, retried.content
    assert retried.json()["outcome"] == "recorded"
    assert Suppression.objects.get(client=client, channel="email").reason == "bounced"
    assert post_mailgun(body).status_code == 403  # once recorded, the token is spent


def test_a_mailgun_event_refused_for_a_missing_message_id_does_not_spend_its_token(mailgun_key: str) -> None:
    body = mailgun_body({"event": "delivered", "message": {}})
    assert post_mailgun(body).status_code == 400

    body["event-data"]["message"] = {"headers": {"message-id": "20260203192638.000be97f99f8cea1@sample.mailgun.com"}}
    again = post_mailgun(body)

    assert (again.status_code, again.json().get("outcome")) == (200, "unknown_message")


def test_mailgun_events_are_refused_while_no_signing_key_is_set(db: None) -> None:
    response = post_mailgun(mailgun_body({"event": "delivered"}))
    assert response.status_code == 403
    assert "MAILGUN_WEBHOOK_SIGNING_KEY" in response.json()["error"]["message"]


def test_a_signed_mailgun_event_for_a_message_we_never_sent_is_acknowledged(mailgun_key: str) -> None:
    event = {"event": "delivered", "message": {"headers": {"message-id": "20260203192638.000be97f99f8cea1@sample.mailgun.com"}}}
    response = post_mailgun(mailgun_body(event))
    assert (response.status_code, response.json()["outcome"]) == (200, "unknown_message")
    missing = post_mailgun(mailgun_body({"event": "delivered", "message": {}}))
    assert missing.status_code == 400 and missing.json()["error"]["field"] == "event-data.message.headers.message-id"


# --- End to end: a worker process sends, Twilio calls back ------------------------------------


def test_an_sms_sent_by_a_worker_process_asks_for_callbacks_and_its_delivery_callback_is_recorded(
    transactional_db: None, broker: Any, provider_server: FakeProviderServer
) -> None:
    client, _ = make_api_client()
    env = platform_env(
        **{name: str(value) for name, value in provider_settings(provider_server).items()},
        PUBLIC_BASE_URL=PUBLIC,
        LOG_FORMAT="text",
    )
    with (
        override_notifications(**provider_settings(provider_server), PUBLIC_BASE_URL=PUBLIC),
        PlatformProcess("rundramatiq", "--processes", "1", "--threads", "1", env=env) as worker,
    ):
        result = services.notification_accept(
            client=client,
            request=services.NotificationRequest(user_id="u1", channel="sms", to=PHONE, message="Parcel 42"),
            idempotency_key=None,
            fingerprint="f",
        )
        try:
            notification = wait_until(
                lambda: Notification.objects.filter(pk=result.notification_id, status=Status.DELIVERED).first(), timeout=30
            )
        except AssertionError:
            raise AssertionError(f"not delivered; worker log:\n{worker.output()[-3000:]}") from None
        [request] = provider_server.requests
        callback_url = request.form["StatusCallback"]
        assert callback_url == f"{PUBLIC}{TWILIO_STATUS}?notification={notification.pk}"

        response = post_twilio_status(callback_url, MessageSid=notification.provider_message_id, MessageStatus="delivered")

    assert response.status_code == 200, response.content
    assert Notification.objects.get(pk=notification.pk).provider_status == ProviderStatus.DELIVERED
