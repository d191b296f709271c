"""Fault tests (issue #10): the platform under one fault at a time, on the real services, with real
worker, sweeper and gunicorn processes sending webhooks to a local receiver that records the id
of every notification it gets.

Each fault is isolated to this run, never a shared service stopped or reconfigured: a worker of
the test's own killed, a Redis of the test's own shut down, this run's database refusing
connections, a receiver that hangs, this run's vhost, a RabbitMQ node of the test's own. Each test
ends with the same verdict (tests/faults.py ``check_nothing_lost``): every accepted notification
reaches a final state, none is lost, and a notification sent twice was in flight at the fault.
Each prints its figures: accepted, delivered, duplicates, time to recover.

Faults that stop a shared service (RabbitMQ's stop_app, PostgreSQL itself) belong here too, marked
``exclusive`` as well as ``fault``: scripts/test.sh runs them alone, after the parallel phase, since
every pytest-xdist worker uses those services. ``fault`` tests run last (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import timedelta

import dramatiq
import pytest
from django.conf import settings
from django.db import connections
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from notifications.api.auth import ApiClientRateThrottle, FailedAuthenticationThrottle
from notifications.models import AttemptOutcome, DeadLetter, DeadLetterReason, DeliveryAttempt, Notification, Status

from .factories import make_api_client
from .fakes import Reply, override_notifications
from .faults import (
    HANG,
    FaultPlatform,
    RabbitmqNode,
    WebhookReceiver,
    accept_webhooks,
    accepted_again,
    assert_unavailable,
    check_nothing_lost,
    connections_with_heartbeat,
    ids_in,
    interrupted_ids,
    post_webhook,
    wait_until_final,
    worker_metric,
)
from .helpers import wait_until
from .live_servers import free_port
from .test_degraded import RedisServer, cache_at, most_in_any_second
from .test_delivery_pipeline import vhost
from .test_events import database_refusing_connections

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.fault]


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver()
    yield server
    server.stop()


@pytest.fixture
def platform(receiver: WebhookReceiver, transactional_db: None, broker: object) -> Iterator[FaultPlatform]:
    running = FaultPlatform(receiver)
    yield running
    running.stop()


def outcomes(notification_id: str) -> list[str]:
    return list(
        DeliveryAttempt.objects.filter(notification_id=notification_id).order_by("number").values_list("outcome", flat=True)
    )


# --- A worker process killed -------------------------------------------------------------------


def statements_running() -> int:
    """Statements running now in this test's database, other than this connection's (the sweeper's
    are short)."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def test_a_worker_killed_with_sigkill_mid_backlog_loses_nothing_and_sends_again_only_what_was_in_flight(
    platform: FaultPlatform, receiver: WebhookReceiver
) -> None:
    client, _ = make_api_client("acme")
    receiver.latency = 0.1  # every send is in flight a while, so the kill catches some
    doomed = platform.worker(threads=8)
    platform.sweeper()
    ids = accept_webhooks(client, [receiver.url("/hooks/orders")] * 300)
    platform.wait(
        lambda: len(receiver.receipts()) >= 100 and len(ids_in(ids, Status.SENDING)) >= 2,
        timeout=60,
        message="a third of the backlog sent, sends in flight",
    )

    platform.kill(doomed)
    killed_at = time.monotonic()
    # A statement the worker had sent still runs, and commits, in its backend after the kill (a
    # claim, a record): what was in flight is known once none is running.
    platform.wait(lambda: not statements_running(), timeout=30, message="the killed worker's last statements ended")
    in_flight = ids_in(ids, Status.SENDING)  # claimed by the killed worker, their outcome unknown
    platform.worker(threads=8)  # its replacement, as a supervisor would start it

    settled_at = wait_until_final(ids, timeout=60, platform=platform)
    figures = check_nothing_lost(
        "worker SIGKILL mid-backlog", ids=ids, receiver=receiver, in_flight=in_flight, recovery_seconds=settled_at - killed_at
    )
    assert figures.delivered == 300
    interrupted = DeliveryAttempt.objects.filter(notification__in=ids, outcome=AttemptOutcome.INTERRUPTED)
    # The sweeper recovered exactly the killed worker's sends, each once.
    assert sorted(str(pk) for pk in interrupted.values_list("notification_id", flat=True)) == sorted(in_flight)


# --- Redis shut down ---------------------------------------------------------------------------

