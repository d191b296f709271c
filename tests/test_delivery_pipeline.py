"""The delivery pipeline with real worker and sweeper processes on RabbitMQ, Redis and PostgreSQL,
sending email through a local SMTP server (aiosmtpd) that the test scripts."""

from __future__ import annotations

import asyncio
import contextlib
import email
import io
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from email.message import Message
from urllib.parse import unquote, urlsplit

import dramatiq
import pika
import pika.exceptions
import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from notifications import services
from notifications.actors import deliver_notification
from notifications.conf import BULK_QUEUE, HIGH_QUEUE, get_config
from notifications.errors import PermanentChannelError, TransientChannelError
from notifications.models import AttemptOutcome, DeadLetter, DeadLetterReason, Notification, Resolution, Status
from notifications.services.delivery import outcomes as delivery_outcomes
from notifications.services.delivery import send as delivery

from .factories import accept_notification, make_api_client
from .helpers import ROOT, PlatformProcess, platform_env, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ALL_QUEUES = [f"{queue}{suffix}" for queue in (HIGH_QUEUE, BULK_QUEUE) for suffix in ("", ".DQ", ".XQ")]


# --- A scriptable local SMTP server --------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedMail:
    at: float
    recipients: tuple[str, ...]
    message: Message

    @property
    def notification_id(self) -> str:
        return str(self.message["X-Notification-Id"])


class SmtpServer:
    """aiosmtpd on 127.0.0.1:<free port>. Answers each DATA from a plan of replies (then 250), can
    hold the next DATA until released, and keeps what it accepted with the time it arrived."""

    def __init__(self) -> None:
        self.received: list[ReceivedMail] = []
        self.refused: list[str] = []
        self.stalled = threading.Event()
        self.release = threading.Event()
        self._plan: deque[str] = deque()
        self._always: str | None = None
        self._stall_next = False
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _serve(self) -> asyncio.Server:
        return await self._loop.create_server(lambda: SMTP(self, hostname="localhost", loop=self._loop), host="127.0.0.1", port=0)

    def answer_next(self, *replies: str) -> None:
        with self._lock:
            self._plan.extend(replies)

    def answer_always(self, reply: str) -> None:
        with self._lock:
            self._always = reply

    def stall_next(self) -> None:
        with self._lock:
            self._stall_next = True

    def mails_for(self, notification_id: object) -> list[ReceivedMail]:
        with self._lock:
            return [mail for mail in self.received if mail.notification_id == str(notification_id)]

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self._lock:
            stall, self._stall_next = self._stall_next, False
            reply = self._always or (self._plan.popleft() if self._plan else "250 OK")
        if stall:
            self.stalled.set()
            await self._loop.run_in_executor(None, self.release.wait, 30)
            return "451 4.3.0 released after a stall"
        if not reply.startswith("250"):
            with self._lock:
                self.refused.append(reply)
            return reply
        content = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        mail = ReceivedMail(at=time.time(), recipients=tuple(envelope.rcpt_tos), message=email.message_from_bytes(content))
        with self._lock:
            self.received.append(mail)
        return reply

    def close(self) -> None:
        self.release.set()

        def shut() -> None:
            # On the loop's own thread: asyncio is not thread-safe, and a Server closed from the
            # test's thread while the loop drops a connection raced it (TypeError in _wakeup).
            self._server.close()
            self._loop.stop()

        self._loop.call_soon_threadsafe(shut)
        self._thread.join(timeout=5)


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    server = SmtpServer()
    yield server
    server.close()


# --- Real platform processes ---------------------------------------------------------------------


