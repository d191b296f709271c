"""Prometheus metrics: what /metrics on the web process shows after real deliveries, the gauges
read from RabbitMQ and PostgreSQL at scrape time, and the worker and consumer exporters."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import dramatiq
import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from notifications import services
from notifications.actors import deliver_notification
from notifications.conf import HIGH_QUEUE, get_config
from notifications.models import DeadLetter, Notification, Status

from .factories import accept_notification
from .helpers import PlatformProcess, wait_until
from .test_delivery_pipeline import SmtpServer, pipeline_env
from .test_events import consumer_thread, order, publish, recipient, start_consumer, topology  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = Client().get("/metrics")
    assert response.status_code == 200
    return parse(response.content.decode())


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    server = SmtpServer()
    with override_settings(
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend", EMAIL_HOST="127.0.0.1", EMAIL_PORT=server.port
    ):
        yield server
    server.close()


def wait_for(notification_id: object, *statuses: str) -> Notification:
    return wait_until(
        lambda: Notification.objects.filter(pk=notification_id, status__in=statuses).first(),
        timeout=15,
        message=f"notification {notification_id} in {statuses}",
    )


def test_a_delivery_a_permanent_and_a_transient_failure_are_counted_with_their_labels(
    api: APIClient, smtp: SmtpServer, worker: dramatiq.Worker
) -> None:
    before = scrape()
    smtp.answer_next("250 OK")
    response = api.post("/api/v1/notifications", {"user_id": "u1", "to": "ann@example.com", "message": "hi"}, format="json")
    assert response.status_code == 202
    wait_for(response.json()["id"], Status.DELIVERED)

    smtp.answer_next("550 5.1.1 no such user")
    response = api.post("/api/v1/notifications", {"user_id": "u2", "to": "bob@example.com", "message": "hi"}, format="json")
    wait_for(response.json()["id"], Status.FAILED)

    with override_settings(NOTIFICATIONS={**_notifications_settings(), "RETRY_BASE_SECONDS": 0.05, "RETRY_CAP_SECONDS": 0.1}):
        smtp.answer_next("451 4.3.0 try later")
        response = api.post("/api/v1/notifications", {"user_id": "u3", "to": "cy@example.com", "message": "hi"}, format="json")
        wait_for(response.json()["id"], Status.DELIVERED)

    after = scrape()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("notifications_sent_total", channel="email", status="delivered", mode="live") == 2
    assert delta("notifications_sent_total", channel="email", status="permanent", mode="live") == 1
    assert delta("notifications_sent_total", channel="email", status="transient", mode="live") == 1
    assert delta("notification_retries_total", channel="email", reason="transient", mode="live") == 1
    assert delta("notification_delivery_seconds_count", channel="email", mode="live") == 4
    assert delta("notification_delivery_seconds_bucket", channel="email", le="+Inf", mode="live") == 4
    assert delta("notification_end_to_end_seconds_count", channel="email", mode="live") == 2
    assert delta("notification_end_to_end_seconds_sum", channel="email", mode="live") > 0
    # The permanent failure is a dead letter, counted from the database when scraped.
    assert value(after, "dlq_size") == 1


def _notifications_settings() -> dict[str, object]:
    from django.conf import settings

    return dict(settings.NOTIFICATIONS)


def test_retries_running_out_count_the_notification_as_dead(client_and_token: tuple[object, str], smtp: SmtpServer) -> None:
    client, _ = client_and_token
    smtp.answer_always("451 4.3.0 try later")
    with override_settings(NOTIFICATIONS={**_notifications_settings(), "RETRY_MAX_ATTEMPTS": 1}):
        before = scrape()
        notification = accept_notification(client)  # type: ignore[arg-type]
        outcome = services.notification_deliver(notification_id=notification.pk)
        after = scrape()
    assert outcome.outcome == "dead"
    assert (
        value(after, "notifications_sent_total", channel="email", status="dead", mode="live")
        - value(before, "notifications_sent_total", channel="email", status="dead", mode="live")
        == 1
    )
    assert value(after, "dlq_size") == 1


def test_a_send_without_a_free_rate_limit_slot_counts_as_rate_limited(client_and_token: tuple[object, str]) -> None:
    client, _ = client_and_token
    notification = accept_notification(client)  # type: ignore[arg-type]
    before = scrape()
    with override_settings(NOTIFICATIONS={**_notifications_settings(), "RATE_LIMITS": "email=1/h"}):
        services.notification_deliver(notification_id=notification.pk)
        second = accept_notification(client)  # type: ignore[arg-type]
        # An hour away, past BROKER_DELAY_MAX_SECONDS: held in PostgreSQL, and counted all the same.
        assert services.notification_deliver(notification_id=second.pk).outcome == "held"
    after = scrape()
    assert (
        value(after, "notification_rate_limited_total", channel="email")
        - value(before, "notification_rate_limited_total", channel="email")
        == 1
    )


def test_queue_sizes_are_read_from_rabbitmq_at_scrape_time(broker: dramatiq.Broker) -> None:
    assert value(scrape(), "notification_queue_size", queue=HIGH_QUEUE) == 0
    for _ in range(3):
        deliver_notification.send("00000000-0000-0000-0000-000000000000")
    samples = wait_until(lambda: (s := scrape()) and value(s, "notification_queue_size", queue=HIGH_QUEUE) == 3 and s)
    assert ("notification_queue_size", (("queue", f"{HIGH_QUEUE}.DQ"),)) in samples
    broker.flush_all()
    assert value(scrape(), "notification_queue_size", queue=HIGH_QUEUE) == 0


def test_dlq_size_counts_only_unresolved_dead_letters_when_scraped(db: None) -> None:
    assert value(scrape(), "dlq_size") == 0
    letters = [DeadLetter.objects.create(channel="sms", reason="permanent_failure") for _ in range(2)]
    assert value(scrape(), "dlq_size") == 2
    services.dead_letter_discard(dead_letter=letters[0], by=None)
    assert value(scrape(), "dlq_size") == 1


def test_a_broker_that_is_down_leaves_the_queue_gauge_out_but_the_scrape_still_answers(db: None) -> None:
    with override_settings(BROKER_URL="amqp://guest:guest@127.0.0.1:1/%2F"):
        samples = scrape()
    assert not [key for key in samples if key[0] == "notification_queue_size"]
    assert ("dlq_size", ()) in samples
    assert value(samples, "dlq_size") == 0


@pytest.mark.usefixtures("recipient")
def test_a_consumed_and_a_duplicate_event_are_counted_on_metrics() -> None:
    before = scrape()
    for _ in range(2):
        publish(order(4711))
    with consumer_thread():
        wait_until(
            lambda: (
                value(scrape(), "notifications_processed_total", status="duplicate")
                > value(before, "notifications_processed_total", status="duplicate")
            )
        )
    after = scrape()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("notifications_processed_total", status="success") == 1
    assert delta("notifications_processed_total", status="duplicate") == 1
    assert delta("notifications_processed_total", status="failed") == 0
    assert delta("notifications_processing_seconds_count") == 2
    assert value(after, "notification_queue_size", queue=get_config().events.queue) == 0


@pytest.mark.usefixtures("recipient")
def test_the_consume_events_process_serves_its_metrics_on_the_consumer_port() -> None:
    port = free_port()
    consumer = start_consumer(CONSUMER_METRICS_PORT=str(port))
    try:
        for _ in range(3):
            publish(order(4712))

        def consumer_samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            try:
                samples = parse(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode())
            except OSError:
                return None
            return samples if value(samples, "notifications_processed_total", status="duplicate") == 2 else None

        samples = wait_until(
            consumer_samples, timeout=20, message=f"consumer metrics on :{port}; log:\n{consumer.output()[-3000:]}"
        )
        assert value(samples, "notifications_processed_total", status="success") == 1
        assert value(samples, "notifications_processing_seconds_count") == 3
    finally:
        consumer.kill()


def test_metrics_of_every_worker_process_are_served_on_the_worker_port(
    client_and_token: tuple[object, str], broker: dramatiq.Broker
) -> None:
    smtp = SmtpServer()
    port = free_port()
    client, _ = client_and_token
    worker = PlatformProcess(
        "rundramatiq",
        "--processes",
        "2",
        "--threads",
        "2",
        env=pipeline_env(smtp, WORKER_METRICS_PORT=str(port)),  # type: ignore[arg-type]
    )
    try:
        notifications = [accept_notification(client) for _ in range(4)]  # type: ignore[arg-type]
        for notification in notifications:
            wait_for(notification.pk, Status.DELIVERED)

        def worker_samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                return None
            samples = parse(body)
            return (
                samples
                if value(samples, "notifications_sent_total", channel="email", status="delivered", mode="live") == 4
                else None
            )

        samples = wait_until(worker_samples, timeout=20, message=f"worker metrics on :{port}; log:\n{worker.output()[-3000:]}")
        assert value(samples, "notification_delivery_seconds_count", channel="email", mode="live") == 4
        assert value(samples, "notification_end_to_end_seconds_count", channel="email", mode="live") == 4
        assert len(smtp.received) == 4
    finally:
        worker.kill()
        smtp.close()


def test_the_web_tier_runs_a_process_per_core_and_its_metrics_sum_every_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os

    import requests

    from .live_servers import gunicorn_server

    _, token = services.api_client_create(name="multi-web")
    with gunicorn_server(WEB_CONCURRENCY="2", WEB_METRICS_DIR=str(tmp_path)) as server:
        wait_until(lambda: server.output().count("Booting worker") >= 2, timeout=30, message="two workers booted")
        session = requests.Session()
        for n in range(40):
            # A fresh connection each time, so the master's two workers both take some.
            response = requests.post(
                server.url("/api/v1/notifications"),
                json={"user_id": f"u{n}", "to": f"u{n}@example.com", "message": "hi"},
                headers={"Authorization": f"Bearer {token}", "Connection": "close"},
                timeout=10,
            )
            assert response.status_code == 202, response.text
        files = {name.split("_")[-1] for name in os.listdir(tmp_path) if name.endswith(".db")}
        assert len(files) >= 2, files  # per-process files of both workers
        for _ in range(4):  # whichever worker answers the scrape, it reports all 40
            samples = parse(session.get(server.url("/metrics"), headers={"Connection": "close"}, timeout=10).text)
            accepted = sum(
                v
                for (name, labels), v in samples.items()
                if name == "django_http_responses_total_by_status_view_method_total"
                and ("status", "202") in labels
                and ("method", "POST") in labels
            )
            assert accepted == 40, accepted