# How much later than its rate-limit slot a send may reach the receiver on a busy 2-core machine.
ARRIVAL_JITTER_SECONDS = 0.25


def test_redis_shut_down_mid_backlog_pauses_sends_within_the_limit_while_the_api_accepts_and_all_are_delivered(
    platform: FaultPlatform, receiver: WebhookReceiver
) -> None:
    client, token = make_api_client("acme")
    redis = RedisServer()
    redis.start()
    metrics_port = free_port()
    try:
        platform.env.update(REDIS_URL=f"redis://127.0.0.1:{redis.port}/0", NOTIFICATIONS_RATE_LIMITS="webhook=20/s")
        worker = platform.worker(WORKER_METRICS_PORT=str(metrics_port), WORKER_METRICS_ADDR="127.0.0.1")
        platform.sweeper()
        url = receiver.url("/hooks/orders")
        ids = accept_webhooks(client, [url] * 100)
        platform.wait(lambda: len(receiver.receipts()) >= 30, timeout=30, message="the backlog is being sent")

        subprocess.run(["redis-cli", "-p", str(redis.port), "shutdown", "nosave"], capture_output=True, timeout=10)
        assert redis.process is not None
        redis.process.wait(timeout=10)
        down_at = time.monotonic()
        in_flight = ids_in(ids, Status.SENDING)

        # The API accepts meanwhile: its throttles fail open (a Redis refusing connections).
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        with override_settings(CACHES=cache_at(redis.port)):
            during = [
                api.post(
                    "/api/v1/notifications",
                    {"user_id": f"d{n}", "channel": "webhook", "to": url, "message": "during"},
                    format="json",
                )
                for n in range(20)
            ]
        assert [(r.status_code, r["Content-Type"]) for r in during] == [(202, "application/json")] * 20
        ids += [r.json()["id"] for r in during]

        # Sends pause: every message with notifications not yet sent comes to the worker and is put
        # back unsent (one refused reservation a message: the 20 singles accepted meanwhile and at
        # least one of the backlog's batch messages), twice, so the pause holds past the worker's
        # next try of Redis (degraded.RETRY_SECONDS).
        assert len(ids) - len(ids_in(ids, Status.DELIVERED)) > len(during)
        platform.wait(
            lambda: (
                worker_metric(metrics_port, "notifications_degraded_total", component="rate_limiter") >= 2 * (len(during) + 1)
            ),
            timeout=30,
            message="every unsent message put back twice while Redis is down",
        )
        redis.start()
        up_at = time.monotonic()
        # A slot is reserved at most a second ahead (ratelimit.wait_for_send_slot's max_wait).
        sent_while_down = [t for t in receiver.answered_at() if down_at + 1.5 < t < up_at]

        settled_at = wait_until_final(ids, timeout=60, platform=platform)
    finally:
        redis.kill()
        for outage in (ApiClientRateThrottle.outage, FailedAuthenticationThrottle.outage):
            outage.reset()
    sent = receiver.answered_at()
    first_after = min(t for t in sent if t > up_at) - up_at
    busiest = most_in_any_second(sent)
    figures = check_nothing_lost(
        "Redis shut down mid-backlog",
        ids=ids,
        receiver=receiver,
        in_flight=in_flight,
        recovery_seconds=settled_at - up_at,
        note=f"down {up_at - down_at:.1f} s with {len(sent_while_down)} sends, first send {first_after:.1f} s after "
        f"Redis was back, at most {busiest} sends in any 1 s (limit 20/s)",
    )
    assert figures.delivered == 120
    assert sent_while_down == []
    # The limiter spaces slots 50 ms apart (21 in a 1 s window at the most, one on each edge); a send
    # reaches the receiver after its claim's transaction and the connect, so a stall of the machine
    # bunches a few: allowed for as the slots of a window ARRIVAL_JITTER_SECONDS longer.
    assert busiest <= int(20 * (1 + ARRIVAL_JITTER_SECONDS)) + 1
    assert "sends are paused until it answers again" in worker.output()


# --- PostgreSQL refusing connections ------------------------------------------------------------


