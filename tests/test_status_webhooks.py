"""Status webhooks: the client's settings API, the secret rotation, and each status change that
matters posted, signed, to a local receiver (the FakeProviderServer), at least once. Most run on
Dramatiq's StubBroker with an in-process worker; one runs through the real RabbitMQ."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import dramatiq
import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from dramatiq.brokers.stub import StubBroker
from rest_framework.test import APIClient
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from notifications import actors, services
from notifications.conf import BULK_QUEUE, HIGH_QUEUE, STATUS_EVENT_QUEUE
from notifications.errors import PermanentChannelError
from notifications.models import (
    ApiClient,
    DeadLetter,
    Notification,
    Status,
    StatusEvent,
    StatusEventState,
    webhook_secret_generate,
)
from notifications.services.records import status_events

from .factories import accept_notification, make_api_client, make_recipient
from .fakes import FakeProviderServer, RecordedRequest, Reply, override_notifications, provider_server_fixture  # noqa: F401
from .helpers import ROOT, wait_until
from .stub_broker import drain as drain_queues
from .stub_broker import stub_broker_with, stub_worker_on

ACTORS = (actors.deliver_notification, actors.deliver_bulk_notification, actors.deliver_status_event)
STATUS_PATH = "/status-events"
HOOK_PATH = "/hook"
EVENT_KEYS = {"type", "timestamp", "data"}
DATA_KEYS = {"event_id", "notification_id", "status", "channel"}
README_SECTION = "## Test mode and verifying webhooks"


def readme_verify() -> Callable[..., Any]:
    """The README's five lines that verify a status webhook with ``standardwebhooks``, run as they
    are written there: verify(secret, headers, body) -> the event, or WebhookVerificationError."""
    section = (ROOT / "README.md").read_text().split(README_SECTION, 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None, f"the README's {README_SECTION!r} section has no python block"
    lines = [line for line in code.group(1).splitlines() if line.strip()]
    assert len(lines) <= 5, lines
    namespace: dict[str, Any] = {}
    exec(code.group(1), namespace)
    return namespace["verify"]  # type: ignore[no-any-return]


def verifies(secret: str, request: RecordedRequest) -> bool:
    """Whether the README's verify (the standardwebhooks package) accepts the post with ``secret``."""
    try:
        readme_verify()(secret, request.headers, request.body)
    except WebhookVerificationError:
        return False
    return True


def status_posts(receiver: FakeProviderServer) -> list[RecordedRequest]:
    return [request for request in receiver.requests if request.path == STATUS_PATH]


@pytest.fixture
def receiver(provider_server: FakeProviderServer) -> Iterator[FakeProviderServer]:
    """The local receiver, which the webhook SSRF rules allow (it is on 127.0.0.1)."""
    with override_notifications(WEBHOOK_ALLOW_HOSTS=[provider_server.host_port], STATUS_WEBHOOK_RETRY_POLICY="0.05:0.2:3"):
        yield provider_server


@pytest.fixture
def stub_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubBroker]:
    with stub_broker_with(monkeypatch, ACTORS) as broker:
        yield broker


@pytest.fixture
def stub_worker(stub_broker: StubBroker, transactional_db: None) -> Iterator[dramatiq.Worker]:
    with stub_worker_on(stub_broker) as worker:
        yield worker


def drain(broker: StubBroker, worker: dramatiq.Worker) -> None:
    drain_queues(broker, worker, (HIGH_QUEUE, BULK_QUEUE, STATUS_EVENT_QUEUE))


