"""Channel providers against local servers that speak their APIs: request shapes, what each
answer means (delivered, throttled, transient, permanent, timeout), the webhook SSRF guard, and
delivery end to end through the real pipeline on every channel."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from importlib import import_module
from typing import Any

import pytest
from rest_framework.test import APIClient
from standardwebhooks import Webhook

from notifications import services
from notifications.channels import OutgoingMessage, SendResult
from notifications.channels.http import retry_after_seconds
from notifications.channels.providers import get_provider
from notifications.channels.webhook.provider import embedded_ipv4, webhook_target
from notifications.errors import PermanentChannelError, TransientChannelError, ValidationFailed
from notifications.models import ApiClient, AttemptOutcome, DeadLetter, DeadLetterReason, DeliveryAttempt, Notification, Status

from .factories import accept_notification, make_api_client
from .fakes import (  # noqa: F401  (fixtures)
    FCM_PROJECT,
    FCM_TOKEN,
    TWILIO_FROM,
    TWILIO_SID,
    TWILIO_TOKEN,
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

SECRET = "s3cret-webhook-key"
PHONE = "+14155550123"
DEVICE = "fcm-device-token-abc123"
HTTP_CHANNELS = ["sms", "push", "webhook"]


def outgoing(channel: str, server: FakeProviderServer, **fields: Any) -> OutgoingMessage:
    notification_id = str(uuid.uuid4())
    address = {"sms": PHONE, "push": DEVICE, "webhook": server.url("/hooks/acme?src=test"), "email": "ann@example.com"}[channel]
    values: dict[str, Any] = {
        "notification_id": notification_id,
        "channel": channel,
        "address": address,
        "subject": "Your order shipped",
        "body": "Parcel 42 is on its way",
        "metadata": {"order": "42", "items": 3},
        "idempotency_key": notification_id,
        "client_name": "acme",
        "webhook_secret": SECRET,
        **fields,
    }
    return OutgoingMessage(**values)


def send(channel: str, server: FakeProviderServer, **fields: Any) -> tuple[OutgoingMessage, SendResult]:
    message = outgoing(channel, server, **fields)
    with override_notifications(WEBHOOK_ALLOW_HOSTS=[server.host_port]):
        return message, get_provider(channel).send(message)


def send_expecting(error: type[Exception], channel: str, server: FakeProviderServer, **fields: Any) -> Any:
    with pytest.raises(error) as caught:
        send(channel, server, **fields)
    return caught.value


def error_reply(channel: str, status: int) -> Reply:
    """A 4xx/5xx in the provider's own error shape."""
    if channel == "sms":
        return twilio_error(status, 21211, "The 'To' number +14155550123 is not a valid phone number.")
    if channel == "push":
        return fcm_error(status, "NOT_FOUND" if status == 404 else "INTERNAL", "Requested entity was not found.", "UNREGISTERED")
    return Reply(status, {"detail": "no such hook"})


# --- Request shapes ----------------------------------------------------------------------------


def test_sms_is_a_form_post_with_basic_auth_and_the_notification_id_as_idempotency_token(
    provider_server: FakeProviderServer,
) -> None:
    message, result = send("sms", provider_server)
    [request] = provider_server.requests
    assert request.method == "POST" and request.path == f"/2010-04-01/Accounts/{TWILIO_SID}/Messages.json"
    assert request.basic_auth == (TWILIO_SID, TWILIO_TOKEN)
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert request.form == {"To": PHONE, "From": TWILIO_FROM, "Body": "Parcel 42 is on its way"}
    assert request.headers["i-twilio-idempotency-token"] == message.notification_id
    assert request.reply_status == 201
    assert result.provider_message_id == request.reply_body["sid"] and result.provider_message_id.startswith("SM")


def test_push_is_fcm_v1_json_with_a_bearer_token_and_string_data(provider_server: FakeProviderServer) -> None:
    message, result = send("push", provider_server)
    [request] = provider_server.requests
    assert request.path == f"/v1/projects/{FCM_PROJECT}/messages:send"
    assert request.headers["authorization"] == f"Bearer {FCM_TOKEN}"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {
        "message": {
            "token": DEVICE,
            "notification": {"title": "Your order shipped", "body": "Parcel 42 is on its way"},
            "data": {"order": "42", "items": "3", "notification_id": message.notification_id},
        }
    }
    assert result.provider_message_id == request.reply_body["name"]
    assert result.provider_message_id.startswith(f"projects/{FCM_PROJECT}/messages/")