def test_with_the_database_refusing_connections_the_api_answers_503_and_everything_accepted_before_is_delivered(
    platform: FaultPlatform, receiver: WebhookReceiver
) -> None:
    client, token = make_api_client("acme")
    platform.env.update(NOTIFICATIONS_RATE_LIMITS="webhook=20/s")
    receiver.latency = 0.2  # sends are in flight a while, so the outage catches some
    worker = platform.worker()
    platform.sweeper()
    web = platform.web()
    url = receiver.url("/hooks/orders")
    # A backlog of 3 s at the limit, most of it accepted at once so it is still there at the outage.
    ids = accept_webhooks(client, [url] * 55)
    before = [post_webhook(web, token, url, n) for n in range(5)]
    assert [r.status_code for r in before] == [202] * 5
    ids += [r.json()["id"] for r in before]
    platform.wait(
        lambda: len(receiver.receipts()) >= 10 and ids_in(ids, Status.SENDING),
        timeout=30,
        message="the backlog is being sent, sends in flight",
    )

    with database_refusing_connections():
        in_flight = ids_in(ids, Status.SENDING)
        refused = [post_webhook(web, token, url, 100 + n) for n in range(5)]
        platform.wait(lambda: "OperationalError" in worker.output(), timeout=30, message="the worker met the outage")
    up_at = time.monotonic()

    assert_unavailable(refused)
    assert not Notification.objects.filter(user_id__in=[f"u{100 + n}" for n in range(5)]).exists()
    after = [accepted_again(platform, web, token, url, timeout=30)]
    after += [post_webhook(web, token, url, 300 + n) for n in range(4)]
    assert [r.status_code for r in after] == [202] * 5
    ids += [r.json()["id"] for r in after]

    settled_at = wait_until_final(ids, timeout=60, platform=platform)
    figures = check_nothing_lost(
        "PostgreSQL refusing connections",
        ids=ids,
        receiver=receiver,
        in_flight=in_flight,
        recovery_seconds=settled_at - up_at,
        note=f"{len(refused)} requests answered 503 during the outage",
    )
    assert figures.delivered == 65


# --- A provider that hangs ---------------------------------------------------------------------


def test_a_provider_that_never_answers_some_notifications_times_them_out_and_retries_while_the_others_flow(
    platform: FaultPlatform, receiver: WebhookReceiver
) -> None:
    client, _ = make_api_client("acme")
    platform.env.update(WEBHOOK_TIMEOUT_SECONDS="1", RETRY_MAX_ATTEMPTS="3", RETRY_BASE_SECONDS="0.2")
    hang_once = receiver.script("/hooks/hang-once", HANG, times=1)
    hang_always = receiver.script("/hooks/hang-always", HANG)
    # Queued first, so the worker takes them first: three of its eight threads wait on them.
    hung = accept_webhooks(client, [hang_once, hang_once, hang_always])
    others = accept_webhooks(client, [receiver.url("/hooks/orders")] * 40)
    platform.worker(threads=8)
    platform.sweeper()

    settled_at = wait_until_final(hung + others, timeout=60, platform=platform)
    hang_started = min(r.received_at for r in receiver.requests if r.reply_status == HANG.status)
    answered_during_hang = [
        r for r in receiver.requests if r.path == "/hooks/orders" and hang_started <= r.received_at <= hang_started + 1.0
    ]
    figures = check_nothing_lost(
        "provider hangs for some ids",
        ids=hung + others,
        receiver=receiver,
        in_flight=set(hung),
        recovery_seconds=settled_at - hang_started,
        note=f"{len(answered_during_hang)} of {len(others)} others delivered during the first 1 s timeout",
    )
    assert figures.delivered == 42
    assert len(answered_during_hang) >= 10  # not held up behind the hung sends
    assert all(outcomes(pk) == [AttemptOutcome.DELIVERED] for pk in others)

    for pk in hung[:2]:
        assert outcomes(pk) == [AttemptOutcome.TRANSIENT_ERROR, AttemptOutcome.DELIVERED]
    attempts = DeliveryAttempt.objects.filter(notification_id__in=hung, outcome=AttemptOutcome.TRANSIENT_ERROR)
    assert attempts.count() == 2 + 3
    for attempt in attempts:
        assert "deadline of 1s exceeded" in attempt.error_message
        assert attempt.duration_ms is not None and 900 <= attempt.duration_ms <= 3000, attempt.duration_ms
    assert Notification.objects.get(pk=hung[2]).status == Status.DEAD
    assert DeadLetter.objects.get(notification_id=hung[2]).reason == DeadLetterReason.RETRIES_EXHAUSTED


# --- A publisher connection closed for missed heartbeats ---------------------------------------