def api_for(token: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


def api_for_client(client: ApiClient) -> APIClient:
    """An API client authenticated as ``client`` (its token is given a new value)."""
    return api_for(services.api_client_rotate_token(client=client))


def subscribed_client(receiver: FakeProviderServer) -> tuple[ApiClient, str]:
    """A client whose status events go to the receiver, and its rotated webhook secret, both set
    through the API as a client would."""
    client, token = make_api_client()
    api = api_for(token)
    assert api.patch("/api/v1/client", {"status_webhook_url": receiver.url(STATUS_PATH)}, format="json").status_code == 200
    rotated = api.post("/api/v1/client/webhook-secret")
    assert rotated.status_code == 201
    client.refresh_from_db()
    return client, rotated.json()["webhook_secret"]


def assert_signed_event(request: RecordedRequest, secret: str, **expected: str) -> dict[str, Any]:
    """The post verifies with ``secret`` (by standardwebhooks, as the README says), not with another;
    its body is {type, timestamp, data}; returns its ``type``, ``timestamp`` and data in one dict."""
    assert verifies(secret, request) and Webhook(secret).verify(request.body, request.headers) == request.json
    assert not verifies(webhook_secret_generate(), request)
    payload = request.json
    assert set(payload) == EVENT_KEYS and set(payload["data"]) == DATA_KEYS
    flat = {"type": payload["type"], "timestamp": payload["timestamp"], **payload["data"]}
    assert {key: flat[key] for key in expected} == expected
    assert request.headers["webhook-id"] == request.headers["idempotency-key"] == flat["event_id"]
    return flat


# --- GET/PATCH /client and the secret -------------------------------------------------------------


def test_get_client_shows_its_settings_and_never_its_webhook_secret(api: APIClient, client_and_token: Any) -> None:
    client, _ = client_and_token
    response = api.get("/api/v1/client")
    assert response.status_code == 200
    body = response.json()
    assert (body["name"], body["status_webhook_url"], body["token_prefix"]) == ("acme", "", client.token_prefix)
    assert "webhook_secret" not in body and client.webhook_secret not in response.content.decode()


def test_patch_client_sets_and_clears_the_status_webhook_url(api: APIClient, receiver: FakeProviderServer) -> None:
    url = receiver.url(STATUS_PATH)
    response = api.patch("/api/v1/client", {"status_webhook_url": url}, format="json")
    assert response.status_code == 200 and response.json()["status_webhook_url"] == url
    assert api.get("/api/v1/client").json()["status_webhook_url"] == url
    assert api.patch("/api/v1/client", {"status_webhook_url": ""}, format="json").json()["status_webhook_url"] == ""
    assert ApiClient.objects.get(name="acme").status_webhook_url == ""


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",  # loopback
        "http://169.254.169.254/latest/meta-data",  # link-local (cloud metadata)
        "http://10.0.0.5/hook",  # private
        "http://[::ffff:127.0.0.1]/hook",  # loopback carried in IPv6
        "ftp://hooks.example.com/x",  # not http(s)
        "not a url",
        "http://[invalid/hook",  # urlsplit refuses it
        "https://hooks.example.com/\x00",  # NUL cannot be stored
    ],
)
def test_patch_client_refuses_a_url_the_webhook_rules_refuse_with_400_naming_the_field(api: APIClient, url: str) -> None:
    response = api.patch("/api/v1/client", {"status_webhook_url": url}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "status_webhook_url"
    assert ApiClient.objects.get(name="acme").status_webhook_url == ""


@pytest.mark.parametrize(
    ("url", "leak"),
    [
        ("http://db.internal/", "10.20.30.40"),  # an internal name: the address it resolves to
        ("http://nowhere.internal/", "Name or service not known"),  # the resolver's words
        ("http://127.0.0.1/", "127.0.0.1"),
        ("http://[::ffff:10.0.0.1]:8080/", "10.0.0.1"),
    ],
)
def test_patch_client_refuses_an_internal_or_unresolvable_host_saying_only_not_a_public_address(
    api: APIClient, monkeypatch: pytest.MonkeyPatch, url: str, leak: str
) -> None:
    real = socket.getaddrinfo

    def internal_dns(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "db.internal":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.20.30.40", port))]
        if host == "nowhere.internal":
            raise socket.gaierror(-2, "Name or service not known")
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", internal_dns)
    response = api.patch("/api/v1/client", {"status_webhook_url": url}, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "status_webhook_url"
    assert (
        response.json()["error"]["message"] == "status_webhook_url: its host is not a public address (or could not be resolved)"
    )
    assert leak not in response.content.decode()
    assert ApiClient.objects.get(name="acme").status_webhook_url == ""


def test_patch_client_with_a_host_whose_lookup_hangs_answers_400_within_the_lookup_timeout(
    api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    released = threading.Event()

    def hanging_resolver(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        released.wait(30)
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hanging_resolver)
    try:
        with override_notifications(ADDRESS_LOOKUP_TIMEOUT_SECONDS=0.5):
            began = time.monotonic()
            response = api.patch("/api/v1/client", {"status_webhook_url": "https://slow.example.com/status"}, format="json")
            elapsed = time.monotonic() - began
    finally:
        released.set()

    assert response.status_code == 400, response.content
    assert "not a public address" in response.json()["error"]["message"]
    assert "Temporary failure" not in response.content.decode()
    assert 0.5 <= elapsed < 1.5, elapsed


def test_patch_client_refuses_fields_it_does_not_set(api: APIClient) -> None:
    response = api.patch("/api/v1/client", {"webhook_secret": "mine"}, format="json")
    assert response.status_code == 400 and response.json()["error"]["field"] == "webhook_secret"
    assert api.patch("/api/v1/client", {"status_webhook_url": 7}, format="json").status_code == 400


def test_rotating_the_webhook_secret_returns_it_once_and_it_signs_from_then_on(api: APIClient, client_and_token: Any) -> None:
    client, _ = client_and_token
    first = api.post("/api/v1/client/webhook-secret")
    assert first.status_code == 201 and first["Cache-Control"] == "no-store"
    secret = first.json()["webhook_secret"]
    client.refresh_from_db()
    assert client.webhook_secret == secret and len(secret) >= 43
    assert secret not in api.get("/api/v1/client").content.decode()
    second = api.post("/api/v1/client/webhook-secret").json()["webhook_secret"]
    assert second != secret and ApiClient.objects.get(pk=client.pk).webhook_secret == second


# --- Standard Webhooks signatures -----------------------------------------------------------------

# The example of the Standard Webhooks libraries' own tests (standard-webhooks/standard-webhooks,
# libraries/*: TestWebhookSign), which every implementation must reproduce.
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = "1614265330"
SPEC_PAYLOAD = '{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_the_signature_of_the_spec_example_is_the_one_the_spec_publishes() -> None:
    from notifications.channels.webhook.provider import standard_webhook_signature

    assert standard_webhook_signature(SPEC_SECRET, SPEC_MSG_ID, SPEC_TIMESTAMP, SPEC_PAYLOAD) == SPEC_SIGNATURE
    at = datetime.fromtimestamp(int(SPEC_TIMESTAMP), tz=UTC)
    assert Webhook(SPEC_SECRET).sign(SPEC_MSG_ID, at, SPEC_PAYLOAD) == SPEC_SIGNATURE


def test_a_new_webhook_secret_is_whsec_and_the_base64_of_32_random_bytes(api: APIClient) -> None:
    secrets = {api.post("/api/v1/client/webhook-secret").json()["webhook_secret"] for _ in range(3)}
    assert len(secrets) == 3
    for secret in secrets:
        assert secret.startswith("whsec_")
        assert 24 <= len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) <= 64
    _, token = make_api_client("fresh")
    assert ApiClient.objects.get(name="fresh").webhook_secret.startswith("whsec_")


def test_during_a_rotation_both_secrets_sign_until_the_grace_period_ends(receiver: FakeProviderServer, db: None) -> None:
    client, old = subscribed_client(receiver)
    new = api_for_client(client).post("/api/v1/client/webhook-secret").json()["webhook_secret"]
    notification = accept_notification(client)

    def post_event() -> RecordedRequest:
        [event] = services.status_event_record(
            notifications=[Notification.objects.get(pk=notification.pk)], event_type="notification.bounced", status="delivered"
        )
        assert services.status_event_deliver(event_id=event.pk) == "delivered"
        return status_posts(receiver)[-1]

    during = post_event()
    # The new secret, the old one and the factory's first, which subscribed_client rotated out.
    assert len(during.headers["webhook-signature"].split(" ")) == 3
    assert verifies(new, during) and verifies(old, during)
    with override_notifications(WEBHOOK_SECRET_GRACE_SECONDS=0):
        after = post_event()
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    assert verifies(new, after) and not verifies(old, after)


def test_a_webhook_notification_during_a_rotation_is_signed_with_both_secrets_too(receiver: FakeProviderServer, db: None) -> None:
    client, old = subscribed_client(receiver)
    new = api_for_client(client).post("/api/v1/client/webhook-secret").json()["webhook_secret"]
    notification = accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))
    assert services.notification_deliver(notification_id=notification.pk).outcome == "delivered"
    [post] = receiver.requests
    assert post.headers["webhook-id"] == str(notification.pk)
    # The new secret, the old one and the factory's first, which subscribed_client rotated out.
    assert len(post.headers["webhook-signature"].split(" ")) == 3 and verifies(new, post) and verifies(old, post)


def test_the_deprecated_x_signature_headers_are_sent_until_the_setting_turns_them_off(
    receiver: FakeProviderServer, db: None
) -> None:
    from notifications.channels.webhook.provider import webhook_post_signed

    secret = webhook_secret_generate()
    for legacy in (True, False):
        with override_notifications(WEBHOOK_LEGACY_SIGNATURE_HEADERS=legacy):
            webhook_post_signed(
                url=receiver.url(HOOK_PATH), secret=secret, body="{}", timestamp=str(int(time.time())), idempotency_key="k"
            )
    with_legacy, without = receiver.requests
    expected = hmac.new(secret.encode(), with_legacy.headers["x-timestamp"].encode() + b".{}", hashlib.sha256).hexdigest()
    assert with_legacy.headers["x-signature"] == f"sha256={expected}"
    assert "x-signature" not in without.headers and "x-timestamp" not in without.headers
    assert verifies(secret, with_legacy) and verifies(secret, without)


def test_an_admin_rotates_a_webhook_secret_sees_it_once_and_it_is_audited(db: None) -> None:
    client, _ = make_api_client("acme")
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="root-pass-1"))
    response = admin.post(
        "/admin/notifications/apiclient/",
        {"action": "rotate_webhook_secret_selected", "_selected_action": [client.pk], "index": "0"},
        follow=True,
    )
    [message] = [str(m) for m in response.context["messages"]]
    client.refresh_from_db()
    assert client.webhook_secret in message
    assert client.webhook_secret not in admin.get(f"/admin/notifications/apiclient/{client.pk}/change/").content.decode()
    assert LogEntry.objects.filter(object_id=str(client.pk), change_message="Rotated webhook secret").count() == 1


