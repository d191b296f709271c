"""Consent in front of delivery: send, hold to the end of quiet hours, or suppress. Decided at
accept (the answer and the API say which at once), and again just before the claim, since a
preference may change in between (a one-click unsubscribe) and a retry may fall in quiet hours."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from .. import metrics
from ..models import Category, Notification, Recipient, Status
from ..selectors import PendingDelivery
from .outcomes import DeliveryOutcome
from .preferences import suppressed_reason
from .quiet_hours import quiet_hours_end

logger = logging.getLogger("notifications.services")


@dataclass(frozen=True)
class Consent:
    suppressed_reason: str = ""  # set: not sent, ever
    hold_until: datetime | None = None  # set: not before then (the end of quiet hours)


def consent_decide(
    *,
    category: Category,
    channel: str,
    preferences: dict[str, Any],
    quiet_hours: dict[str, str] | None,
    timezone: str,
    due_at: datetime,
) -> Consent:
    """Whether a notification of ``category`` on ``channel`` due at ``due_at`` may go: suppressed
    by the preferences, held by quiet hours, or neither. Critical categories are neither."""
    reason = suppressed_reason(category=category, channel=channel, preferences=preferences)
    if reason:
        return Consent(suppressed_reason=reason)
    if category.critical:
        return Consent()
    return Consent(hold_until=quiet_hours_end(at=due_at, quiet_hours=quiet_hours, timezone=timezone))


def consent_at_accept(*, category: Category, recipient: Recipient | None, channel: str, due_at: datetime) -> Consent:
    return consent_decide(
        category=category,
        channel=channel,
        preferences=recipient.preferences if recipient else {},
        quiet_hours=recipient.quiet_hours if recipient else None,
        timezone=recipient.timezone if recipient else "",
        due_at=due_at,
    )


def consent_before_send(*, notification_id: Any, pending: PendingDelivery, now: datetime) -> DeliveryOutcome | None:
    """Suppress or hold a pending notification that may not go now; None when it may. No attempt,
    no provider call, no rate-limit slot for either; each is one conditional UPDATE, so a cancel
    or another worker's claim in between wins cleanly."""
    if pending.category_key is None:
        return None  # accepted before categories existed: sent as it was accepted
    category = Category(key=pending.category_key, critical=pending.critical, default_enabled=pending.default_enabled)
    consent = consent_decide(
        category=category,
        channel=pending.channel,
        preferences=pending.preferences,
        quiet_hours=pending.quiet_hours,
        timezone=pending.timezone,
        due_at=now,
    )
    if consent.suppressed_reason:
        if not notification_suppress(notification_id=notification_id, channel=pending.channel, reason=consent.suppressed_reason):
            return DeliveryOutcome("skipped")
        return DeliveryOutcome("suppressed")
    if consent.hold_until is not None:
        Notification.hold(notification_id, until=consent.hold_until)
        return DeliveryOutcome("held")
    return None


def notification_suppress(*, notification_id: Any, channel: str, reason: str) -> bool:
    """Move a pending notification to ``suppressed`` for ``reason``; False when it is no longer pending."""
    with transaction.atomic():
        if not Notification.transition(notification_id, Status.SUPPRESSED, suppressed_reason=reason):
            return False
        transaction.on_commit(lambda: metrics.record_suppressed(channel=channel, reason=reason))
    logger.info("notification %s suppressed (%s)", notification_id, reason, extra={"notification_id": str(notification_id)})
    return True
