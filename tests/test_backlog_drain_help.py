"""A message whose rows a backlog claim took has nothing of its own to send (issue #23): its thread
helps this process's threads with the backlog they are sending, then waits for their last chunks
rather than take the next message, so the last sends of a drain do not share the CPU with a
thousand messages that each find nothing. Real PostgreSQL and Redis, a local SMTP server."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection

from notifications import services
from notifications.models import Claim, Notification, Status
from notifications.services.delivery import backlog
from notifications.services.delivery import send as delivery

from .factories import make_api_client
from .fakes import LocalSmtpServer, override_notifications, smtp_server_fixture  # noqa: F401  (fixture)
from .helpers import wait_until
from .test_backlog_delivery import UNLIMITED, accept_singles, fresh_pace, no_publish, waited  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def nothing_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """No backlog chunk of an earlier test still counted as being sent in this process."""
    monkeypatch.setattr(backlog, "_sending", {})


class HeldFirstSend:
    """The provider call, its first send held until ``release`` (a send in flight)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.holding, self.release = threading.Event(), threading.Event()
        self._send = delivery.notification_send
        self._first = True
        monkeypatch.setattr(delivery, "notification_send", self)

    def __call__(self, claim: Claim) -> Any:
        if self._first:
            self._first = False
            self.holding.set()
            self.release.wait(timeout=60)
        return self._send(claim)


def in_thread(target: Any, results: dict[str, Any], name: str) -> threading.Thread:
    def run() -> None:
        try:
            results[name] = target()
        except BaseException as exc:
            results[name] = exc
        finally:
            results[f"{name} finished"] = time.monotonic()
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def delivered(ids: list[str]) -> int:
    return Notification.objects.filter(pk__in=ids, status=Status.DELIVERED).count()


def test_a_message_whose_row_a_claim_took_helps_with_the_backlog_then_waits_for_the_claims_sends(
    no_publish: list[str],  # noqa: F811
    smtp_server: LocalSmtpServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, _ = make_api_client()
    ids = accept_singles(client, 30, prefix="h")
    waited(ids)
    published_ms = time.time() * 1000 - 5000  # its message waited in the queue while the backlog grew
    monkeypatch.setattr(delivery, "_send_seconds", {"email": 0.001})
    monkeypatch.setattr(delivery, "CHUNK_SECONDS", 30.0)  # the helper's wait: bounded, never reached here
    monkeypatch.setattr(delivery, "DRAIN_SECONDS", 60.0)  # its drain: never cut short by a slow machine
    held = HeldFirstSend(monkeypatch)
    results: dict[str, Any] = {}
    with override_notifications(DELIVERY_BATCH_SIZE=10, RATE_LIMITS=UNLIMITED):
        first = in_thread(
            lambda: services.notifications_deliver(notification_ids=[ids[0]], backlog_priority="high"), results, "first"
        )
        assert held.holding.wait(timeout=30), results
        taken = [str(pk) for pk in Notification.objects.filter(pk__in=ids, status=Status.SENDING).values_list("pk", flat=True)]
        assert len(taken) == 10  # its own row and nine of the backlog, the first send in flight
        covered = next(pk for pk in taken if pk != ids[0])
        helper = in_thread(
            lambda: services.notifications_deliver(
                notification_ids=[covered], backlog_priority="high", published_ms=published_ms
            ),
            results,
            "helper",
        )
        # The covered message's thread sends the rest of the backlog while the first claim is in flight.
        rest = [pk for pk in ids if pk not in taken]
        wait_until(lambda: delivered(rest) == 20, timeout=30, message=f"the rest of the backlog sent by the helper: {results}")
        assert helper.is_alive(), "the helper took its next message while the first claim's sends were in flight"
        released_at = time.monotonic()
        held.release.set()
        first.join(timeout=30)
        helper.join(timeout=30)
    assert results["helper finished"] >= released_at
    assert {outcome.outcome for pk, outcome in results["helper"].items() if pk in rest} == {"delivered"}
    assert results["helper"][covered].outcome == "skipped"  # the first claim's to send
    assert delivered(ids) == 30 and len(smtp_server.received) == 30


def test_a_covered_message_with_no_backlog_being_sent_in_its_process_returns_at_once(
    no_publish: list[str],  # noqa: F811
    smtp_server: LocalSmtpServer,  # noqa: F811
) -> None:
    client, _ = make_api_client()
    ids = accept_singles(client, 3, prefix="r")
    waited(ids)
    assert backlog.backlog_sending_channel("high") is None
    published_ms = time.time() * 1000 - 5000
    with override_notifications(RATE_LIMITS=UNLIMITED):
        services.notifications_deliver(notification_ids=[ids[0]], backlog_priority="high")  # claims all three
        started = time.monotonic()
        outcomes = services.notifications_deliver(notification_ids=[ids[1]], backlog_priority="high", published_ms=published_ms)
    assert outcomes[ids[1]].outcome == "skipped"
    assert time.monotonic() - started < 1.0  # no wait: nothing of this process's is in flight
    assert len(smtp_server.received) == 3


def test_a_wait_ends_with_the_chunks_in_flight_when_it_began_not_with_those_begun_since() -> None:
    finished: list[float] = []
    first = backlog.backlog_sending("email", "high")
    first.__enter__()

    def wait() -> None:
        backlog.backlog_sent_wait("email", "high", timeout=10)
        finished.append(time.monotonic())

    waiter = threading.Thread(target=wait, daemon=True)
    started = time.monotonic()
    waiter.start()
    wait_until(lambda: len(backlog._sending_changed._waiters) == 1, timeout=10, message="the wait begun")  # type: ignore[attr-defined]
    # Under a steady backlog a chunk begins as another ends: a wait for "none in flight" would last
    # its whole bound at every message; this one ends with the chunk it found.
    with backlog.backlog_sending("email", "high"):
        first.__exit__(None, None, None)
        waiter.join(timeout=10)
        assert finished and finished[0] - started < 5
        assert backlog.backlog_sending_channel("high") == "email"
    assert backlog.backlog_sending_channel("high") is None