# --- Recording: nothing without a URL -------------------------------------------------------------


def test_without_a_status_webhook_url_recording_costs_no_query_and_writes_no_event(db: None) -> None:
    client, _ = make_api_client()
    notification = accept_notification(client)
    from_claim = Notification.objects.get(pk=notification.pk)
    claimed_urls = {client.pk: ""}  # what the delivery claim read of its client (models/claims.py)
    with_client = Notification.objects.select_related("client").get(pk=notification.pk)
    with CaptureQueriesContext(connection) as queries:
        assert (
            services.status_event_record(
                notifications=[from_claim], event_type="notification.delivered", webhook_urls=claimed_urls
            )
            == []
        )
        assert services.status_event_record(notifications=[with_client], event_type="notification.failed") == []
    assert queries.captured_queries == []
    # Neither known: one read of the client says there is no URL, and nothing is written.
    unknown = Notification.objects.get(pk=notification.pk)
    with CaptureQueriesContext(connection) as queries:
        services.status_event_record(notifications=[unknown], event_type="notification.failed")
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT"]
    assert not StatusEvent.objects.exists()


def test_a_failure_of_a_client_without_a_status_webhook_url_makes_no_event(
    receiver: FakeProviderServer, stub_broker: StubBroker, transactional_db: None
) -> None:
    client, _ = make_api_client()
    notification = accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))
    receiver.reply_next(Reply(410, {"detail": "gone"}))
    assert services.notification_deliver(notification_id=notification.pk).outcome == "failed"
    assert Notification.objects.get(pk=notification.pk).status == Status.FAILED
    assert not StatusEvent.objects.exists() and stub_broker.queues[STATUS_EVENT_QUEUE].qsize() == 0