def test_webhook_is_json_signed_over_timestamp_and_body_with_the_idempotency_key(
    provider_server: FakeProviderServer,
) -> None:
    before = int(time.time())
    message, result = send("webhook", provider_server)
    [request] = provider_server.requests
    assert request.path == "/hooks/acme?src=test"
    assert request.headers["content-type"] == "application/json"
    assert request.headers["host"] == provider_server.host_port
    assert request.headers["idempotency-key"] == message.notification_id
    timestamp = request.headers["x-timestamp"]
    assert before <= int(timestamp) <= int(time.time())
    expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + request.body, hashlib.sha256).hexdigest()
    assert request.headers["x-signature"] == f"sha256={expected}"
    # The Standard Webhooks signature too; a secret older than the whsec_ form is its own key.
    assert request.headers["webhook-id"] == message.notification_id and request.headers["webhook-timestamp"] == timestamp
    assert Webhook(SECRET.encode()).verify(request.body, request.headers)["id"] == message.notification_id
    assert request.json == {
        "id": message.notification_id,
        "channel": "webhook",
        "subject": "Your order shipped",
        "message": "Parcel 42 is on its way",
        "metadata": {"order": "42", "items": 3},
        "timestamp": int(timestamp),
    }
    assert result.provider_message_id.startswith("wh-")


def test_a_webhook_signed_with_another_secret_does_not_verify(provider_server: FakeProviderServer) -> None:
    send("webhook", provider_server, webhook_secret="the-real-one")
    [request] = provider_server.requests
    forged = hmac.new(b"a-guess", request.headers["x-timestamp"].encode() + b"." + request.body, hashlib.sha256).hexdigest()
    assert request.headers["x-signature"] != f"sha256={forged}"


# --- What each answer means --------------------------------------------------------------------


@pytest.mark.parametrize("channel", HTTP_CHANNELS)
def test_429_is_throttled_with_the_retry_after_seconds(channel: str, provider_server: FakeProviderServer) -> None:
    provider_server.reply_next(Reply(429, {"message": "Too Many Requests"}, {"Retry-After": "7"}))
    error = send_expecting(TransientChannelError, channel, provider_server)
    assert error.code == "throttled" and error.retry_after == 7.0
    assert error.extra["http_status"] == 429


@pytest.mark.parametrize("status", [408, 500, 503])
@pytest.mark.parametrize("channel", HTTP_CHANNELS)
def test_5xx_and_408_timeout_are_transient(channel: str, status: int, provider_server: FakeProviderServer) -> None:
    provider_server.reply_next(error_reply(channel, status))
    error = send_expecting(TransientChannelError, channel, provider_server)
    assert error.code == "provider_unavailable" and error.extra["http_status"] == status


