"""Delivering one notification: take a send slot, claim the row, call the provider."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from .. import metrics, tracing
from ..channels import OutgoingMessage, channel_spec
from ..channels.providers import get_provider, provider_account
from ..conf import get_config
from ..errors import (
    PermanentChannelError,
    TransientChannelError,
)
from ..models import AttemptOutcome, DeliveryAttempt, Notification, Status
from ..ratelimit import wait_for_send_slot
from ..selectors import notification_pending_delivery
from .consent import consent_before_send
from .outcomes import DeliveryOutcome, attempt_finish, claim_finish, record_permanent_failure, record_transient_failure

logger = logging.getLogger("notifications.services")


class SendRateLimited(Exception):
    """The channel's shared rate limit says: not now. Not an attempt (a provider's 429 is one)."""

    def __init__(self, retry_after: float):
        super().__init__(f"rate limited; retry in {retry_after:.3f}s")
        self.retry_after = retry_after


def notification_deliver(*, notification_id: Any) -> DeliveryOutcome:
    """Deliver one notification if it is still pending and due: claim, send, record.

    Two short write transactions: the claim (one ``UPDATE ... RETURNING`` and the attempt's
    insert) and the outcome (the attempt's and the notification's updates). Raises SendRateLimited
    when the channel has no free slot; the actor then puts its message back for that long without
    spending its retries (see actors). A wait longer than BROKER_DELAY_MAX_SECONDS is held in the
    row instead, for the sweeper, like any long wait.
    """
    # The pending check also reads what consent depends on now, in the same one query.
    pending = notification_pending_delivery(notification_id)
    if pending is None:
        return DeliveryOutcome("skipped")
    channel, next_attempt_at, now = pending.channel, pending.next_attempt_at, timezone.now()
    if next_attempt_at and next_attempt_at > now + timedelta(seconds=1):
        # An early duplicate hint; the row's own schedule (and the sweeper) decides when.
        return DeliveryOutcome("skipped")
    # Suppressed (a preference changed since accept) or held (quiet hours began): no slot, no claim.
    withheld = consent_before_send(notification_id=notification_id, pending=pending, now=now)
    if withheld is not None:
        return withheld
    reservation = wait_for_send_slot(channel_spec(channel).rate_limit_bucket, account=provider_account(channel))
    if not reservation.reserved:
        metrics.record_rate_limited(channel=channel)
        if reservation.wait_seconds > get_config().broker_delay_max_seconds:
            # As a delayed message it would sit unacked in the worker that long, past RabbitMQ's
            # consumer timeout for a slow limit (10/m in tests/test_faults.py, 1/h in production):
            # the channel is closed and every unacked message on it comes back.
            Notification.hold(notification_id, until=now + timedelta(seconds=reservation.wait_seconds))
            return DeliveryOutcome("held")
        raise SendRateLimited(reservation.wait_seconds)
    claimed = _notification_claim(notification_id)
    if claimed is None:
        return DeliveryOutcome("skipped")
    return _notification_send(*claimed)


def _notification_claim(notification_id: Any) -> tuple[Notification, DeliveryAttempt] | None:
    """Atomically take the notification for this worker; None when another worker got it first."""
    now = timezone.now()
    with transaction.atomic():
        notification = Notification.claim_for_delivery(notification_id, now=now)
        if notification is None:
            return None
        attempt = DeliveryAttempt.objects.create(
            notification=notification, number=notification.last_attempt_number + 1, started_at=now
        )
    return notification, attempt


def _notification_send(notification: Notification, attempt: DeliveryAttempt) -> DeliveryOutcome:
    message = OutgoingMessage(
        notification_id=str(notification.pk),
        channel=notification.channel,
        address=notification.address,
        subject=notification.subject,
        body=notification.message,
        metadata=notification.metadata,
        idempotency_key=str(notification.pk),
        client_name=notification.client_name,
        webhook_secret=notification.client_webhook_secret,
        html_body=notification.html_message,
        headers=notification.headers,
    )
    started = time.monotonic()
    with tracing.provider_span(notification, attempt.number) as span:
        try:
            result = get_provider(notification.channel).send(message)
        except PermanentChannelError as exc:
            tracing.record_outcome(span, "permanent_error")
            return record_permanent_failure(notification, attempt, exc, started)
        except TransientChannelError as exc:
            tracing.record_outcome(span, "transient_error")
            return record_transient_failure(notification, attempt, exc, started)
        except Exception as exc:
            # A provider bug is not the recipient's fault: retry it like a transient error.
            logger.exception("provider for %s raised unexpectedly", notification.channel)
            tracing.record_outcome(span, "transient_error")
            return record_transient_failure(notification, attempt, exc, started)
        tracing.record_outcome(span, "delivered")
    now = timezone.now()
    with transaction.atomic():
        attempt_finish(attempt, AttemptOutcome.DELIVERED, started=started, response=result.response_summary)
        current = claim_finish(
            notification.pk,
            claimed_at=attempt.started_at,
            to=Status.DELIVERED,
            delivered_at=now,
            provider_message_id=result.provider_message_id[:255],
            last_error="",
        )
    if not current:
        # The provider took it, but only after the sweeper had given this send up for lost: the
        # attempt says delivered, the notification follows its newer claim (it may go twice).
        logger.warning(
            "notification %s was delivered after its claim was recovered; it may be sent again",
            notification.pk,
            extra={"notification_id": str(notification.pk)},
        )
        return DeliveryOutcome("skipped", attempt.number)
    metrics.record_delivered(channel=notification.channel, accepted_at=notification.created_at)
    logger.info(
        "delivered notification %s on %s", notification.pk, notification.channel, extra={"notification_id": str(notification.pk)}
    )
    return DeliveryOutcome("delivered", attempt.number)