# --- Events posted --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "event_type", "status", "settings"),
    [
        (Reply(410, {"detail": "hook removed"}), "notification.failed", "failed", {}),
        (Reply(503, {"detail": "down"}), "notification.dead", "dead", {"RETRY_MAX_ATTEMPTS": 1}),
    ],
    ids=["failed", "dead"],
)
def test_a_notification_that_ends_failed_or_dead_posts_a_signed_event_verified_with_the_rotated_secret(
    receiver: FakeProviderServer,
    stub_broker: StubBroker,
    stub_worker: dramatiq.Worker,
    reply: Reply,
    event_type: str,
    status: str,
    settings: dict[str, Any],
) -> None:
    client, secret = subscribed_client(receiver)
    receiver.reply_next(reply)
    with override_notifications(**settings):
        notification = accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))
        drain(stub_broker, stub_worker)
        [post] = wait_until(lambda: status_posts(receiver), message="no status event was posted")
    assert Notification.objects.get(pk=notification.pk).status == status
    payload = assert_signed_event(post, secret, type=event_type, status=status, channel="webhook")
    assert payload["notification_id"] == str(notification.pk)
    event = StatusEvent.objects.get(pk=payload["event_id"])
    assert (event.state, event.attempt_count, event.client_id) == (StatusEventState.DELIVERED, 1, client.pk)