def pipeline_env(smtp: SmtpServer, **overrides: str) -> dict[str, str]:
    """Environment of a worker/sweeper: email over SMTP to the test server, short retry timings."""
    values = {
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp.port),
        "RETRY_BASE_SECONDS": "0.1",
        "RETRY_CAP_SECONDS": "0.4",
        "RETRY_MAX_ATTEMPTS": "3",
        "SWEEPER_INTERVAL_SECONDS": "0.2",
        "QUEUED_TIMEOUT_SECONDS": "30",
        "SENDING_TIMEOUT_SECONDS": "60",
        "LOG_FORMAT": "text",
    }
    values.update(overrides)
    return platform_env(**values)


class Platform:
    def __init__(self, smtp: SmtpServer) -> None:
        self.smtp = smtp
        self.processes: list[PlatformProcess] = []

    def worker(self, **env: str) -> PlatformProcess:
        return self._start("rundramatiq", "--processes", "1", "--threads", "4", **env)

    def sweeper(self, **env: str) -> PlatformProcess:
        return self._start("run_sweeper", "--interval", "0.2", **env)

    def _start(self, *args: str, **env: str) -> PlatformProcess:
        process = PlatformProcess(*args, env=pipeline_env(self.smtp, **env))
        self.processes.append(process)
        return process

    def logs(self) -> str:
        return "\n".join(f"--- {' '.join(p.args)}\n{p.output()[-3000:]}" for p in self.processes)

    def stop(self) -> None:
        for process in self.processes:
            process.kill()


@pytest.fixture
def platform(smtp: SmtpServer, transactional_db: None, broker: dramatiq.Broker) -> Iterator[Platform]:
    running = Platform(smtp)
    yield running
    # Killed, not stopped: nothing of theirs is left to finish, and teardown stays fast.
    running.stop()


def wait_for_status(notification_id: object, *statuses: str, platform: Platform, timeout: float = 20) -> Notification:
    def reached() -> Notification | None:
        notification = Notification.objects.get(pk=notification_id)
        return notification if notification.status in statuses else None

    try:
        return wait_until(reached, timeout=timeout, interval=0.1, message=f"notification {notification_id} in {statuses}")
    except AssertionError:
        status = Notification.objects.get(pk=notification_id).status
        raise AssertionError(f"notification is {status}, not {statuses}; process logs:\n{platform.logs()}") from None


def outcomes(notification: Notification) -> list[str]:
    return list(notification.attempts.order_by("number").values_list("outcome", flat=True))


def vhost() -> str:
    return unquote(urlsplit(settings.BROKER_URL).path[1:])


def broker_messages() -> dict[str, int]:
    """Messages per queue of this run's vhost, ready *and* unacked (a delayed message a worker
    holds in memory counts)."""
    result = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", "-p", vhost(), "name", "messages", "--no-table-headers"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    counts = {}
    for line in result.stdout.splitlines():
        name, _, count = line.rpartition("\t")
        if name:
            counts[name] = int(count)
    return counts


# --- Delivery ------------------------------------------------------------------------------------


def test_email_accepted_by_the_api_is_delivered_by_a_worker_process_over_smtp(platform: Platform) -> None:
    client, token = make_api_client("acme")
    platform.worker()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    response = api.post(
        "/api/v1/notifications",
        {"user_id": "u1", "channel": "email", "to": "alice@example.com", "subject": "Your order", "message": "It shipped."},
        format="json",
    )

    assert response.status_code == 202, response.content
    notification = wait_for_status(response.json()["id"], Status.DELIVERED, platform=platform)
    [mail] = platform.smtp.mails_for(notification.pk)
    assert mail.recipients == ("alice@example.com",)
    assert mail.message["Subject"] == "Your order"
    assert mail.message["To"] == "alice@example.com"
    assert mail.message.get_payload(decode=True).decode().strip() == "It shipped."
    assert notification.attempt_count == 1
    assert outcomes(notification) == [AttemptOutcome.DELIVERED]
    assert notification.provider_message_id == mail.message["Message-ID"]


