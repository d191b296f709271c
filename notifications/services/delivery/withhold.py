"""Withholding at send time: a pending notification its recipient's consent no longer allows now
(suppressed since accept, or in quiet hours) is suppressed, held, or moved on to the next channel of
its route before any claim, attempt or provider call. The decision is policy/consent.py's, the same
as at accept; what it does to the notification is delivery's."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction

from ... import metrics
from ...models import PENDING_STATUSES, Category, Notification, Status, StatusEventType
from ...selectors import PendingDelivery
from ..policy.consent import consent_decide
from ..policy.routing import route_advance, route_fields
from ..records.status_events import status_event_record
from .outcomes import DeliveryOutcome

logger = logging.getLogger("notifications.services")


def consent_before_send(*, notification_id: Any, pending: PendingDelivery, now: datetime) -> DeliveryOutcome | None:
    """Suppress or hold a pending notification that may not go now; None when it may. No attempt,
    no provider call, no rate-limit slot for either; each is one conditional UPDATE, so a cancel
    or another worker's claim in between wins cleanly. A fallback notification withheld on its
    channel moves on to its next one instead (``fallback``); only its last is suppressed."""
    reason, hold_until = _consent_now(pending, now)
    if reason:
        return _channel_withhold(notification_id=notification_id, pending=pending, reason=reason)
    if hold_until is not None:
        Notification.hold(notification_id, until=hold_until)
        return DeliveryOutcome("held")
    return None


def consent_withholds(*, pending: PendingDelivery, now: datetime) -> bool:
    """Whether consent_before_send would suppress or hold it now: asked of a row claimed from the
    backlog, whose claim must be given back before it is (services/delivery/backlog.py)."""
    reason, hold_until = _consent_now(pending, now)
    return bool(reason) or hold_until is not None


def _consent_now(pending: PendingDelivery, now: datetime) -> tuple[str, datetime | None]:
    """Why it may not go on its channel now (""), and until when it waits (None: it may go now)."""
    # The address bounced or complained since accept (services/policy/suppressions.py): never sent.
    if pending.suppression_reason:
        return pending.suppression_reason, None
    # A notification accepted before categories existed is sent as it was accepted.
    if pending.category_key is None:
        return "", None
    category = Category(key=pending.category_key, critical=pending.critical, default_enabled=pending.default_enabled)
    consent = consent_decide(
        category=category,
        channel=pending.channel,
        preferences=pending.preferences,
        quiet_hours=pending.quiet_hours,
        timezone=pending.timezone,
        due_at=now,
    )
    return consent.suppressed_reason, None if consent.suppressed_reason else consent.hold_until


def _channel_withhold(*, notification_id: Any, pending: PendingDelivery, reason: str) -> DeliveryOutcome:
    """The notification may not go on its channel for ``reason``: a fallback notification skips
    the channel and moves on to its next one that can be tried; one without a channel left, or
    without a route, is suppressed."""
    if not pending.has_route:
        return DeliveryOutcome(
            "suppressed"
            if notification_suppress(notification_id=notification_id, channel=pending.channel, reason=reason)
            else "skipped"
        )
    with transaction.atomic():
        # Locked, and only while still pending on the channel this decision is about: a duplicate
        # message's worker that read the row before this one moved it must not skip the next channel.
        notification = (
            Notification.objects.select_for_update()
            .filter(pk=notification_id, channel=pending.channel, status__in=PENDING_STATUSES)
            .first()
        )
        if notification is None:
            return DeliveryOutcome("skipped")
        step = route_advance(
            notification,
            claimed_at=None,
            reason=reason,
            error=f"{pending.channel} skipped before its send: {reason}",
            only_from=[notification.status],
        )
        if step.advanced:
            return DeliveryOutcome("fallback")
        if step.lost or not notification_suppress(
            notification_id=notification_id, channel=pending.channel, reason=reason, fields=route_fields(step)
        ):
            return DeliveryOutcome("skipped")
    return DeliveryOutcome("suppressed")


def notification_suppress(*, notification_id: Any, channel: str, reason: str, fields: dict[str, Any] | None = None) -> bool:
    """Move a pending notification to ``suppressed`` for ``reason`` (writing ``fields`` with it, a
    fallback notification's route); False when it is no longer pending."""
    with transaction.atomic():
        if not Notification.transition(notification_id, Status.SUPPRESSED, suppressed_reason=reason, **(fields or {})):
            return False
        # One read (with its client's status_webhook_url) for the status event: a rare path.
        suppressed = (
            Notification.objects.select_related("client")
            .only("id", "client_id", "channel", "status", "client__status_webhook_url", "client__is_test")
            .get(pk=notification_id)
        )
        status_event_record(notifications=[suppressed], event_type=StatusEventType.SUPPRESSED)
        mode = suppressed.client.mode
        transaction.on_commit(lambda: metrics.record_suppressed(channel=channel, reason=reason, mode=mode))
    logger.info("notification %s suppressed (%s)", notification_id, reason, extra={"notification_id": str(notification_id)})
    return True
