"""The event consumer against the real RabbitMQ (this run's vhost) and PostgreSQL: real
``consume_events`` processes (or the consumer in a thread where metrics are read in-process)."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import dramatiq
import pika
import psycopg
import pytest
from django.conf import settings
from django.core import mail
from django.core.management import call_command
from django.db import connection, connections
from django.urls import reverse
from django.utils import timezone
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import REGISTRY

from notifications import events, services
from notifications.conf import get_config
from notifications.models import DeadLetter, DeadLetterReason, DeadLetterSource, Notification, ProcessedEvent, Resolution, Status

from .factories import make_api_client, make_recipient
from .helpers import PlatformProcess, platform_env, wait_until
from .helpers import test_database_url as database_url

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def order(order_id: int = 42, **fields: Any) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "project_id": 7,
        "description": "2 × blue widgets",
        "amount": 19.99,
        "user_id": "u1",
        **fields,
    }


def publish(body: dict[str, Any] | bytes, **kwargs: Any) -> None:
    events.event_publish(body=body if isinstance(body, bytes) else json.dumps(body).encode(), **kwargs)


@contextlib.contextmanager
def amqp_channel() -> Iterator[Any]:
    conn = pika.BlockingConnection(pika.URLParameters(settings.BROKER_URL))
    try:
        yield conn.channel()
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def queue_depth(queue: str) -> int:
    with amqp_channel() as channel:
        return int(channel.queue_declare(queue=queue, passive=True).method.message_count)


def processed(status: str) -> float:
    return REGISTRY.get_sample_value("notifications_processed_total", {"status": status}) or 0.0


@pytest.fixture(autouse=True)
def topology() -> Iterator[None]:
    """Fresh event queues in this run's vhost, so no test sees another's messages."""

    def reset() -> None:
        config = get_config().events
        with amqp_channel() as channel:
            for queue in (config.queue, config.dlq):
                channel.queue_delete(queue=queue)
            events.declare_topology(channel, config)

    reset()
    yield
    reset()


@pytest.fixture
def recipient(db: None) -> None:
    client = services.api_client_get_or_create(name=get_config().events_api_client)
    make_recipient(client, "u1", email="u1@example.com")


def consumer_env(**overrides: str) -> dict[str, str]:
    values = {
        "LOG_FORMAT": "text",
        "EVENTS_TRANSIENT_RETRY_SECONDS": "0.1",
        "EVENTS_RECONNECT_BASE_SECONDS": "0.2",
        "EVENTS_RECONNECT_CAP_SECONDS": "1",
        "CONSUMER_METRICS_PORT": "0",
    }
    values.update(overrides)
    return platform_env(**values)


def start_consumer(*args: str, **env: str) -> PlatformProcess:
    process = PlatformProcess("consume_events", *args, env=consumer_env(**env))
    wait_until(lambda: "event consumer connected" in process.output() or process.process.poll() is not None, timeout=30)
    assert process.process.poll() is None, process.output()
    return process


@contextlib.contextmanager
def consumer_thread() -> Iterator[events.EventConsumer]:
    connected = threading.Event()
    consumer = events.EventConsumer(on_connected=connected.set)

    def run() -> None:
        try:
            consumer.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="event-consumer", daemon=True)
    thread.start()
    assert connected.wait(20), "the consumer did not connect"
    try:
        yield consumer
    finally:
        consumer.stop()
        thread.join(timeout=20)


# --- Decoding and rendering ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({k: v for k, v in order().items() if k != "user_id"}).encode(), "user_id is missing"),
        (json.dumps(order(amount="19.99")).encode(), "amount must be a number"),
        (json.dumps(order(amount=True)).encode(), "amount must be a number"),
        (json.dumps(order(order_id=None)).encode(), "order_id must be"),
        (json.dumps(order(channel="pigeon")).encode(), "channel must be one of"),
        (json.dumps(order(channel=["email"])).encode(), "channel must be one of"),
        (b"", "not JSON"),
        (b'"just a string"', "not a JSON object"),
        (b"null", "not a JSON object"),
        (json.dumps(order(amount=None)).encode(), "amount must be a number"),
        (json.dumps(order(amount=[1])).encode(), "amount must be a number"),
        (json.dumps(order(amount=float("nan"))).encode(), "amount must be a number"),
        (json.dumps(order(amount=float("inf"))).encode(), "amount must be a number"),
        (json.dumps(order(amount=-float("inf"))).encode(), "amount must be a number"),
        (json.dumps(order(amount=10**400)).encode(), "amount must be a number"),
        (json.dumps({k: v for k, v in order().items() if k != "amount"}).encode(), "amount is missing"),
        (json.dumps(order(order_id=True)).encode(), "order_id must be"),
        (json.dumps(order(order_id=42.5)).encode(), "order_id must be"),
        (json.dumps(order(order_id="  ")).encode(), "order_id must be"),
        (json.dumps(order(project_id={"id": 7})).encode(), "project_id must be"),
        (json.dumps({k: v for k, v in order().items() if k != "project_id"}).encode(), "project_id is missing"),
        (json.dumps(order(description=3)).encode(), "description must be a string"),
        (json.dumps(order(user_id=" ")).encode(), "user_id must be a non-empty string"),
        (json.dumps(order(email="not-an-address")).encode(), "not a valid email address"),
        (json.dumps(order(email=5)).encode(), "email must be a string"),
        (json.dumps(order(email="a@example.com", channel="sms")).encode(), "channel is not email"),
        (json.dumps(order()).encode("utf-16"), "not UTF-8"),
        (json.dumps(order(description="café"), ensure_ascii=False).encode("latin-1"), "not UTF-8"),
        (b"[" * 100_000, "not usable JSON"),
        (b'{"order_id": ' + b"9" * 5000 + b"}", "not usable JSON"),
    ],
)
def test_malformed_bodies_are_rejected_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(events.MalformedEvent, match=reason):
        events.decode_order_created(body)


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(order(amount="19.99")).encode(),
        json.dumps(order(amount=float("nan"))).encode(),
        json.dumps(order(email="not-an-address")).encode(),
        json.dumps(order()).encode("utf-16"),
        b"[" * 100_000,
    ],
    ids=["string-amount", "nan-amount", "bad-email", "utf-16", "deep-nesting"],
)
def test_a_malformed_event_is_failed_without_a_claim_or_a_notification(body: bytes) -> None:
    # failed is what the consumer nacks without requeue, i.e. to the DLQ; a bug-like exception
    # here would be failed_transient instead and loop until the redelivery limit.
    result = events.event_process(body=body, routing_key="order.created", headers={})
    assert result.status == "failed", result
    assert not ProcessedEvent.objects.exists()
    assert not Notification.objects.exists()
    # The DLQ consumer re-validates the body to find the reason; it must not raise either.
    # PostgreSQL refuses NUL in text and jsonb; a UTF-16 body and AMQP headers can carry it.
    dead_letter = events.dead_letter_ingest(body=body, routing_key="order.created", headers={"x-note": b"a\x00b"})
    assert dead_letter.reason == DeadLetterReason.POISON_MESSAGE
    assert "\x00" not in dead_letter.raw_body
    assert dead_letter.headers == {"x-note": "a\ufffdb"}


def test_the_message_is_rendered_from_the_platform_template_the_migration_seeded(db: None) -> None:
    event = events.decode_order_created(json.dumps(order(amount=20)).encode())
    client, _ = make_api_client()
    rendered = services.template_preview(
        client=client, key="order_created", channel="email", locale="", data=events.order_created_data(event)
    )
    assert rendered.subject == "Order #42 created"
    assert rendered.body == "Order #42 created for project 7: 2 × blue widgets — $20.00"


def test_reconnect_backoff_doubles_from_5s_to_a_300s_cap_with_jitter() -> None:
    delays = events.reconnect_delays(5, 300)
    got = [next(delays) for _ in range(9)]
    for delay, nominal in zip(got, [5, 10, 20, 40, 80, 160, 300, 300, 300], strict=True):
        assert 0.8 * nominal <= delay <= min(300, 1.2 * nominal)
    assert len({round(d, 6) for d in got[-3:]}) > 1 or all(d == 300 for d in got[-3:])


# --- Processing with the real consumer -------------------------------------------------------------


def test_a_valid_event_becomes_one_notification_that_a_worker_delivers(recipient: None, worker: dramatiq.Worker) -> None:
    with start_consumer() as consumer:
        publish(order(42))
        notification = wait_until(lambda: Notification.objects.filter(metadata__order_id=42).first(), timeout=20)
        wait_until(
            lambda: Notification.objects.filter(pk=notification.pk, status=Status.DELIVERED).exists(),
            timeout=20,
            message="delivered",
        )
        assert "event order.created:42: success" in consumer.output()
    notification.refresh_from_db()
    assert notification.client.name == "events"
    assert notification.address == "u1@example.com"
    assert notification.message == "Order #42 created for project 7: 2 × blue widgets — $19.99"
    assert notification.metadata["order_id"] == 42
    assert [m.to for m in mail.outbox] == [["u1@example.com"]]
    assert ProcessedEvent.objects.get(event_key="order.created:42").notification_id == notification.pk
    assert queue_depth(get_config().events.queue) == 0


def test_the_same_event_three_times_makes_one_notification_and_two_duplicates(recipient: None) -> None:
    before = {status: processed(status) for status in ("success", "duplicate")}
    for _ in range(3):
        publish(order(43, email="given@example.com"))
    with consumer_thread():
        wait_until(lambda: processed("duplicate") - before["duplicate"] >= 2, timeout=20, message="two duplicates")
    assert processed("success") - before["success"] == 1
    assert processed("duplicate") - before["duplicate"] == 2
    assert Notification.objects.filter(metadata__order_id=43).count() == 1
    assert Notification.objects.get(metadata__order_id=43).address == "given@example.com"
    assert queue_depth(get_config().events.queue) == 0


def test_a_claim_past_its_expiry_is_replaced_and_a_live_one_makes_a_duplicate(recipient: None) -> None:
    now = timezone.now()
    ProcessedEvent.objects.create(
        event_key="order.created:44",
        routing_key="order.created",
        created_at=now - timedelta(days=2),
        expires_at=now - timedelta(days=1),
    )

    first = events.event_process(body=json.dumps(order(44)).encode(), routing_key="order.created")
    again = events.event_process(body=json.dumps(order(44)).encode(), routing_key="order.created")

    assert (first.status, again.status) == ("success", "duplicate")
    claim = ProcessedEvent.objects.get(event_key="order.created:44")
    assert claim.expires_at > now and str(claim.notification_id) == first.notification_id
    assert Notification.objects.filter(metadata__order_id=44).count() == 1


def test_malformed_events_go_to_the_dlq_and_become_dead_letters_that_can_be_republished(admin_client: Any) -> None:
    config = get_config().events
    with start_consumer("--no-dead-letters") as consumer:
        publish(b"{not json")
        publish(order(44, amount="lots"))
        wait_until(lambda: queue_depth(config.dlq) == 2, timeout=20, message="both in notifications.dlq")
        assert "amount must be a number" in consumer.output()
        assert "body is not JSON" in consumer.output()
    assert DeadLetter.objects.count() == 0

    with start_consumer():
        wait_until(lambda: DeadLetter.objects.count() == 2, timeout=20, message="dead letters recorded")
        wait_until(lambda: queue_depth(config.dlq) == 0, timeout=10, message="DLQ drained after recording")
    bad_amount = DeadLetter.objects.get(raw_body__contains='"lots"')
    assert bad_amount.source == DeadLetterSource.EVENT
    assert bad_amount.reason == DeadLetterReason.POISON_MESSAGE
    assert "amount must be a number" in bad_amount.last_error
    assert bad_amount.routing_key == "order.created"
    death = bad_amount.headers["x-death"][0]
    assert (death["queue"], death["exchange"], death["reason"]) == (config.queue, config.exchange, "rejected")
    assert Notification.objects.count() == 0
    page = admin_client.get(reverse("admin:notifications_deadletter_changelist"), {"source": "event"})
    assert page.status_code == 200
    assert reverse("admin:notifications_deadletter_change", args=[bad_amount.pk]) in page.content.decode()

    result = services.dead_letter_redrive(dead_letter=bad_amount, by=None)
    assert result.done, result.detail
    assert queue_depth(config.queue) == 1
    bad_amount.refresh_from_db()
    assert bad_amount.resolution == Resolution.RETRIED
    assert not services.dead_letter_redrive(dead_letter=bad_amount, by=None).done
    assert queue_depth(config.queue) == 1


NO_ADDRESS = "no email address is known for user 'u1'"


def test_an_event_for_a_user_with_no_known_address_is_a_poison_dead_letter_that_names_the_missing_address() -> None:
    # Valid JSON, so re-validating the body alone would have called it the redelivery limit.
    with start_consumer() as consumer:
        call_command(
            "publish_event", "order.created", "--order-id", "60", "--project-id", "7", "--user-id", "u1", "--amount", "19.99",
            "--description", "2 widgets",
        )  # fmt: skip
        dead_letter = wait_until(lambda: DeadLetter.objects.first(), timeout=20, message="recorded")
        assert NO_ADDRESS in consumer.output()
    assert dead_letter.source == DeadLetterSource.EVENT
    assert dead_letter.reason == DeadLetterReason.POISON_MESSAGE
    assert NO_ADDRESS in dead_letter.last_error
    assert json.loads(dead_letter.raw_body)["order_id"] == 60
    assert Notification.objects.count() == 0


def test_the_rejection_reason_reaches_a_dlq_consumer_started_after_the_rejecting_one_stopped() -> None:
    config = get_config().events
    with start_consumer("--no-dead-letters"):
        publish(order(61), message_id="m-61")
        publish(order(61))  # the same body without a message id: another message, the same reason
        wait_until(lambda: queue_depth(config.dlq) == 2, timeout=20, message="both in notifications.dlq")
    with start_consumer():
        wait_until(lambda: DeadLetter.objects.count() == 2, timeout=20, message="recorded by the second consumer")
    for dead_letter in DeadLetter.objects.all():
        assert dead_letter.reason == DeadLetterReason.POISON_MESSAGE
        assert NO_ADDRESS in dead_letter.last_error


@pytest.mark.parametrize(
    ("death_reason", "reason", "error"),
    [
        (b"rejected", DeadLetterReason.POISON_MESSAGE, "rejected by the consumer; see its log"),
        (None, DeadLetterReason.POISON_MESSAGE, "rejected by the consumer; see its log"),
        (b"delivery_limit", DeadLetterReason.REDELIVERY_LIMIT, "delivery limit"),
        (b"expired", DeadLetterReason.POISON_MESSAGE, "dead-lettered by RabbitMQ (expired)"),
    ],
)
def test_a_valid_body_with_no_noted_rejection_is_recorded_from_x_death_without_guessing(
    death_reason: bytes | None, reason: str, error: str
) -> None:
    body = json.dumps(order(62, user_id="nobody-noted-this")).encode()
    headers = {} if death_reason is None else {"x-death": [{"reason": death_reason, "routing-keys": [b"order.created"]}]}
    dead_letter = events.dead_letter_ingest(body=body, routing_key="order.created", headers=headers, message_id="m-62")
    assert dead_letter.reason == reason
    assert error in dead_letter.last_error


def test_a_noted_rejection_is_used_for_a_consumer_reject_but_not_for_rabbitmqs_own_delivery_limit() -> None:
    body = json.dumps(order(63)).encode()
    identity = events.message_identity(body=body, routing_key="order.created", message_id="m-63")
    events.rejection_notes().note(identity, reason=DeadLetterReason.POISON_MESSAGE, error="validation_failed: " + NO_ADDRESS)
    rejected = {"x-death": [{"reason": b"rejected", "routing-keys": [b"order.created"]}]}
    noted = events.dead_letter_ingest(body=body, routing_key="", headers=rejected, message_id="m-63")
    assert (noted.reason, noted.last_error) == (DeadLetterReason.POISON_MESSAGE, "validation_failed: " + NO_ADDRESS)
    # Another message (no id) with the same body was not noted.
    other = events.dead_letter_ingest(body=body, routing_key="", headers=rejected)
    assert other.last_error == "rejected by the consumer; see its log"
    limit = {"x-death": [{"reason": b"delivery_limit", "routing-keys": [b"order.created"]}]}
    assert events.dead_letter_ingest(body=body, routing_key="", headers=limit, message_id="m-63").reason == (
        DeadLetterReason.REDELIVERY_LIMIT
    )


def test_rejection_notes_survive_a_restart_in_the_cache_and_a_cache_outage_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    notes = events.RejectionNotes(ttl_seconds=60)
    notes.note("id-restart", reason=DeadLetterReason.POISON_MESSAGE, error="first")
    # A new process (new notes) finds it in the cache.
    assert events.RejectionNotes(ttl_seconds=60).get("id-restart") == (DeadLetterReason.POISON_MESSAGE, "first")

    def redis_down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(events.cache, "set", redis_down)
    monkeypatch.setattr(events.cache, "get", redis_down)
    notes.note("id-outage", reason=DeadLetterReason.REDELIVERY_LIMIT, error="second")
    assert notes.get("id-outage") == (DeadLetterReason.REDELIVERY_LIMIT, "second")
    assert events.RejectionNotes(ttl_seconds=60).get("id-outage") is None
    monkeypatch.undo()
    small = events.RejectionNotes(ttl_seconds=60, max_local=2)
    monkeypatch.setattr(events.cache, "set", redis_down)
    monkeypatch.setattr(events.cache, "get", redis_down)
    for n in range(3):
        small.note(f"id-bounded-{n}", reason=DeadLetterReason.POISON_MESSAGE, error=str(n))
    assert small.get("id-bounded-0") is None
    assert small.get("id-bounded-2") == (DeadLetterReason.POISON_MESSAGE, "2")


def postgres_url(database: str | None = None) -> str:
    url = database_url().replace("postgres://", "postgresql://", 1)
    return url if database is None else url.rsplit("/", 1)[0] + f"/{database}"


@contextlib.contextmanager
def database_refusing_connections() -> Iterator[None]:
    """This run's test database refuses new connections, and the consumer's are cut. Done from
    the maintenance database: PostgreSQL will not lock out the database a session is in."""
    name = connection.settings_dict["NAME"]
    assert name.startswith("test_notifications_"), name
    with psycopg.connect(postgres_url("postgres"), autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (own_pid,) = cursor.fetchone()
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> %s", [name, own_pid])
        try:
            yield
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def test_while_the_database_is_down_an_event_is_requeued_then_processed_once_it_is_back(recipient: None) -> None:
    with start_consumer(EVENTS_MAX_REDELIVERIES="1000") as consumer:
        with database_refusing_connections():
            publish(order(45))
            wait_until(lambda: consumer.output().count("transient failure") >= 3, timeout=20, message="requeued")
            assert Notification.objects.count() == 0
        wait_until(lambda: Notification.objects.filter(metadata__order_id=45).exists(), timeout=20, message="processed")
        wait_until(lambda: queue_depth(get_config().events.queue) == 0, timeout=10)
    assert Notification.objects.filter(metadata__order_id=45).count() == 1
    assert DeadLetter.objects.count() == 0


def test_an_event_requeued_more_than_the_limit_goes_to_the_dlq_and_is_recorded_when_the_database_is_back(
    recipient: None,
) -> None:
    with start_consumer(EVENTS_MAX_REDELIVERIES="2") as consumer:
        with database_refusing_connections():
            publish(order(46))
            wait_until(lambda: "sent to the DLQ" in consumer.output(), timeout=20, message="dead-lettered")
            wait_until(lambda: "cannot record a dead-lettered event yet" in consumer.output(), timeout=20)
        dead_letter = wait_until(lambda: DeadLetter.objects.first(), timeout=20, message="recorded")
    assert dead_letter.reason == DeadLetterReason.REDELIVERY_LIMIT
    # The consumer's own words, from its note: the count and the last transient error.
    assert "failed transiently 3 times (redelivery limit)" in dead_letter.last_error
    assert "OperationalError" in dead_letter.last_error
    assert json.loads(dead_letter.raw_body)["order_id"] == 46
    assert consumer.output().count("transient failure") == 2
    assert Notification.objects.count() == 0


def test_the_redelivery_limit_holds_across_a_consumer_restart(recipient: None) -> None:
    # Classic queues say only "redelivered": the count of transient failures must outlive the process.
    with database_refusing_connections():
        # Long waits between tries in the first: it is stopped in the wait after its second.
        with start_consumer(EVENTS_MAX_REDELIVERIES="3", EVENTS_TRANSIENT_RETRY_SECONDS="5") as first:
            publish(order(54))
            wait_until(lambda: "transient failure 2 " in first.output(), timeout=20, message="two transient failures")
        assert first.process.returncode == 0, first.output()
        with start_consumer(EVENTS_MAX_REDELIVERIES="3", EVENTS_TRANSIENT_RETRY_SECONDS="0.2") as second:
            wait_until(lambda: "sent to the DLQ" in second.output(), timeout=20, message="dead-lettered after the restart")
            wait_until(lambda: queue_depth(get_config().events.queue) == 0, timeout=10)
    assert "transient failure 1 " not in second.output(), second.output()
    assert "failed transiently 4 times" in second.output()
    assert queue_depth(get_config().events.queue) == 0


def test_redeliveries_are_counted_in_memory_while_redis_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    durable = events.RedeliveryCounter(ttl_seconds=60)
    assert [durable.increment("order.created:55") for _ in range(2)] == [1, 2]
    # A new counter (a restarted consumer) goes on from the cache's count...
    assert events.RedeliveryCounter(ttl_seconds=60).increment("order.created:55") == 3

    def redis_down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(events.cache, "incr", redis_down)
    # ...and with the cache away, from its own memory, never back from 1.
    assert [durable.increment("order.created:55") for _ in range(2)] == [3, 4]
    monkeypatch.undo()
    durable.forget("order.created:55")
    assert events.RedeliveryCounter(ttl_seconds=60).increment("order.created:55") == 1


def test_the_in_memory_redelivery_counts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    def redis_down(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(events.cache, "add", redis_down)
    counter = events.RedeliveryCounter(ttl_seconds=60, max_local=2)
    for n in range(5):
        counter.increment(f"order.created:{n}")
    assert len(counter) == 2
    # The newest keys are kept and go on counting; the oldest were forgotten and start again.
    assert counter.increment("order.created:4") == 2
    assert counter.increment("order.created:0") == 1
    assert events.RedeliveryCounter.max_local == 10_000


def publish_to_dlq(body: bytes, headers: dict[str, Any]) -> None:
    """A message straight into the DLQ, as anyone with access to the vhost could put one."""
    with amqp_channel() as channel:
        channel.basic_publish(
            exchange="",
            routing_key=get_config().events.dlq,
            body=body,
            properties=pika.BasicProperties(headers=headers, delivery_mode=pika.DeliveryMode.Persistent),
        )


def test_a_dead_letter_with_garbage_headers_is_recorded_and_the_consumer_keeps_consuming(recipient: None) -> None:
    config = get_config().events
    garbage = {
        "x-death": [{"count": "many", "reason": 7, "routing-keys": "not-a-list"}],
        "x-delivery-count": "NaN",
        "x-odd": {"nested": [b"\xff\xfe", None, 2**62]},
    }
    with start_consumer() as consumer:
        publish_to_dlq(b'{"order_id": 1', garbage)
        publish(order(70))
        wait_until(
            lambda: DeadLetter.objects.count() == 1 and Notification.objects.count() == 1,
            timeout=20,
            message="the dead letter recorded and the next event processed",
        )
        wait_until(lambda: queue_depth(config.dlq) == 0, timeout=10, message="the DLQ message acked")
        assert consumer.process.poll() is None, consumer.output()
    dead_letter = DeadLetter.objects.get()
    assert dead_letter.source == DeadLetterSource.EVENT
    assert dead_letter.reason == DeadLetterReason.POISON_MESSAGE
    assert dead_letter.attempts == 1
    assert dead_letter.raw_body == '{"order_id": 1'
    assert dead_letter.headers["x-odd"] == {"nested": ["\ufffd\ufffd", None, 2**62]}


def test_a_dead_letter_that_cannot_be_recorded_as_it_came_is_kept_with_its_body_and_acked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.db import DataError

    def refuse(**kwargs: Any) -> Any:
        raise DataError("value out of range for type integer")

    monkeypatch.setattr(events.transport, "dead_letter_ingest", refuse)
    errors = "notifications_dead_letter_ingest_errors_total"
    before = REGISTRY.get_sample_value(errors) or 0.0
    with consumer_thread():
        publish_to_dlq(b"poison body", {"x-death": [{"count": 2**62}]})
        dead_letter = wait_until(lambda: DeadLetter.objects.first(), timeout=20, message="kept with its body")
        wait_until(lambda: queue_depth(get_config().events.dlq) == 0, timeout=10, message="acked, not redelivered")
    assert dead_letter.raw_body == "poison body"
    assert dead_letter.headers == {}
    assert "DataError" in dead_letter.last_error and "headers dropped" in dead_letter.last_error
    assert REGISTRY.get_sample_value(errors) == before + 1


def test_the_consumer_reconnects_after_the_broker_drops_its_connection(recipient: None) -> None:
    vhost = pika.URLParameters(settings.BROKER_URL).virtual_host
    with start_consumer() as consumer:
        subprocess.run(
            ["rabbitmqctl", "-q", "close_all_connections", "--vhost", vhost, "--limit", "100", "test: broker restart"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        wait_until(lambda: "lost the broker connection" in consumer.output(), timeout=20, message="loss noticed")
        wait_until(lambda: consumer.output().count("event consumer connected") >= 2, timeout=20, message="reconnected")
        publish(order(47))
        wait_until(lambda: Notification.objects.filter(metadata__order_id=47).exists(), timeout=20, message="processed")


@pytest.mark.parametrize(("signum", "first"), [(signal.SIGTERM, 48), (signal.SIGINT, 58)], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_finishes_and_acks_the_message_in_hand_and_loses_nothing(
    recipient: None, signum: signal.Signals, first: int
) -> None:
    config = get_config().events
    held, queued = first, [first + 1, first + 2]
    # Hold the dedup claim of the first order in an open transaction: the consumer's insert waits on it,
    # so the signal arrives while that message is certainly in hand.
    with psycopg.connect(postgres_url()) as blocker:
        blocker.execute(
            "INSERT INTO notifications_processedevent (event_key, routing_key, created_at, expires_at)"
            " VALUES (%s, '', now(), now() + interval '1 day')",
            (f"order.created:{held}",),
        )
        consumer = start_consumer()
        try:
            for order_id in (held, *queued):
                publish(order(order_id))

            def consumer_waits_on_the_lock() -> bool:
                # From a connection of its own: pg_stat_activity is snapshotted once per transaction.
                with psycopg.connect(postgres_url(), autocommit=True) as probe:
                    row = probe.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%processedevent%'"
                    ).fetchone()
                return bool(row and row[0])

            wait_until(consumer_waits_on_the_lock, timeout=20, message="consumer blocked on the claim")
            consumer.signal(signum)
            wait_until(lambda: f"{signum.name} received" in consumer.output(), timeout=10)
            assert consumer.process.poll() is None
            blocker.rollback()
            assert consumer.process.wait(timeout=20) == 0, consumer.output()
        finally:
            consumer.stop()
    assert Notification.objects.filter(metadata__order_id=held).count() == 1
    assert "event consumer stopped" in consumer.output()
    # The two prefetched but unprocessed events went back to the queue.
    assert queue_depth(config.queue) == 2
    assert not Notification.objects.filter(metadata__order_id__in=queued).exists()


# --- Tracing ---------------------------------------------------------------------------------------


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(events.processing, "tracer", provider.get_tracer("test"))
    return exporter


@pytest.mark.parametrize("traceparent", [TRACEPARENT, TRACEPARENT.encode()], ids=["str", "bytes"])
def test_a_traceparent_header_becomes_a_span_link_not_a_parent(spans: InMemorySpanExporter, traceparent: str | bytes) -> None:
    body = json.dumps(order(51, email="t@example.com")).encode()
    result = events.event_process(body=body, routing_key="order.created", headers={"traceparent": traceparent})
    assert result.status == "success"
    (span,) = spans.get_finished_spans()
    assert span.name == "notification.process"
    assert span.kind == SpanKind.CONSUMER
    assert span.parent is None
    assert format(span.context.trace_id, "032x") != TRACE_ID
    assert [format(link.context.trace_id, "032x") for link in span.links] == [TRACE_ID]
    assert format(span.links[0].context.span_id, "016x") == "00f067aa0ba902b7"
    assert Notification.objects.get(pk=result.notification_id).trace_id == format(span.context.trace_id, "032x")


def test_without_a_traceparent_the_span_has_no_link(spans: InMemorySpanExporter) -> None:
    result = events.event_process(body=b"{bad", routing_key="order.created", headers={})
    assert result.status == "failed"
    (span,) = spans.get_finished_spans()
    assert span.name == "notification.process"
    assert list(span.links) == []
    assert span.attributes is not None and span.attributes["notification.outcome"] == "failed"


# --- The publisher command -------------------------------------------------------------------------


def test_publish_event_puts_a_persistent_order_created_on_the_exchange() -> None:
    call_command(
        "publish_event", "order.created", "--order-id", "52", "--project-id", "7", "--user-id", "u1", "--amount", "19.99"
    )
    with amqp_channel() as channel:
        method, properties, body = channel.basic_get(get_config().events.queue, auto_ack=True)
    assert method is not None and method.routing_key == "order.created"
    assert properties.delivery_mode == 2
    assert events.decode_order_created(body).key == "order.created:52"


def test_with_quorum_queues_the_consumer_declares_them_and_processes_events(recipient: None) -> None:
    names = {"EVENTS_QUEUE": "notifications.quorum", "EVENTS_DLX": "orders.quorum.dlq", "EVENTS_DLQ": "notifications.quorum.dlq"}
    vhost = pika.URLParameters(settings.BROKER_URL).virtual_host
    try:
        with start_consumer(EVENTS_QUORUM_QUEUES="true", **names):
            listed = subprocess.run(
                ["rabbitmqctl", "-q", "list_queues", "-p", vhost, "name", "type", "arguments"],
                check=True,
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            types = dict(line.split("\t")[:2] for line in listed.splitlines() if "\t" in line)
            assert types["notifications.quorum"] == "quorum"
            assert types["notifications.quorum.dlq"] == "quorum"
            publish(order(53))
            wait_until(lambda: Notification.objects.filter(metadata__order_id=53).exists(), timeout=20, message="processed")
    finally:
        with amqp_channel() as channel:
            channel.queue_delete(queue=names["EVENTS_QUEUE"])
            channel.queue_delete(queue=names["EVENTS_DLQ"])
            channel.exchange_delete(exchange=names["EVENTS_DLX"])


def test_a_broker_unreachable_at_start_is_retried_with_growing_delays_then_sigterm_stops_cleanly() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    with PlatformProcess("consume_events", env=consumer_env(BROKER_URL=url, EVENTS_RECONNECT_BASE_SECONDS="0.1")) as consumer:
        wait_until(lambda: consumer.output().count("cannot connect to the broker") >= 4, timeout=30, message="retries")
        consumer.signal(signal.SIGTERM)
        assert consumer.process.wait(timeout=20) == 0, consumer.output()
    delays = [float(d) for d in re.findall(r"retrying in ([0-9.]+)s", consumer.output())]
    assert delays[1] > delays[0] and delays[3] > delays[1], delays


def test_the_consumer_process_logs_json_lines_with_the_trace_and_notification_ids(recipient: None) -> None:
    with start_consumer(LOG_FORMAT="json") as consumer:
        publish(order(56, description="a private order description"), headers={"traceparent": TRACEPARENT})
        notification = wait_until(lambda: Notification.objects.filter(metadata__order_id=56).first(), timeout=20)

        def success_line() -> dict[str, Any] | None:
            lines = [json.loads(text) for text in consumer.output().splitlines() if text.startswith("{")]
            found = [line for line in lines if line.get("outcome") == "success"]
            return found[0] if found else None

        line = wait_until(success_line, timeout=10, message=f"a JSON success line; log:\n{consumer.output()[-3000:]}")
    assert line["notification_id"] == str(notification.pk)
    assert line["event_key"] == "order.created:56"
    # The consumer span's own trace (the producer's is a link), as stored on the notification.
    assert line["otelTraceID"] == notification.trace_id != TRACE_ID
    assert line["level"] == "INFO" and line["logger"] == "notifications.events"
    assert "a private order description" not in consumer.output()
    assert [text for text in consumer.output().splitlines() if text and not text.startswith("{")] == []