def test_a_transient_smtp_failure_is_retried_then_delivered(platform: Platform) -> None:
    client, _ = make_api_client()
    platform.smtp.answer_next("451 4.3.0 mailbox busy, try later")
    platform.worker()

    notification = accept_notification(client, to="bob@example.com", subject="Retry me")

    notification = wait_for_status(notification.pk, Status.DELIVERED, platform=platform)
    assert platform.smtp.refused == ["451 4.3.0 mailbox busy, try later"]
    assert len(platform.smtp.mails_for(notification.pk)) == 1
    assert notification.attempt_count == 2
    first, second = notification.attempts.order_by("number")
    assert (first.outcome, second.outcome) == (AttemptOutcome.TRANSIENT_ERROR, AttemptOutcome.DELIVERED)
    assert "451" in first.error_message
    assert not DeadLetter.objects.exists()


def test_a_permanent_smtp_rejection_fails_at_once_into_the_dead_letters(platform: Platform) -> None:
    client, _ = make_api_client()
    platform.smtp.answer_always("550 5.1.1 no such user")
    platform.worker()

    notification = accept_notification(client, to="nobody@example.com")

    notification = wait_for_status(notification.pk, Status.FAILED, platform=platform)
    assert notification.attempt_count == 1
    [attempt] = notification.attempts.all()
    assert attempt.outcome == AttemptOutcome.PERMANENT_ERROR
    assert "550" in attempt.error_message
    [dead_letter] = DeadLetter.objects.filter(notification=notification)
    assert dead_letter.reason == DeadLetterReason.PERMANENT_FAILURE
    assert dead_letter.attempts == 1
    assert "550" in dead_letter.last_error
    assert platform.smtp.refused == ["550 5.1.1 no such user"]


def test_when_retries_run_out_the_notification_is_dead_with_every_attempt_recorded(platform: Platform) -> None:
    client, _ = make_api_client()
    platform.smtp.answer_always("451 4.4.1 still not reachable")
    platform.worker(RETRY_MAX_ATTEMPTS="3")

    notification = accept_notification(client, to="carol@example.com")

    notification = wait_for_status(notification.pk, Status.DEAD, platform=platform)
    assert notification.attempt_count == 3
    attempts = list(notification.attempts.order_by("number"))
    assert [a.number for a in attempts] == [1, 2, 3]
    assert all(a.outcome == AttemptOutcome.TRANSIENT_ERROR and "451" in a.error_message for a in attempts)
    assert all(a.finished_at is not None for a in attempts)
    [dead_letter] = DeadLetter.objects.filter(notification=notification)
    assert dead_letter.reason == DeadLetterReason.RETRIES_EXHAUSTED
    assert dead_letter.attempts == 3
    assert "451" in dead_letter.last_error
    assert len(platform.smtp.refused) == 3


# --- Rate limits ---------------------------------------------------------------------------------


def test_rate_limited_sends_wait_without_counting_as_attempts_and_keep_to_the_limit(platform: Platform) -> None:
    client, _ = make_api_client()
    platform.worker(NOTIFICATIONS_RATE_LIMITS="email=2/s")
    platform.sweeper(NOTIFICATIONS_RATE_LIMITS="email=2/s")

    notifications = [accept_notification(client, to=f"user{i}@example.com") for i in range(6)]

    for notification in notifications:
        delivered = wait_for_status(notification.pk, Status.DELIVERED, platform=platform, timeout=30)
        assert delivered.attempt_count == 1
        assert outcomes(delivered) == [AttemptOutcome.DELIVERED]
    arrivals = sorted(mail.at for mail in platform.smtp.received)
    assert len(arrivals) == 6
    # 2/s: any three consecutive sends span at least 1 s, so no 1 s window holds more than two.
    # 100 ms is allowed for the jitter between a slot and the SMTP server seeing the message.
    spans = [later - earlier for earlier, later in zip(arrivals, arrivals[2:], strict=False)]
    assert min(spans) >= 0.9, spans
    assert arrivals[-1] - arrivals[0] >= 2.4


# --- Duplicates, broker outages, crashes ---------------------------------------------------------