def test_a_publisher_connection_rabbitmq_closed_while_idle_past_its_heartbeat_does_not_lose_the_next_accept(
    platform: FaultPlatform, receiver: WebhookReceiver
) -> None:
    _, token = make_api_client("acme")
    platform.worker()
    platform.sweeper()
    # One process with one thread, so the second accept is published on the connection gone stale.
    web = platform.web(BROKER_URL=f"{settings.BROKER_URL}?heartbeat=2", WEB_CONCURRENCY="1", GUNICORN_CMD_ARGS="--threads 1")
    url = receiver.url("/hooks/orders")
    first = post_webhook(web, token, url, 1)
    assert first.status_code == 202
    wait_until_final([first.json()["id"]], timeout=30, platform=platform)
    assert connections_with_heartbeat(vhost(), 2) == 1  # the web's publisher connection

    idle_from = time.monotonic()
    platform.wait(
        lambda: connections_with_heartbeat(vhost(), 2) == 0,
        timeout=30,
        message="RabbitMQ closed the idle publisher connection (missed heartbeats)",
    )
    closed_after = time.monotonic() - idle_from
    accepted_at = time.monotonic()
    second = post_webhook(web, token, url, 2)
    assert (second.status_code, second.headers["Content-Type"]) == (202, "application/json"), second.content[:500]
    reconnected = connections_with_heartbeat(vhost(), 2)  # 1: the publish opened a fresh connection

    ids = [first.json()["id"], second.json()["id"]]
    settled_at = wait_until_final(ids, timeout=30, platform=platform)
    web_log = platform.servers[0].output()
    path = "the sweeper (the publish failed)" if "could not enqueue" in web_log else f"{reconnected} fresh connection"
    figures = check_nothing_lost(
        "publisher connection closed for missed heartbeats",
        ids=ids,
        receiver=receiver,
        in_flight=set(),
        recovery_seconds=settled_at - accepted_at,
        note=f"closed by RabbitMQ after {closed_after:.1f} s idle; the accept after it went out through {path}",
    )
    assert figures.delivered == 2


# --- A wait longer than RabbitMQ's consumer timeout --------------------------------------------

CONSUMER_TIMEOUT_MS = 3000
TIMED_OUT = "timed out waiting for delivery acknowledgement"  # the node's log line for each one


@pytest.fixture(scope="module")
def timeout_node() -> Iterator[RabbitmqNode]:
    """A RabbitMQ node with a 3 s consumer timeout, checked every 0.5 s instead of every minute.
    RabbitMQ 3.10 has no per-queue or per-vhost consumer timeout (3.11.15+), so the node is the
    tests' own; the shared node is never reconfigured."""
    node = RabbitmqNode(
        config=f"consumer_timeout = {CONSUMER_TIMEOUT_MS}", advanced_config="[{rabbit, [{channel_tick_interval, 500}]}]."
    )
    yield node
    node.stop()


