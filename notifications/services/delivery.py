"""Delivering one notification: take a send slot, claim the row, call the provider."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from .. import metrics, tracing
from ..channels import OutgoingMessage, channel_spec
from ..channels.providers import get_provider, provider_account
from ..errors import (
    PermanentChannelError,
    TransientChannelError,
)
from ..models import (
    AttemptOutcome,
    DeliveryAttempt,
    Notification,
    Status,
)
from ..ratelimit import wait_for_send_slot
from .outcomes import DeliveryOutcome, attempt_finish, claim_finish, record_permanent_failure, record_transient_failure

logger = logging.getLogger("notifications.services")


class SendRateLimited(Exception):
    """The channel's shared rate limit says: not now. Not an attempt (a provider's 429 is one)."""

    def __init__(self, retry_after: float):
        super().__init__(f"rate limited; retry in {retry_after:.3f}s")
        self.retry_after = retry_after


def notification_deliver(*, notification_id: Any) -> DeliveryOutcome:
    """Deliver one notification if it is still pending and due: claim, send, record.

    Raises SendRateLimited when the channel has no free slot; the actor then puts its message
    back for that long without spending its retries (see actors).
    """
    notification = Notification.objects.select_related("client").filter(pk=notification_id).first()
    if notification is None or notification.status not in (Status.ACCEPTED, Status.QUEUED, Status.RETRYING):
        return DeliveryOutcome("skipped")
    if notification.next_attempt_at and notification.next_attempt_at > timezone.now() + timedelta(seconds=1):
        # An early duplicate hint; the row's own schedule (and the sweeper) decides when.
        return DeliveryOutcome("skipped")
    reservation = wait_for_send_slot(
        channel_spec(notification.channel).rate_limit_bucket, account=provider_account(notification.channel)
    )
    if not reservation.reserved:
        metrics.record_rate_limited(channel=notification.channel)
        raise SendRateLimited(reservation.wait_seconds)
    attempt = _notification_claim(notification)
    if attempt is None:
        return DeliveryOutcome("skipped")
    return _notification_send(notification, attempt)


def _notification_claim(notification: Notification) -> DeliveryAttempt | None:
    """Atomically take the notification for this worker; None when another worker got it first."""
    now = timezone.now()
    with transaction.atomic():
        won = Notification.transition(
            notification.pk,
            Status.SENDING,
            only_from=[Status.ACCEPTED, Status.QUEUED, Status.RETRYING],
            claimed_at=now,
            attempt_count=F("attempt_count") + 1,
        )
        if not won:
            return None
        # Read back only what the claim changed (a full refresh would drop the prefetched client),
        # with the last attempt's number, in one query.
        claimed = (
            Notification.objects.filter(pk=notification.pk)
            .annotate(last_number=Max("attempts__number"))
            .values("status", "claimed_at", "attempt_count", "updated_at", "last_number")
            .get()
        )
        for field in ("status", "claimed_at", "attempt_count", "updated_at"):
            setattr(notification, field, claimed[field])
        number = (claimed["last_number"] or 0) + 1
        return DeliveryAttempt.objects.create(notification=notification, number=number, started_at=now)


def _notification_send(notification: Notification, attempt: DeliveryAttempt) -> DeliveryOutcome:
    message = OutgoingMessage(
        notification_id=str(notification.pk),
        channel=notification.channel,
        address=notification.address,
        subject=notification.subject,
        body=notification.message,
        metadata=notification.metadata,
        idempotency_key=str(notification.pk),
        client_name=notification.client.name,
        webhook_secret=notification.client.webhook_secret,
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
        claim_finish(
            notification.pk,
            claimed_at=attempt.started_at,
            to=Status.DELIVERED,
            delivered_at=now,
            provider_message_id=result.provider_message_id[:255],
            last_error="",
        )
    metrics.record_delivered(channel=notification.channel, accepted_at=notification.created_at)
    logger.info(
        "delivered notification %s on %s", notification.pk, notification.channel, extra={"notification_id": str(notification.pk)}
    )
    return DeliveryOutcome("delivered", attempt.number)
