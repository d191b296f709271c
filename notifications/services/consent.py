"""Consent in front of delivery: send, hold to the end of quiet hours, or suppress. Decided at
accept (the answer and the API say which at once), and again just before the claim, since a
preference may change in between (a one-click unsubscribe) and a retry may fall in quiet hours."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from .. import metrics
from ..models import PENDING_STATUSES, Category, Notification, Recipient, Status, StatusEventType
from ..selectors import PendingDelivery
from .outcomes import DeliveryOutcome
from .preferences import suppressed_reason
from .quiet_hours import quiet_hours_end
from .routing import route_advance, route_fields
from .status_events import status_event_record
from .suppressions import address_suppressed_reason

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


def consent_at_accept(
    *,
    category: Category,
    recipient: Recipient | None,
    channel: str,
    due_at: datetime,
    client_id: Any = None,
    address: str = "",
    suppressions: Mapping[tuple[str, str], str] | None = None,
) -> Consent:
    """Consent at accept; with ``client_id`` and ``address``, also the client's suppression list
    (one index probe, made only when the preferences allow the send), or, for a batch that read
    the suppressed ones of its addresses at once, ``suppressions`` ((channel, address) -> reason)."""
    consent = consent_decide(
        category=category,
        channel=channel,
        preferences=recipient.preferences if recipient else {},
        quiet_hours=recipient.quiet_hours if recipient else None,
        timezone=recipient.timezone if recipient else "",
        due_at=due_at,
    )
    if consent.suppressed_reason or client_id is None or not address:
        return consent
    # Whatever the category, critical included: the provider reported the address gone or its
    # owner unwilling, and sending again would only bounce or hurt the sender's reputation.
    if suppressions is not None:
        reason = suppressions.get((channel, address), "")
    else:
        reason = address_suppressed_reason(client_id=client_id, channel=channel, address=address)
    return Consent(suppressed_reason=reason) if reason else consent


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
    backlog, whose claim must be given back before it is (services/backlog.py)."""
    reason, hold_until = _consent_now(pending, now)
    return bool(reason) or hold_until is not None


def _consent_now(pending: PendingDelivery, now: datetime) -> tuple[str, datetime | None]:
    """Why it may not go on its channel now (""), and until when it waits (None: it may go now)."""
    # The address bounced or complained since accept (services/suppressions.py): never sent.
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
            .only("id", "client_id", "channel", "status", "client__status_webhook_url")
            .get(pk=notification_id)
        )
        status_event_record(notifications=[suppressed], event_type=StatusEventType.SUPPRESSED)
        transaction.on_commit(lambda: metrics.record_suppressed(channel=channel, reason=reason))
    logger.info("notification %s suppressed (%s)", notification_id, reason, extra={"notification_id": str(notification_id)})
    return True