def test_a_notification_suppressed_at_accept_posts_a_suppressed_event(
    receiver: FakeProviderServer, stub_broker: StubBroker, stub_worker: dramatiq.Worker
) -> None:
    client, secret = subscribed_client(receiver)
    make_recipient(client, "u1", email="ann@example.com")
    services.recipient_preferences_replace(client=client, user_id="u1", channels={"email": False}, categories={})
    notification = accept_notification(client, to="")
    assert notification.status == Status.SUPPRESSED
    drain(stub_broker, stub_worker)
    [post] = wait_until(lambda: status_posts(receiver))
    assert_signed_event(post, secret, type="notification.suppressed", status="suppressed", notification_id=str(notification.pk))


def test_a_notification_suppressed_just_before_its_send_posts_a_suppressed_event(
    receiver: FakeProviderServer, stub_broker: StubBroker, stub_worker: dramatiq.Worker
) -> None:
    client, secret = subscribed_client(receiver)
    make_recipient(client, "u1", email="ann@example.com")
    stub_worker.pause()
    notification = accept_notification(client, to="")
    services.recipient_preferences_replace(client=client, user_id="u1", channels={"email": False}, categories={})
    stub_worker.resume()
    drain(stub_broker, stub_worker)
    assert Notification.objects.get(pk=notification.pk).status == Status.SUPPRESSED
    [post] = wait_until(lambda: status_posts(receiver))
    assert_signed_event(post, secret, type="notification.suppressed", notification_id=str(notification.pk))


def test_a_batch_with_suppressed_items_records_an_event_for_each(
    receiver: FakeProviderServer, stub_broker: StubBroker, db: None
) -> None:
    client, token = make_api_client()
    services.api_client_set_status_webhook_url(client=client, url=receiver.url(STATUS_PATH))
    services.recipient_preferences_replace(client=client, user_id="u1", channels={"email": False}, categories={})
    items = [{"user_id": "u1", "message": "hi", "to": f"a{n}@example.com", "idempotency_key": f"k{n}"} for n in range(2)]
    response = api_for(token).post("/api/v1/notifications/batch", {"notifications": items}, format="json")
    assert [slot["body"]["status"] for slot in response.json()["results"]] == ["suppressed", "suppressed"]
    ids = {slot["body"]["id"] for slot in response.json()["results"]}
    assert {str(e.notification_id) for e in StatusEvent.objects.filter(type="notification.suppressed")} == ids


def test_a_receiver_answering_500_gets_the_same_event_again_until_it_answers_200(
    receiver: FakeProviderServer, stub_broker: StubBroker, stub_worker: dramatiq.Worker
) -> None:
    client, secret = subscribed_client(receiver)
    receiver.reply_next(Reply(410, {"detail": "hook removed"}), Reply(500, {"detail": "oops"}))
    notification = accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))
    first, second = wait_until(lambda: status_posts(receiver) if len(status_posts(receiver)) >= 2 else None, timeout=20)
    drain(stub_broker, stub_worker)
    assert (first.reply_status, second.reply_status) == (500, 200)
    assert first.json == second.json and first.json["data"]["notification_id"] == str(notification.pk)
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert_signed_event(second, secret, type="notification.failed")
    event = StatusEvent.objects.get(pk=first.json["data"]["event_id"])
    assert (event.state, event.attempt_count) == (StatusEventState.DELIVERED, 2)
    assert "HTTP 500" not in event.last_error and len(status_posts(receiver)) == 2