def test_duplicate_broker_messages_for_one_notification_send_it_once(platform: Platform) -> None:
    client, _ = make_api_client()
    notification = accept_notification(client, to="dave@example.com")
    # Two more messages for the same notification beside the one the accept enqueued; they wait
    # in the queue together, so the worker's four threads take them at the same moment.
    deliver_notification.send(str(notification.pk))
    deliver_notification.send(str(notification.pk))
    platform.worker()

    notification = wait_for_status(notification.pk, Status.DELIVERED, platform=platform)
    wait_until(lambda: not any(broker_messages().values()), timeout=20, interval=0.2, message="queues drained")

    assert len(platform.smtp.mails_for(notification.pk)) == 1
    assert notification.attempt_count == 1
    assert outcomes(notification) == [AttemptOutcome.DELIVERED]


ACCEPT_THROUGH_THE_API = """
from rest_framework.test import APIClient
api = APIClient()
api.credentials(HTTP_AUTHORIZATION="Bearer {token}")
response = api.post("/api/v1/notifications", {{"user_id": "u1", "to": "erin@example.com", "message": "m"}}, format="json")
print("RESULT", response.status_code, response.json()["id"])
"""


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A port that refuses connections for as long as the block runs (bound, never listening)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def test_when_the_broker_is_down_at_accept_the_api_answers_202_and_the_sweeper_delivers_later(
    platform: Platform,
) -> None:
    _, token = make_api_client("acme")
    with refusing_port() as port:
        accepted = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "shell", "-c", ACCEPT_THROUGH_THE_API.format(token=token)],
            cwd=ROOT,
            env=platform_env(BROKER_URL=f"amqp://guest:guest@127.0.0.1:{port}/{vhost()}", LOG_FORMAT="text"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    result = [line for line in accepted.stdout.splitlines() if line.startswith("RESULT ")]
    assert result, accepted.stdout + accepted.stderr
    _, status_code, notification_id = result[0].split()
    assert status_code == "202"
    assert "could not enqueue" in accepted.stderr and "the sweeper will retry" in accepted.stderr
    notification = Notification.objects.get(pk=notification_id)
    # Written queued in its accept transaction; the failed publish cleared enqueued_at, which is
    # what the sweeper looks for.
    assert (notification.status, notification.enqueued_at) == (Status.QUEUED, None)
    assert not any(broker_messages().values())

    platform.worker()
    platform.sweeper()

    notification = wait_for_status(notification_id, Status.DELIVERED, platform=platform)
    assert len(platform.smtp.mails_for(notification_id)) == 1
    assert notification.attempt_count == 1


def test_a_worker_killed_mid_send_loses_nothing_and_the_attempt_is_recorded_interrupted(platform: Platform) -> None:
    client, _ = make_api_client()
    platform.smtp.stall_next()
    doomed = platform.worker()
    notification = accept_notification(client, to="frank@example.com", subject="Survives a crash")
    wait_until(platform.smtp.stalled.is_set, timeout=20, message="the worker reached DATA")
    assert Notification.objects.get(pk=notification.pk).status == Status.SENDING

    doomed.kill()
    platform.smtp.release.set()
    # A lease that short needs send deadlines shorter still (conf.py refuses it otherwise).
    short = {"SENDING_TIMEOUT_SECONDS": "1", "WEBHOOK_TIMEOUT_SECONDS": "0.5", "PROVIDER_TIMEOUT_SECONDS": "0.5"}
    platform.worker(**short)
    platform.sweeper(**short)

    notification = wait_for_status(notification.pk, Status.DELIVERED, platform=platform, timeout=30)
    assert outcomes(notification) == [AttemptOutcome.INTERRUPTED, AttemptOutcome.DELIVERED]
    assert "worker stopped" in notification.attempts.get(number=1).error_message
    [mail] = platform.smtp.mails_for(notification.pk)
    assert mail.message["Subject"] == "Survives a crash"


def test_a_send_that_ends_after_the_sweeper_recovered_it_leaves_the_new_claim_alone(broker: dramatiq.Broker) -> None:
    client, _ = make_api_client()
    notification = accept_notification(client, to="kim@example.com")
    [stale] = delivery._notifications_claim([str(notification.pk)])
    # That worker froze past SENDING_TIMEOUT_SECONDS: the sweeper recovers the send and another
    # worker claims it again.
    later = timezone.now() + timedelta(seconds=get_config().sending_timeout_seconds + 1)
    assert services.notification_sweep(now=later).recovered == 1
    [fresh] = delivery._notifications_claim([str(notification.pk)])
    assert fresh.attempt.number == 2

    # Now the frozen send comes back with its answer; whatever it says, the new claim stands.
    late_transient = delivery_outcomes.record_transient_failure(stale, TransientChannelError("451 late"), time.monotonic())
    current = Notification.objects.get(pk=notification.pk)
    assert (late_transient.outcome, current.status, current.claimed_at) == ("skipped", Status.SENDING, fresh.attempt.started_at)
    late_permanent = delivery_outcomes.record_permanent_failure(stale, PermanentChannelError("550 late"), time.monotonic())
    current = Notification.objects.get(pk=notification.pk)
    assert current.status == Status.SENDING and current.last_error != "550 late"
    assert late_permanent.outcome == "failed" and not DeadLetter.objects.exists()


# --- Scheduling ----------------------------------------------------------------------------------


def test_send_at_in_the_future_is_sent_no_earlier_and_within_seconds_after(platform: Platform) -> None:
    client, _ = make_api_client()
    platform.worker()
    platform.sweeper()
    warm_up = accept_notification(client, to="warm@example.com")
    wait_for_status(warm_up.pk, Status.DELIVERED, platform=platform)

    send_at = timezone.now() + timedelta(seconds=2)
    notification = accept_notification(client, to="grace@example.com", send_at=send_at)

    wait_for_status(notification.pk, Status.DELIVERED, platform=platform)
    [mail] = platform.smtp.mails_for(notification.pk)
    assert send_at.timestamp() <= mail.at <= send_at.timestamp() + 3


def test_a_far_future_send_at_waits_in_postgresql_with_no_broker_message(broker: dramatiq.Broker) -> None:
    client, _ = make_api_client()

    notification = accept_notification(client, to="heidi@example.com", send_at=timezone.now() + timedelta(hours=6))
    report = services.notification_sweep()

    notification.refresh_from_db()
    assert (notification.status, notification.enqueued_at) == (Status.ACCEPTED, None)
    assert report.total == 0
    assert [broker.get_queue_message_counts(queue) for queue in (HIGH_QUEUE, BULK_QUEUE)] == [(0, 0, 0), (0, 0, 0)]
    assert not any(broker_messages().values())


# --- Redrive -------------------------------------------------------------------------------------


def test_redrive_command_delivers_a_dead_letter_records_who_and_when_and_refuses_a_second_time(
    platform: Platform,
) -> None:
    client, _ = make_api_client()
    support = get_user_model().objects.create_user("support", password="x-secret-x")
    platform.smtp.answer_next("550 5.7.1 rejected for now")
    platform.worker()
    notification = accept_notification(client, to="ivan@example.com")
    wait_for_status(notification.pk, Status.FAILED, platform=platform)
    dead_letter = DeadLetter.objects.get(notification=notification)

    before = timezone.now()
    first, second = io.StringIO(), io.StringIO()
    call_command("redrive", str(dead_letter.pk), "--user", "support", stdout=first)

    notification = wait_for_status(notification.pk, Status.DELIVERED, platform=platform)
    assert f"dead letter {dead_letter.pk}: re-enqueued" in first.getvalue()
    assert "1 retried, 0 skipped" in first.getvalue()
    dead_letter.refresh_from_db()
    assert dead_letter.resolution == Resolution.RETRIED
    assert dead_letter.resolved_by == support
    assert dead_letter.resolved_at is not None and dead_letter.resolved_at >= before
    assert notification.attempt_count == 1
    assert outcomes(notification) == [AttemptOutcome.PERMANENT_ERROR, AttemptOutcome.DELIVERED]
    assert len(platform.smtp.mails_for(notification.pk)) == 1

    call_command("redrive", str(dead_letter.pk), "--user", "support", stdout=second)
    assert "skipped (already retried)" in second.getvalue()
    assert "0 retried, 1 skipped" in second.getvalue()


def test_a_redriven_dead_letter_gets_the_whole_retry_budget_again(platform: Platform) -> None:
    client, _ = make_api_client()
    busy = "451 4.3.0 mailbox busy"
    platform.smtp.answer_next(busy, busy, busy)
    platform.worker(RETRY_MAX_ATTEMPTS="3")
    notification = accept_notification(client, to="judy@example.com")
    wait_for_status(notification.pk, Status.DEAD, platform=platform)
    first_letter = DeadLetter.objects.get(notification=notification)
    assert first_letter.attempts == 3

    # Two more refusals, then accepted: only a budget reset to 3 lets the third try happen.
    platform.smtp.answer_next(busy, busy)
    result = services.dead_letter_redrive(dead_letter=first_letter, by=None)

    assert result.done, result.detail
    notification = wait_for_status(notification.pk, Status.DELIVERED, platform=platform)
    assert notification.attempt_count == 3
    assert outcomes(notification) == [AttemptOutcome.TRANSIENT_ERROR] * 5 + [AttemptOutcome.DELIVERED]
    assert list(notification.attempts.order_by("number").values_list("number", flat=True)) == [1, 2, 3, 4, 5, 6]
    assert len(platform.smtp.refused) == 5 and len(platform.smtp.mails_for(notification.pk)) == 1
    assert list(DeadLetter.objects.filter(notification=notification).values_list("pk", flat=True)) == [first_letter.pk]


# --- The broker's own guarantees -----------------------------------------------------------------


def _pika_channel() -> Callable[[], pika.adapters.blocking_connection.BlockingChannel]:
    connection = pika.BlockingConnection(pika.URLParameters(settings.BROKER_URL))

    def channel() -> pika.adapters.blocking_connection.BlockingChannel:
        return connection.channel()

    channel.connection = connection  # type: ignore[attr-defined]
    return channel


def test_the_broker_confirms_publishes_and_keeps_queues_durable_and_messages_persistent(broker: dramatiq.Broker) -> None:
    assert broker.confirm_delivery is True
    for queue in (HIGH_QUEUE, BULK_QUEUE):
        broker.get_queue_message_counts(queue)  # declares the queue, its .DQ and .XQ as dramatiq does
    open_channel = _pika_channel()
    try:
        for queue in ALL_QUEUES:
            # RabbitMQ refuses to redeclare a durable queue as transient: proof the queue is durable.
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
                open_channel().queue_declare(queue=queue, durable=False)
            assert refused.value.reply_code == 406, queue

        # With publisher confirms, a publish that no queue took is noticed (basic.return) and
        # redone after redeclaring; without them this message would vanish silently.
        open_channel().queue_delete(queue=HIGH_QUEUE)
        notification_id = str(uuid.uuid4())
        deliver_notification.send(notification_id)
        deliver_notification.send_with_options(args=(notification_id,), delay=60_000)

        channel = open_channel()
        for queue in (HIGH_QUEUE, f"{HIGH_QUEUE}.DQ"):
            method, properties, body = channel.basic_get(queue=queue, auto_ack=True)
            assert method is not None, f"no message on {queue}"
            assert properties.delivery_mode == 2
            assert notification_id.encode() in body
    finally:
        open_channel.connection.close()  # type: ignore[attr-defined]