@pytest.mark.parametrize(
    ("channel", "reply", "said"),
    [
        ("sms", twilio_error(400, 21211, "The 'To' number +1415 is not a valid phone number."), "not a valid phone number"),
        ("sms", twilio_error(401, 20003, "Authenticate"), "Authenticate (Twilio error 20003)"),
        ("push", fcm_error(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED"), "NOT_FOUND/UNREGISTERED"),
        ("push", fcm_error(400, "INVALID_ARGUMENT", "The registration token is not valid", "INVALID_ARGUMENT"), "not valid"),
        ("webhook", Reply(410, {"detail": "hook removed"}), "hook removed"),
        ("webhook", Reply(302, None, {"Location": "http://169.254.169.254/"}), "not followed"),
    ],
)
def test_4xx_is_permanent_with_the_providers_own_message(
    channel: str, reply: Reply, said: str, provider_server: FakeProviderServer
) -> None:
    provider_server.reply_next(reply)
    error = send_expecting(PermanentChannelError, channel, provider_server)
    assert said in str(error) and error.extra["http_status"] == reply.status
    assert len(provider_server.requests) == 1  # no redirect followed, nothing retried inside


@pytest.mark.parametrize("channel", HTTP_CHANNELS)
def test_a_hung_provider_is_a_transient_timeout(channel: str, provider_server: FakeProviderServer) -> None:
    provider_server.reply_next(Reply(hang=True))
    started = time.monotonic()
    with override_notifications(PROVIDER_TIMEOUT_SECONDS=0.3, WEBHOOK_TIMEOUT_SECONDS=0.3):
        error = send_expecting(TransientChannelError, channel, provider_server)
    assert error.code == "timeout" and "0.3s" in str(error)
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("channel", HTTP_CHANNELS)
def test_an_unreachable_provider_is_a_transient_connection_error(channel: str, provider_server: FakeProviderServer) -> None:
    closed = FakeProviderServer()
    closed.stop()
    with override_notifications(TWILIO_API_BASE=closed.base_url, FCM_API_BASE=closed.base_url):
        error = send_expecting(TransientChannelError, channel, closed if channel == "webhook" else provider_server)
    assert error.code == "connection_error"
    assert provider_server.requests == []


@pytest.mark.parametrize(
    ("channel", "setting"),
    [("sms", "TWILIO_ACCOUNT_SID"), ("sms", "TWILIO_AUTH_TOKEN"), ("sms", "TWILIO_FROM_NUMBER"), ("push", "FCM_ACCESS_TOKEN")],
)
def test_missing_credentials_fail_permanently_naming_the_setting(
    channel: str, setting: str, provider_server: FakeProviderServer
) -> None:
    with override_notifications(**{setting: ""}):
        error = send_expecting(PermanentChannelError, channel, provider_server)
    assert setting in str(error) and error.code == "not_configured"
    assert provider_server.requests == []


def test_retry_after_may_be_an_http_date() -> None:
    from email.utils import formatdate

    assert 25 <= (retry_after_seconds(formatdate(time.time() + 30, usegmt=True)) or 0) <= 30
    assert retry_after_seconds("garbage") is None and retry_after_seconds(None) is None
    assert retry_after_seconds("-5") == 0.0


# --- The webhook SSRF guard --------------------------------------------------------------------


def test_webhook_to_loopback_is_refused_unless_the_host_is_allowed(provider_server: FakeProviderServer) -> None:
    message = outgoing("webhook", provider_server)
    with pytest.raises(PermanentChannelError, match="WEBHOOK_ALLOW_HOSTS") as caught:
        get_provider("webhook").send(message)
    assert caught.value.code == "forbidden_target" and "not a public address" in caught.value.message
    assert "127.0.0.1" not in caught.value.message and "address" not in caught.value.extra
    assert provider_server.requests == []

    # Another port of the same host is not this one.
    with override_notifications(WEBHOOK_ALLOW_HOSTS=["127.0.0.1:1"]), pytest.raises(PermanentChannelError):
        get_provider("webhook").send(message)
    for allowed in (provider_server.host_port, "127.0.0.1"):
        with override_notifications(WEBHOOK_ALLOW_HOSTS=[allowed]):
            get_provider("webhook").send(message)
    assert len(provider_server.requests) == 2


def test_webhook_to_localhost_by_name_is_refused(provider_server: FakeProviderServer) -> None:
    port = provider_server.host_port.rsplit(":", 1)[1]
    message = outgoing("webhook", provider_server, address=f"http://localhost:{port}/hook")
    with pytest.raises(PermanentChannelError, match="not a public address"):
        get_provider("webhook").send(message)
    assert provider_server.requests == []


@pytest.mark.parametrize(
    "host",
    [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.10",
        "169.254.169.254",  # cloud metadata: link-local
        "100.64.0.1",  # carrier-grade NAT
        "0.0.0.0",
        "224.0.0.251",  # multicast
        "240.0.0.1",  # reserved
        "[::1]",
        "[fe80::1]",
        "[fc00::1]",
        "[::ffff:127.0.0.1]",  # IPv4-mapped loopback
        "[ff02::1]",
    ],
)
def test_webhook_refuses_internal_addresses(host: str, provider_server: FakeProviderServer) -> None:
    message = outgoing("webhook", provider_server, address=f"http://{host}:8080/hook")
    with pytest.raises(PermanentChannelError) as caught:
        get_provider("webhook").send(message)
    assert caught.value.code == "forbidden_target"


# Vetted with webhook_target alone, which resolves (literals need no DNS) but never connects: a
# guard that let one through must not send a packet toward it.
@pytest.mark.parametrize(
    ("ipv6", "carried"),
    [
        ("2002:7f00:1::1", "127.0.0.1"),  # 6to4
        ("2002:a00:1::1", "10.0.0.1"),
        ("2002:a9fe:a9fe::1", "169.254.169.254"),
        ("2002:c0a8:10a:1::1", "192.168.1.10"),
        ("64:ff9b::7f00:1", "127.0.0.1"),  # NAT64 well-known prefix
        ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
        ("64:ff9b::a00:1", "10.0.0.1"),
        ("64:ff9b:1::5db8:d822", "any"),  # NAT64 local-use prefix: a local translator, refused whole
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"),  # Teredo client (obfuscated), public server
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "10.0.0.1"),
        ("2001:0:a00:1::a247:27dd", "10.0.0.1"),  # Teredo server, public client
        ("::ffff:10.0.0.1", "10.0.0.1"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "169.254.169.254"),
        ("::127.0.0.1", "127.0.0.1"),  # IPv4-compatible (deprecated)
        ("::10.0.0.1", "10.0.0.1"),
        ("::ffff:0:a00:1", "10.0.0.1"),  # IPv4-translated (RFC 2765)
    ],
)
def test_webhook_refuses_internal_ipv4_addresses_carried_in_ipv6(ipv6: str, carried: str) -> None:
    with pytest.raises(PermanentChannelError, match="WEBHOOK_ALLOW_HOSTS") as caught:
        webhook_target(f"http://[{ipv6}]:8080/hook", allow_hosts=())
    assert caught.value.code == "forbidden_target" and "not a public address" in caught.value.message
    if carried != "any":
        assert ipaddress.IPv4Address(carried) in embedded_ipv4(ipaddress.IPv6Address(ipv6))


@pytest.mark.parametrize(
    "ipv6",
    [
        "2002:5db8:d822::1",  # 6to4 of 93.184.216.34
        "64:ff9b::5db8:d822",  # NAT64 of 93.184.216.34, as DNS64 answers in an IPv6-only cluster
        "::ffff:93.184.216.34",
        "2606:4700:4700::1111",
    ],
)
def test_webhook_accepts_ipv6_addresses_carrying_a_public_ipv4_address(ipv6: str) -> None:
    target = webhook_target(f"https://[{ipv6}]/hook", allow_hosts=())
    assert ipaddress.ip_address(target.address) == ipaddress.ip_address(ipv6)
    assert target.host_header == f"[{ipv6}]"


def test_webhook_checks_every_address_a_name_resolves_to(
    provider_server: FakeProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DNS is the network boundary here: a name with one public and one private address.
    def two_addresses(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
    message = outgoing("webhook", provider_server, address="https://hooks.example.com/x")
    with pytest.raises(PermanentChannelError, match="not a public address") as caught:
        get_provider("webhook").send(message)
    assert "10.0.0.7" not in str(caught.value)


def internal_dns(monkeypatch: pytest.MonkeyPatch, names: dict[str, str | OSError]) -> None:
    """DNS is the network boundary: ``names`` resolve to the address given, or fail with the error."""
    real = socket.getaddrinfo

    def lookup(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in names:
            return real(host, port, *args, **kwargs)
        answer = names[host]
        if isinstance(answer, OSError):
            raise answer
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]

    monkeypatch.setattr(socket, "getaddrinfo", lookup)


RESOLVER_TEXT = "Name or service not known"


@pytest.mark.django_db
def test_a_webhook_notification_to_an_internal_host_fails_with_a_last_error_that_names_no_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    internal_dns(monkeypatch, {"db.internal": "10.20.30.40", "nowhere.internal": socket.gaierror(-2, RESOLVER_TEXT)})
    client, _ = make_api_client()
    internal = accept_notification(client, channel="webhook", to="http://db.internal:5432/hook")
    unresolved = accept_notification(client, channel="webhook", to="http://nowhere.internal/hook")

    assert services.notification_deliver(notification_id=internal.pk).outcome == "failed"
    services.notification_deliver(notification_id=unresolved.pk)

    internal.refresh_from_db()
    assert "not a public address" in internal.last_error
    assert "10.20.30.40" not in internal.last_error
    assert "10.20.30.40" not in DeliveryAttempt.objects.get(notification=internal).error_message
    [attempt] = DeliveryAttempt.objects.filter(notification=unresolved)
    assert attempt.outcome == AttemptOutcome.TRANSIENT_ERROR  # a name that does not resolve may yet
    assert "could not be resolved" in attempt.error_message and RESOLVER_TEXT not in attempt.error_message


def test_a_slow_name_lookup_is_cut_at_address_lookup_timeout_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    released = threading.Event()
    started = threading.Event()

    real = socket.getaddrinfo

    def slow_resolver(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "slow.example.com":
            return real(host, port, *args, **kwargs)
        started.set()
        released.wait(30)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]

    monkeypatch.setattr(socket, "getaddrinfo", slow_resolver)
    try:
        with override_notifications(ADDRESS_LOOKUP_TIMEOUT_SECONDS=0.3), pytest.raises(TransientChannelError) as caught:
            began = time.monotonic()
            webhook_target("https://slow.example.com/hook", allow_hosts=())
        elapsed = time.monotonic() - began
        assert started.is_set()
        assert 0.3 <= elapsed < 1.3, elapsed
        assert caught.value.code == "dns_error" and "could not be resolved" in caught.value.message
        # The lookup left hanging holds no other: the next host resolves at once.
        assert webhook_target("https://93.184.216.34/hook", allow_hosts=()).address == "93.184.216.34"
    finally:
        released.set()


def test_webhook_without_a_secret_is_refused(provider_server: FakeProviderServer) -> None:
    with pytest.raises(PermanentChannelError, match="secret"):
        send("webhook", provider_server, webhook_secret="")
    assert provider_server.requests == []


# --- Email through a real SMTP server ----------------------------------------------------------


def test_email_is_sent_over_smtp_with_subject_body_recipient_and_notification_id(
    smtp_server: LocalSmtpServer, provider_server: FakeProviderServer
) -> None:
    message, result = send("email", provider_server)
    [mail] = smtp_server.received
    assert mail.rcpt_tos == ["ann@example.com"]
    assert mail.message["To"] == "ann@example.com"
    assert mail.message["Subject"] == "Your order shipped"
    assert mail.message["X-Notification-Id"] == message.notification_id
    assert mail.message.get_content().strip() == "Parcel 42 is on its way"
    assert result.provider_message_id == mail.message["Message-ID"]


def test_email_to_a_refused_recipient_is_permanent(smtp_server: LocalSmtpServer, provider_server: FakeProviderServer) -> None:
    smtp_server.refuse("nobody@example.com")
    with pytest.raises(PermanentChannelError, match="refused"):
        send("email", provider_server, address="nobody@example.com")
    assert smtp_server.received == []


def test_email_to_a_recipient_refused_for_now_with_4xx_is_transient(
    smtp_server: LocalSmtpServer, provider_server: FakeProviderServer
) -> None:
    async def greylist(server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]) -> str:
        return "450 4.2.0 greylisted, try again later"

    smtp_server.handler.handle_RCPT = greylist  # type: ignore[method-assign]
    with pytest.raises(TransientChannelError, match="450"):
        send("email", provider_server, address="later@example.com")
    assert smtp_server.received == []


@pytest.mark.django_db
def test_a_permanent_failure_is_logged_by_its_code_not_the_receivers_echo_of_the_message(
    provider_server: FakeProviderServer, caplog: pytest.LogCaptureFixture
) -> None:
    client, _ = make_api_client()
    notification = accept_notification(client, channel="webhook", to=provider_server.url("/hook"), message="secret plans")
    provider_server.reply_next(Reply(400, {"error": "bad payload", "echo": {"message": "secret plans"}}))
    with override_notifications(WEBHOOK_ALLOW_HOSTS=[provider_server.host_port]), caplog.at_level("INFO"):
        assert services.notification_deliver(notification_id=notification.pk).outcome == "failed"

    assert f"notification {notification.pk} failed permanently (rejected, HTTP 400)" in caplog.text
    assert "secret plans" not in caplog.text
    assert "secret plans" in DeliveryAttempt.objects.get(notification=notification).error_message


# --- End to end: API -> RabbitMQ -> worker -> provider -----------------------------------------


def accept(api: APIClient, channel: str, to: str) -> str:
    response = api.post(
        "/api/v1/notifications",
        {"user_id": "u1", "channel": channel, "to": to, "subject": "Shipped", "message": "Parcel 42", "metadata": {"k": "v"}},
        format="json",
    )
    assert response.status_code == 202, response.content
    return str(response.json()["id"])


def delivered(notification_id: str) -> Notification | None:
    notification = Notification.objects.get(pk=notification_id)
    return notification if notification.status == Status.DELIVERED else None


def worker_process_env(provider_server: FakeProviderServer, smtp_server: LocalSmtpServer) -> dict[str, str]:
    """A worker process's environment with every channel pointed at the local fake providers."""
    return platform_env(
        **{name: str(value) for name, value in provider_settings(provider_server).items()},
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(smtp_server.port),
        WEBHOOK_ALLOW_HOSTS=provider_server.host_port,
        LOG_FORMAT="text",
        LOG_LEVEL="INFO",
    )


@pytest.mark.parametrize("channel", ["email", "sms", "push", "webhook"])
def test_each_channel_delivers_end_to_end_through_a_worker_process_and_stores_the_provider_message_id(
    channel: str,
    transactional_db: None,
    broker: Any,
    api: APIClient,
    client_and_token: tuple[ApiClient, str],
    provider_server: FakeProviderServer,
    smtp_server: LocalSmtpServer,
) -> None:
    to = {"email": "ann@example.com", "sms": PHONE, "push": DEVICE, "webhook": provider_server.url("/hooks/e2e")}[channel]
    with PlatformProcess(
        "rundramatiq", "--processes", "1", "--threads", "2", env=worker_process_env(provider_server, smtp_server)
    ) as worker:
        notification_id = accept(api, channel, to)
        try:
            notification = wait_until(lambda: delivered(notification_id), timeout=30, message=f"{channel} delivered")
        except AssertionError:
            raise AssertionError(f"{channel} not delivered; worker log:\n{worker.output()[-3000:]}") from None

    if channel == "email":
        [mail] = smtp_server.received
        assert mail.message["X-Notification-Id"] == notification_id and mail.rcpt_tos == [to]
        assert notification.provider_message_id == mail.message["Message-ID"]
    else:
        [request] = provider_server.requests
        if channel == "sms":
            assert request.form["To"] == PHONE and request.headers["i-twilio-idempotency-token"] == notification_id
            assert notification.provider_message_id == request.reply_body["sid"]
        elif channel == "push":
            assert request.json["message"]["data"]["notification_id"] == notification_id
            assert notification.provider_message_id == request.reply_body["name"]
        else:
            secret = client_and_token[0].webhook_secret
            signed = hmac.new(secret.encode(), request.headers["x-timestamp"].encode() + b"." + request.body, hashlib.sha256)
            assert request.headers["x-signature"] == f"sha256={signed.hexdigest()}"
            assert request.headers["idempotency-key"] == notification_id == json.loads(request.body)["id"]
            assert notification.provider_message_id.startswith("wh-")
    assert notification.attempt_count == 1
    assert list(notification.attempts.values_list("outcome", flat=True)) == [AttemptOutcome.DELIVERED]
    # The INFO log says what happened, never what was sent or what it was sent with.
    log = worker.output()
    assert f"delivered notification {notification_id} on {channel}" in log
    secret = client_and_token[0].webhook_secret
    for leaked in ("Parcel 42", TWILIO_TOKEN, FCM_TOKEN, secret, "Authorization", "Bearer ", "Basic "):
        assert leaked not in log, f"{leaked!r} in the worker's log"


def test_a_provider_429_waits_its_retry_after_and_counts_as_an_attempt(
    api: APIClient, worker: Any, provider_server: FakeProviderServer
) -> None:
    provider_server.reply_next(Reply(429, {"code": 20429, "message": "Too Many Requests", "status": 429}, {"Retry-After": "1"}))
    with override_notifications(RETRY_MAX_ATTEMPTS=2):
        notification_id = accept(api, "sms", PHONE)
        notification = wait_until(lambda: delivered(notification_id), timeout=20, message="sms delivered after a 429")
        assert notification is not None

    throttled, accepted = provider_server.requests
    assert (throttled.reply_status, accepted.reply_status) == (429, 201)
    assert accepted.received_at - throttled.received_at >= 0.9  # Retry-After: 1 honoured
    assert throttled.headers["i-twilio-idempotency-token"] == accepted.headers["i-twilio-idempotency-token"] == notification_id
    # The 429 was an attempt of the budget: two of two.
    assert notification.attempt_count == 2
    assert notification.provider_message_id == accepted.reply_body["sid"]
    outcomes = list(
        DeliveryAttempt.objects.filter(notification_id=notification_id).order_by("number").values_list("outcome", flat=True)
    )
    assert outcomes == [AttemptOutcome.TRANSIENT_ERROR, AttemptOutcome.DELIVERED]


def test_a_destination_that_always_answers_429_ends_dead_when_its_attempts_run_out(
    api: APIClient, worker: Any, provider_server: FakeProviderServer
) -> None:
    too_many = Reply(429, {"code": 20429, "message": "Too Many Requests", "status": 429}, {"Retry-After": "1"})
    provider_server.reply_next(*[too_many] * 10)
    with override_notifications(RETRY_MAX_ATTEMPTS=3, RETRY_BASE_SECONDS=0.05, RETRY_CAP_SECONDS=0.2):
        notification_id = accept(api, "sms", PHONE)
        notification = wait_until(
            lambda: Notification.objects.filter(pk=notification_id, status=Status.DEAD).first(),
            timeout=20,
            message="a notification that only ever gets 429s is dead-lettered",
        )
    assert notification.attempt_count == 3
    assert [r.reply_status for r in provider_server.requests] == [429, 429, 429]
    # The Retry-After of 1 s is capped by the retry cap of 0.2 s: no wait of a whole second.
    gaps = [b.received_at - a.received_at for a, b in zip(provider_server.requests, provider_server.requests[1:], strict=False)]
    assert all(gap < 0.9 for gap in gaps), gaps
    assert DeliveryAttempt.objects.filter(notification_id=notification_id).count() == 3
    assert DeadLetter.objects.filter(notification_id=notification_id, reason=DeadLetterReason.RETRIES_EXHAUSTED).count() == 1


@pytest.fixture
def toy_channel(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Adding a channel: its folder (tests/toy_channel/, a provider), and one registry entry."""
    from notifications.channels import CHANNELS, ChannelSpec, addresses
    from notifications.channels.providers import failover_providers, get_provider
    from notifications.conf import get_config

    from .toy_channel import ToyProvider

    monkeypatch.setitem(CHANNELS, "toy", ChannelSpec("toy", addresses.email_address, "email", "tests.toy_channel.ToyProvider"))
    ToyProvider.sent.clear()
    get_config.cache_clear()  # the providers of the options are read from the registry
    yield "toy"
    monkeypatch.undo()
    for cache in (get_config, get_provider, failover_providers):
        cache.cache_clear()


def test_a_channel_added_with_one_folder_and_one_registry_entry_accepts_and_delivers(toy_channel: str, db: None) -> None:
    from .toy_channel import ToyProvider

    client, _ = make_api_client()
    request = services.NotificationRequest(user_id="u1", channel=toy_channel, to=" Ann@Example.com ", message="Hello, toy")
    accepted = services.notification_accept(client=client, request=request, idempotency_key="toy-1", fingerprint="f")
    notification = Notification.objects.get(pk=accepted.notification_id)
    assert (accepted.status_code, notification.channel, notification.address) == (202, "toy", "Ann@Example.com")

    assert services.notification_deliver(notification_id=notification.pk).outcome == "delivered"

    [sent] = ToyProvider.sent
    assert (sent.channel, sent.address, sent.body) == ("toy", "Ann@Example.com", "Hello, toy")
    notification.refresh_from_db()
    [attempt] = DeliveryAttempt.objects.filter(notification=notification)
    assert notification.status == Status.DELIVERED and notification.provider_message_id.startswith("toy-")
    assert (attempt.channel, attempt.outcome, attempt.provider_response) == ("toy", AttemptOutcome.DELIVERED, "kept by the toy")


def test_an_address_the_added_channels_validator_refuses_is_a_400_naming_to(toy_channel: str, db: None) -> None:
    client, _ = make_api_client()
    request = services.NotificationRequest(user_id="u1", channel=toy_channel, to="not an address", message="Hello, toy")
    with pytest.raises(ValidationFailed) as refused:
        services.notification_accept(client=client, request=request, idempotency_key="toy-2", fingerprint="f")
    assert refused.value.extra == {"field": "to"}


def test_a_channels_callback_routes_are_served_from_its_own_folder_as_its_registry_entry_names() -> None:
    from django.urls import resolve

    from notifications.channels import CHANNELS

    served = {
        channel: resolve(f"/api/v1/{pattern.pattern}").func.view_class.__module__  # type: ignore[attr-defined]
        for channel, spec in CHANNELS.items()
        if spec.callbacks
        for pattern in import_module(spec.callbacks).urlpatterns
    }
    assert served == {"email": "notifications.channels.email.callbacks", "sms": "notifications.channels.sms.callbacks"}
