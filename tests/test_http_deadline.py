"""Outgoing HTTP keeps to one deadline (connect, send and the whole answer), and one client's slow
webhook endpoints hold at most WEBHOOK_CONCURRENCY_PER_CLIENT worker threads. The receivers are
local: a TricklingReceiver that answers a byte a second, and the FakeProviderServer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import dramatiq
import pytest
from django.db import connection
from django.utils import timezone

from notifications import services
from notifications.conf import get_config
from notifications.errors import TransientChannelError
from notifications.models import AttemptOutcome, DeliveryAttempt, Notification, Status, StatusEventState
from notifications.services.records import status_events

from .factories import accept_notification, make_api_client
from .fakes import (  # noqa: F401
    FakeProviderServer,
    TricklingReceiver,
    override_notifications,
    provider_server_fixture,
)
from .helpers import wait_until
from .test_channels import outgoing

DEADLINE = 2.0


@contextmanager
def cut_off_if_hung(receiver: TricklingReceiver, after: float) -> Iterator[None]:
    """Stop the receiver after ``after`` seconds if the call under test has not ended by then, so
    code without a deadline fails the test's timing instead of trickling on for a day."""
    timer = threading.Timer(after, receiver.stop)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@pytest.mark.django_db
@pytest.mark.parametrize("trickle_headers", [False, True], ids=["body", "headers"])
def test_a_webhook_receiver_trickling_its_answer_is_cut_at_the_deadline_and_the_attempt_is_transient(
    trickle_headers: bool,
) -> None:
    receiver = TricklingReceiver(trickle_headers=trickle_headers)
    client, _ = make_api_client()
    notification = accept_notification(client, channel="webhook", to=receiver.url("/hook"))
    try:
        with override_notifications(WEBHOOK_ALLOW_HOSTS=[receiver.host_port], WEBHOOK_TIMEOUT_SECONDS=DEADLINE):
            started = time.monotonic()
            with cut_off_if_hung(receiver, after=DEADLINE + 4):
                outcome = services.notification_deliver(notification_id=notification.pk)
            took = time.monotonic() - started
    finally:
        receiver.stop()

    assert took <= DEADLINE + 1, f"the post took {took:.2f}s"
    [post] = receiver.posts
    assert post.cut_at is not None and post.cut_at - post.started_at <= DEADLINE + 1
    assert post.bytes_sent >= 1  # it did answer, a byte at a time
    assert outcome.outcome == "retrying"
    attempt = DeliveryAttempt.objects.get(notification=notification)
    assert attempt.outcome == AttemptOutcome.TRANSIENT_ERROR
    assert f"deadline of {DEADLINE:g}s exceeded" in attempt.error_message
    assert Notification.objects.get(pk=notification.pk).status == Status.RETRYING


@pytest.mark.parametrize("channel", ["sms", "push"])
def test_a_provider_trickling_its_answer_is_cut_at_the_deadline_as_a_transient_timeout(
    channel: str, provider_server: FakeProviderServer
) -> None:
    from notifications.channels.providers import get_provider

    receiver = TricklingReceiver()
    try:
        with override_notifications(
            TWILIO_API_BASE=receiver.url(""), FCM_API_BASE=receiver.url(""), PROVIDER_TIMEOUT_SECONDS=DEADLINE
        ):
            started = time.monotonic()
            with cut_off_if_hung(receiver, after=DEADLINE + 4), pytest.raises(TransientChannelError) as caught:
                get_provider(channel).send(outgoing(channel, provider_server))
            took = time.monotonic() - started
    finally:
        receiver.stop()
    assert took <= DEADLINE + 1, f"the call took {took:.2f}s"
    assert caught.value.code == "timeout" and f"deadline of {DEADLINE:g}s exceeded" in str(caught.value)
    [post] = receiver.posts
    assert post.bytes_sent >= 1