def test_an_event_refused_for_good_or_out_of_attempts_is_dead_and_can_be_sent_again(
    receiver: FakeProviderServer, stub_broker: StubBroker, stub_worker: dramatiq.Worker
) -> None:
    client, secret = subscribed_client(receiver)
    receiver.reply_next(Reply(410, {"detail": "hook removed"}), *[Reply(503, {"detail": "down"})] * 3)
    accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))
    wait_until(lambda: StatusEvent.objects.filter(state=StatusEventState.DEAD).exists(), timeout=20)
    event = StatusEvent.objects.get()
    assert event.attempt_count == 3 and "HTTP 503" in event.last_error  # STATUS_WEBHOOK_RETRY_POLICY 0.05:0.2:3
    assert services.status_event_redrive(event=event)
    drain(stub_broker, stub_worker)
    event.refresh_from_db()
    assert event.state == StatusEventState.DELIVERED
    assert [r.reply_status for r in status_posts(receiver)] == [503, 503, 503, 200]


def test_a_status_event_publish_that_fails_does_not_fail_the_delivery_and_the_sweeper_sends_it(
    receiver: FakeProviderServer, stub_broker: StubBroker, transactional_db: None
) -> None:
    client, _ = subscribed_client(receiver)
    notification = accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))

    def broker_down(broker: Any, messages: list[Any]) -> None:
        raise ConnectionError("RabbitMQ is gone")

    receiver.reply_next(Reply(410, {"detail": "hook removed"}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(status_events, "messages_publish", broker_down)
        assert services.notification_deliver(notification_id=notification.pk).outcome == "failed"
    assert Notification.objects.get(pk=notification.pk).status == Status.FAILED
    assert DeadLetter.objects.filter(notification=notification).exists()
    event = StatusEvent.objects.get()
    assert (event.state, event.enqueued_at) == (StatusEventState.PENDING, None)

    report = services.notification_sweep(now=timezone.now() + timedelta(seconds=5))
    assert report.status_events == 1
    [message] = [dramatiq.Message.decode(data) for data in stub_broker.queues[STATUS_EVENT_QUEUE].queue]
    assert (message.actor_name, list(message.args)) == ("deliver_status_event", [str(event.pk)])
    assert services.status_event_deliver(event_id=event.pk) == "delivered"
    assert len(status_posts(receiver)) == 1


def test_a_posted_event_is_not_posted_again_by_a_duplicate_message(receiver: FakeProviderServer, db: None) -> None:
    client, _ = make_api_client()
    services.api_client_set_status_webhook_url(client=client, url=receiver.url(STATUS_PATH))
    notification = accept_notification(client)
    [event] = services.status_event_record(
        notifications=[Notification.objects.get(pk=notification.pk)], event_type="notification.bounced", status="delivered"
    )
    assert services.status_event_deliver(event_id=event.pk) == "delivered"
    assert services.status_event_deliver(event_id=event.pk) == "skipped"
    assert status_posts(receiver)[0].json["type"] == "notification.bounced"


def test_status_events_and_webhook_deliveries_are_one_signed_post_of_the_webhook_channel(
    receiver: FakeProviderServer, db: None
) -> None:
    """One function signs and posts both (channels/webhook/provider.py): what docs/api.md says a receiver
    checks holds for a webhook delivery and a status event alike."""
    from notifications.channels.webhook.provider import webhook_post_signed

    client, secret = subscribed_client(receiver)
    notification = accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))
    [event] = services.status_event_record(
        notifications=[Notification.objects.get(pk=notification.pk)], event_type="notification.bounced", status="delivered"
    )
    assert services.notification_deliver(notification_id=notification.pk).outcome == "delivered"
    assert services.status_event_deliver(event_id=event.pk) == "delivered"
    status, _ = webhook_post_signed(
        url=receiver.url(HOOK_PATH), secret=secret, body='{"id":"x"}', timestamp=str(int(time.time())), idempotency_key="k-1"
    )

    delivery, status_post, direct = receiver.requests
    assert status == 200 and direct.headers["idempotency-key"] == "k-1"
    assert_signed_event(status_post, secret, type="notification.bounced")
    for request in (delivery, direct):
        assert verifies(secret, request) and not verifies(webhook_secret_generate(), request)
        assert request.headers["webhook-id"] == request.headers["idempotency-key"]
    assert delivery.headers["idempotency-key"] == str(notification.pk)
    headers = {"content-type", "user-agent", "webhook-id", "webhook-timestamp", "webhook-signature", "idempotency-key"}
    assert all(headers <= set(request.headers) for request in (delivery, status_post, direct))
    assert status_post.headers["user-agent"].startswith("notifications-status/")
    with pytest.raises(PermanentChannelError, match="no webhook secret"):
        webhook_post_signed(url=receiver.url(HOOK_PATH), secret="", body="{}", timestamp="1", idempotency_key="k-2")