def test_a_wait_longer_than_the_consumer_timeout_waits_in_postgresql_and_is_sent_on_time_with_no_channel_closed(
    platform: FaultPlatform, receiver: WebhookReceiver, timeout_node: RabbitmqNode
) -> None:
    client, _ = make_api_client("acme")
    # The retry cap above the provider's Retry-After, which it would otherwise cut short.
    platform.env.update(BROKER_URL=timeout_node.url, BROKER_DELAY_MAX_SECONDS="1", RETRY_CAP_SECONDS="10")
    worker = platform.worker()
    platform.sweeper()
    # The control: a consumer that holds a delivery unacked has its channel closed by this node.
    control = timeout_node.connect()
    try:
        held = control.channel()
        held.queue_declare("fault.control")
        held.basic_publish("", "fault.control", b"held, never acked")
        held.basic_consume("fault.control", lambda *delivery: None)

        unavailable_once = receiver.script("/hooks/busy-once", Reply(503, {"detail": "busy"}, {"Retry-After": "6"}), times=1)
        send_at = timezone.now() + timedelta(seconds=8)
        with override_notifications(BROKER_DELAY_MAX_SECONDS=1):
            [scheduled] = accept_webhooks(client, [receiver.url("/hooks/scheduled")], send_at=send_at)
            # Due in 2 s, then a 503 with Retry-After 6: a backoff twice the consumer timeout.
            [backed_off] = accept_webhooks(client, [unavailable_once], send_at=timezone.now() + timedelta(seconds=2))
        waiting = Notification.objects.filter(pk__in=[scheduled, backed_off], enqueued_at=None)
        assert waiting.count() == 2  # in PostgreSQL, no broker message

        def control_closed() -> bool:
            control.process_data_events(time_limit=0)
            return held.is_closed

        platform.wait(control_closed, timeout=20, message="the node closed the control consumer's channel")
        wait_until_final([scheduled, backed_off], timeout=40, platform=platform)
    finally:
        if control.is_open:
            control.close()

    delivered = Notification.objects.get(pk=scheduled)
    late = (delivered.delivered_at - send_at).total_seconds()
    first, second = DeliveryAttempt.objects.filter(notification_id=backed_off).order_by("number")
    backoff = (second.started_at - first.finished_at).total_seconds()
    figures = check_nothing_lost(
        "waits longer than the consumer timeout",
        ids=[scheduled, backed_off],
        receiver=receiver,
        in_flight=set(),
        recovery_seconds=max(late, backoff - 6),
        note=f"consumer timeout {CONSUMER_TIMEOUT_MS / 1000:g} s; send_at +8 s delivered {late:.1f} s after it; "
        f"Retry-After 6 s retried after {backoff:.1f} s",
    )
    assert figures.delivered == 2
    assert 0 <= late <= 4 and delivered.attempt_count == 1
    assert (first.outcome, second.outcome) == (AttemptOutcome.TRANSIENT_ERROR, AttemptOutcome.DELIVERED)
    assert 6 <= backoff <= 10
    # The control's channel was closed for its timeout, and no other: not the worker's.
    assert timeout_node.output().count(TIMED_OUT) == 1, timeout_node.output()[-3000:]
    assert "PRECONDITION_FAILED" not in worker.output() and "acknowledgement" not in worker.output()


def test_a_rate_limit_wait_longer_than_the_consumer_timeout_waits_in_postgresql_not_in_a_worker(
    platform: FaultPlatform, receiver: WebhookReceiver, timeout_node: RabbitmqNode
) -> None:
    client, _ = make_api_client("acme")
    timed_out_before = timeout_node.output().count(TIMED_OUT)
    # 10/m: the second send's slot is 6 s after the first's, twice the consumer timeout.
    platform.env.update(BROKER_URL=timeout_node.url, BROKER_DELAY_MAX_SECONDS="1", NOTIFICATIONS_RATE_LIMITS="webhook=10/m")
    worker = platform.worker()
    platform.sweeper()
    with override_notifications(BROKER_DELAY_MAX_SECONDS=1):
        # Due together in 2 s (the sweeper publishes them to this node, not to this run's vhost).
        ids = accept_webhooks(client, [receiver.url("/hooks/limited")] * 2, send_at=timezone.now() + timedelta(seconds=2))

    settled_at = wait_until_final(ids, timeout=40, platform=platform)
    first, second = receiver.answered_at()
    figures = check_nothing_lost(
        "a rate-limit wait longer than the consumer timeout",
        ids=ids,
        receiver=receiver,
        in_flight=set(),
        recovery_seconds=settled_at - first,
        note=f"limit 10/m (slots 6 s apart), consumer timeout {CONSUMER_TIMEOUT_MS / 1000:g} s; sends {second - first:.1f} s apart",
    )
    assert figures.delivered == 2
    assert second - first >= 6 - ARRIVAL_JITTER_SECONDS
    assert all(outcomes(pk) == [AttemptOutcome.DELIVERED] for pk in ids)  # a wait is not an attempt
    assert timeout_node.output().count(TIMED_OUT) == timed_out_before, timeout_node.output()[-3000:]
    assert "PRECONDITION_FAILED" not in worker.output() and "acknowledgement" not in worker.output()


# --- Shared services stopped: RabbitMQ's stop_app, PostgreSQL itself -----------------------------
# These stop the machine's own RabbitMQ and PostgreSQL (every vhost and database on them), so they
# are marked `exclusive`: scripts/test.sh runs them alone, after the parallel phase, and each
# restores its service in a `finally`.


def run_quietly(*command: str, timeout: float = 120) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def rabbitmq_stopped_for_a_while() -> Iterator[Callable[[], AbstractContextManager[None]]]:
    """``with outage():`` stops the app of the machine's RabbitMQ node (the Erlang VM stays up, as
    in an operator's restart of the app) and starts it again on leaving, whatever happened."""

    @contextlib.contextmanager
    def outage() -> Iterator[None]:
        run_quietly("rabbitmqctl", "-q", "stop_app")
        try:
            yield
        finally:
            run_quietly("rabbitmqctl", "-q", "start_app")
            run_quietly("rabbitmqctl", "-q", "await_startup", "--timeout", "60")

    try:
        yield outage
    finally:
        # This process's own broker connection died with the node; the next use opens a new one.
        with contextlib.suppress(Exception):
            del dramatiq.get_broker().connection