def test_a_status_webhook_trickling_its_answer_is_cut_at_the_deadline_and_is_not_posted_twice_meanwhile(
    transactional_db: None,
) -> None:
    receiver = TricklingReceiver()
    client, _ = make_api_client()
    with override_notifications(WEBHOOK_ALLOW_HOSTS=[receiver.host_port], WEBHOOK_TIMEOUT_SECONDS=DEADLINE):
        services.api_client_set_status_webhook_url(client=client, url=receiver.url("/status"))
        notification = accept_notification(client)
        [event] = services.status_event_record(
            notifications=[Notification.objects.get(pk=notification.pk)], event_type="notification.bounced", status="delivered"
        )
        results: list[str] = []

        def post_in_a_worker_thread() -> None:
            try:
                results.append(services.status_event_deliver(event_id=event.pk))
            finally:
                connection.close()

        posting = threading.Thread(target=post_in_a_worker_thread)
        try:
            with cut_off_if_hung(receiver, after=DEADLINE + 4):
                started = time.monotonic()
                posting.start()
                wait_until(lambda: receiver.posts, timeout=DEADLINE, message="the post reached the receiver")
                # While it is in flight: a duplicate message finds it leased, and so does the sweeper
                # at any moment up to the deadline.
                assert services.status_event_deliver(event_id=event.pk) == "skipped"
                later = timezone.now() + timedelta(seconds=DEADLINE)
                assert status_events.status_event_sweep(now=later, grace_seconds=0) == 0
                posting.join(timeout=DEADLINE + 6)
                took = time.monotonic() - started
        finally:
            receiver.stop()

    assert took <= DEADLINE + 1, f"the post took {took:.2f}s"
    assert results == ["retrying"]
    assert len(receiver.posts) == 1
    event.refresh_from_db()
    assert event.state == StatusEventState.PENDING and event.attempt_count == 1
    assert f"deadline of {DEADLINE:g}s exceeded" in event.last_error


def test_one_clients_slow_webhooks_hold_at_most_its_share_of_threads_while_another_clients_webhook_delivers(
    transactional_db: None, broker: dramatiq.Broker, provider_server: FakeProviderServer
) -> None:
    slow = TricklingReceiver()
    limit, threads, posts = 2, 6, 6
    worker = dramatiq.Worker(broker, worker_threads=threads, worker_timeout=100)
    try:
        with override_notifications(
            WEBHOOK_ALLOW_HOSTS=[slow.host_port, provider_server.host_port],
            WEBHOOK_TIMEOUT_SECONDS=DEADLINE,
            WEBHOOK_CONCURRENCY_PER_CLIENT=limit,
            RETRY_MAX_ATTEMPTS=1,
        ):
            worker.start()
            noisy, _ = make_api_client()
            quiet, _ = make_api_client()
            hooks = [accept_notification(noisy, channel="webhook", to=slow.url(f"/hook/{n}")) for n in range(posts)]
            wait_until(lambda: slow.open >= limit, timeout=10, message="the slow client's posts began")

            accepted = time.monotonic()
            prompt = accept_notification(quiet, channel="webhook", to=provider_server.url("/hook"))
            wait_until(
                lambda: Notification.objects.get(pk=prompt.pk).status == Status.DELIVERED,
                timeout=10,
                message="the other client's webhook was delivered",
            )
            took = time.monotonic() - accepted
            # Without the limit the slow client's posts fill every thread until their deadline.
            assert took < DEADLINE / 2, f"the other client's webhook took {took:.2f}s"

            wait_until(
                lambda: Notification.objects.filter(pk__in=[n.pk for n in hooks], status=Status.DEAD).count() == posts,
                timeout=posts / limit * (DEADLINE + 2) + 10,
                message="every slow post was tried once",
            )
    finally:
        worker.stop()
        slow.stop()
    assert len(slow.posts) == posts
    assert slow.most_open <= limit, f"{slow.most_open} posts of one client were in flight at once"
    # Waiting for a turn is not an attempt: each slow notification has exactly the one it made.
    assert DeliveryAttempt.objects.filter(notification__in=[n.pk for n in hooks]).count() == posts


def test_a_sending_lease_not_longer_than_the_send_deadline_is_refused_naming_it() -> None:
    from django.core.exceptions import ImproperlyConfigured

    for deadline in ("WEBHOOK_TIMEOUT_SECONDS", "PROVIDER_TIMEOUT_SECONDS"):
        refused = pytest.raises(ImproperlyConfigured, match=f"SENDING_TIMEOUT_SECONDS .* must be longer than {deadline}")
        with override_notifications(**{deadline: 30.0, "SENDING_TIMEOUT_SECONDS": 30.0}), refused:
            get_config()
    with override_notifications(WEBHOOK_TIMEOUT_SECONDS=30.0, PROVIDER_TIMEOUT_SECONDS=10.0, SENDING_TIMEOUT_SECONDS=31.0):
        assert get_config().sending_timeout_seconds == 31.0