# --- Through the real RabbitMQ --------------------------------------------------------------------


def test_a_failed_notification_event_goes_through_rabbitmq_to_the_receiver(
    receiver: FakeProviderServer, worker: dramatiq.Worker
) -> None:
    client, secret = subscribed_client(receiver)
    receiver.reply_next(Reply(400, {"detail": "bad hook"}))
    notification = accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))
    [post] = wait_until(lambda: status_posts(receiver), timeout=20)
    assert_signed_event(post, secret, type="notification.failed", notification_id=str(notification.pk), status="failed")
    wait_until(lambda: StatusEvent.objects.filter(state=StatusEventState.DELIVERED).count() == 1)


def test_the_admin_lists_status_events_filtered_by_state_and_type(receiver: FakeProviderServer, db: None) -> None:
    client, _ = make_api_client()
    services.api_client_set_status_webhook_url(client=client, url=receiver.url(STATUS_PATH))
    notification = accept_notification(client)
    [event] = services.status_event_record(notifications=[notification], event_type="notification.complained")
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="root-pass-1"))
    listed = admin.get("/admin/notifications/statusevent/?state=pending&type=notification.complained")
    assert listed.status_code == 200 and str(event.pk) in listed.content.decode()
    assert str(event.pk) not in admin.get("/admin/notifications/statusevent/?state=dead").content.decode()
    page = admin.get(f"/admin/notifications/statusevent/{event.pk}/change/")
    assert page.status_code == 200 and "notification.complained" in page.content.decode()


def test_every_secret_rotated_out_within_its_grace_period_still_signs_until_its_own_grace_ends(
    receiver: FakeProviderServer, db: None
) -> None:
    client, first = subscribed_client(receiver)
    api = api_for_client(client)
    second = api.post("/api/v1/client/webhook-secret").json()["webhook_secret"]
    third = api.post("/api/v1/client/webhook-secret").json()["webhook_secret"]
    notification = accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))
    assert services.notification_deliver(notification_id=notification.pk).outcome == "delivered"
    [status_event] = services.status_event_record(
        notifications=[Notification.objects.get(pk=notification.pk)], event_type="notification.bounced", status="delivered"
    )
    assert services.status_event_deliver(event_id=status_event.pk) == "delivered"
    post, event = receiver.requests[-2:]
    for signed in (post, event):  # the webhook channel's post (signed from its claim) and a status event
        assert verifies(third, signed) and verifies(second, signed) and verifies(first, signed)

    # The first secret's grace ends before the second's: it alone stops signing.
    client.refresh_from_db()
    [(newest, at), (oldest, _), *rest] = client.webhook_secrets_retired
    assert (newest, oldest) == (second, first)
    grace = 3600
    aged = [[newest, at], [oldest, time.time() - grace - 1], *rest]
    ApiClient.objects.filter(pk=client.pk).update(webhook_secrets_retired=aged)
    with override_notifications(WEBHOOK_SECRET_GRACE_SECONDS=grace):
        again = accept_notification(client, channel="webhook", to=receiver.url(HOOK_PATH))
        assert services.notification_deliver(notification_id=again.pk).outcome == "delivered"
    latest = receiver.requests[-1]
    assert verifies(third, latest) and verifies(second, latest) and not verifies(first, latest)


def test_rotating_more_often_than_the_grace_period_allows_is_429_and_keeps_the_secret(
    api: APIClient, client_and_token: Any
) -> None:
    client, _ = client_and_token
    from notifications.models.clients import MAX_RETIRED_WEBHOOK_SECRETS

    made = [api.post("/api/v1/client/webhook-secret") for _ in range(MAX_RETIRED_WEBHOOK_SECRETS)]
    assert [answer.status_code for answer in made] == [201] * MAX_RETIRED_WEBHOOK_SECRETS
    refused = api.post("/api/v1/client/webhook-secret")
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "limit_exceeded"
    assert 1 <= int(refused["Retry-After"]) <= 86400
    client.refresh_from_db()
    assert client.webhook_secret == made[-1].json()["webhook_secret"]
    assert len(client.webhook_secrets_retired) == MAX_RETIRED_WEBHOOK_SECRETS