@pytest.mark.exclusive
def test_rabbitmq_stopped_mid_backlog_with_accepts_during_the_outage_loses_nothing(
    platform: FaultPlatform,
    receiver: WebhookReceiver,
    rabbitmq_stopped_for_a_while: Callable[[], AbstractContextManager[None]],
) -> None:
    client, token = make_api_client("acme")
    receiver.latency = 0.05  # a backlog that takes a few seconds, so the outage comes in its middle
    platform.worker()
    platform.sweeper()
    web = platform.web()
    url = receiver.url("/hooks/orders")
    ids = accept_webhooks(client, [url] * 200)
    platform.wait(lambda: len(receiver.receipts()) >= 40, timeout=60, message="the backlog is being sent")

    with rabbitmq_stopped_for_a_while():
        in_flight = ids_in(ids, Status.SENDING)
        during = [post_webhook(web, token, url, 1000 + n) for n in range(10)]
    up_at = time.monotonic()
    # The database is the outbox: the API accepts with the broker away; the sweeper publishes later.
    assert [r.status_code for r in during] == [202] * 10, [r.content[:300] for r in during]
    ids += [r.json()["id"] for r in during]

    settled_at = wait_until_final(ids, timeout=120, platform=platform)
    figures = check_nothing_lost(
        "RabbitMQ stop_app/start_app mid-backlog",
        ids=ids,
        receiver=receiver,
        in_flight=in_flight,
        recovery_seconds=settled_at - up_at,
        note="10 accepted during the outage",
    )
    assert figures.delivered == 210


@pytest.fixture
def postgresql_stopped_for_a_while() -> Iterator[Callable[[], AbstractContextManager[None]]]:
    """``with outage():`` stops the machine's PostgreSQL cluster (fast shutdown: every session is
    ended) and starts it again on leaving, whatever happened."""
    version = sorted(os.listdir("/etc/postgresql"))[0]

    def ready() -> bool:
        return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"], check=False).returncode == 0

    @contextlib.contextmanager
    def outage() -> Iterator[None]:
        run_quietly("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "stop", "-m", "fast")
        try:
            yield
        finally:
            if not ready():
                run_quietly("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start")
            wait_until(ready, timeout=60, message="PostgreSQL is back")
            # This process's connection died with the server; the next query opens a new one.
            connections.close_all()

    yield outage


@pytest.mark.exclusive
def test_postgresql_stopped_during_accepts_answers_503_and_everything_accepted_is_delivered_once_it_is_back(
    platform: FaultPlatform,
    receiver: WebhookReceiver,
    postgresql_stopped_for_a_while: Callable[[], AbstractContextManager[None]],
) -> None:
    client, token = make_api_client("acme")
    receiver.latency = 0.1
    platform.worker()
    platform.sweeper()
    web = platform.web()
    url = receiver.url("/hooks/orders")
    ids = accept_webhooks(client, [url] * 60)
    platform.wait(lambda: len(receiver.receipts()) >= 10, timeout=60, message="the backlog is being sent")

    in_flight = ids_in(ids, Status.SENDING)  # read before the stop: nothing can be read during it
    with postgresql_stopped_for_a_while():
        refused = [post_webhook(web, token, url, 100 + n) for n in range(5)]
    up_at = time.monotonic()
    assert_unavailable(refused)
    after = accepted_again(platform, web, token, url, timeout=60)
    ids.append(after.json()["id"])
    settled_at = wait_until_final(ids, timeout=120, platform=platform)
    # In flight at the fault: also every send claimed between the read above and the stop, whose
    # outcome could not be written; the sweeper marked each such attempt interrupted.
    in_flight |= interrupted_ids(ids)
    figures = check_nothing_lost(
        "PostgreSQL stopped during accepts",
        ids=ids,
        receiver=receiver,
        in_flight=in_flight,
        recovery_seconds=settled_at - up_at,
        note=f"{len(refused)} requests answered 503 during the outage",
    )
    assert figures.delivered == 61
    assert not Notification.objects.filter(user_id__in=[f"u{100 + n}" for n in range(5)]).exists()
