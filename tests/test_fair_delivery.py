"""Fair delivery between clients (issue #22): one client's backlog on a channel's shared rate
limit never has the channel booked far ahead, so another client's single notification is sent
within a few slots of its accept while the backlog is still draining."""

from __future__ import annotations

import time
from collections.abc import Iterator

import dramatiq
import pytest

from notifications import services
from notifications.models import ApiClient, Notification, Priority, Status

from .factories import make_api_client
from .fakes import override_notifications
from .faults import WebhookReceiver
from .helpers import wait_until

BACKLOG = 100
RATE = 20  # webhook sends a second, shared by every client (the default limit)
HOLD_SECONDS = 0.1  # RATE_LIMIT_HOLD_SECONDS: 2 slots at this rate


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    server = WebhookReceiver()
    yield server
    server.stop()


def _accept_backlog(client: ApiClient, url: str) -> list[str]:
    """A's backlog: BACKLOG bulk webhook notifications accepted in one batch (as a batch request
    or a broadcast's fan-out makes them), queued before B's."""
    items = []
    for index in range(BACKLOG):
        payload = {"user_id": f"a{index}", "channel": "webhook", "to": url, "message": "A", "priority": Priority.BULK}
        items.append(
            services.BatchItem(
                request=services.NotificationRequest(**payload),
                idempotency_key=f"a-{index}",
                fingerprint=services.request_fingerprint(payload),
            )
        )
    return [result.notification_id for result in services.notification_accept_batch(client=client, items=items)]


def _accept_single(client: ApiClient, url: str, index: int) -> str:
    payload = {"user_id": f"b{index}", "channel": "webhook", "to": url, "message": "B"}
    return services.notification_accept(
        client=client,
        request=services.NotificationRequest(**payload),
        idempotency_key=f"b-{index}",
        fingerprint=services.request_fingerprint(payload),
    ).notification_id


def test_another_clients_single_notifications_are_sent_within_a_few_slots_while_a_bulk_backlog_drains(
    worker: dramatiq.Worker, receiver: WebhookReceiver
) -> None:
    a, _ = make_api_client("a")
    b, _ = make_api_client("b")
    url = receiver.url("/hook")
    sent_after: list[tuple[float, str]] = []  # B's: when accepted, its id
    with override_notifications(
        RATE_LIMITS=f"webhook={RATE}/s", RATE_LIMIT_HOLD_SECONDS=HOLD_SECONDS, WEBHOOK_ALLOW_HOSTS=["127.0.0.1"]
    ):
        backlog = set(_accept_backlog(a, url))
        # The backlog has the channel to itself for a while: its sends are going at the full rate.
        wait_until(lambda: len(receiver.requests) >= 5, timeout=30, message="A's backlog to be sending")
        # B sends one notification after another. Its first may find the second A booked while
        # alone on the channel; from then on the two share it.
        for index in range(4):
            accepted_at = time.monotonic()
            b_id = _accept_single(b, url, index)
            sent_after.append((accepted_at, b_id))
            wait_until(
                lambda b_id=b_id: Notification.objects.filter(pk=b_id, status=Status.DELIVERED).exists(),
                timeout=30,
                message=f"B's notification {index} delivered",
            )
        a_pending = Notification.objects.filter(pk__in=backlog).exclude(status=Status.DELIVERED).count()
        # Let the backlog finish under these settings before they are put back.
        wait_until(lambda: len(receiver.requests) >= BACKLOG + 4, timeout=60, message="A's backlog sent")

    requests = list(receiver.requests)
    for accepted_at, b_id in sent_after[1:]:
        b_at = next(index for index, request in enumerate(requests) if request.headers.get("idempotency-key") == b_id)
        ahead_of_b = [
            request
            for request in requests[:b_at]
            if request.received_at >= accepted_at and request.headers.get("idempotency-key") in backlog
        ]
        # A may have HOLD_SECONDS of the channel booked ahead (3 slots at 20/s) and two more, plus
        # the one a thread is sending: B's send follows those, not up to a second (20 slots) of A's.
        assert len(ahead_of_b) <= int(HOLD_SECONDS * RATE) + 4, [r.received_at - accepted_at for r in ahead_of_b]
    assert a_pending >= BACKLOG // 3  # B went ahead while much of A's backlog was still waiting
