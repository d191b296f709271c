"""Delivery status from providers: a report each channel's feedback module verified (the provider's
own signature) and parsed (channels/<name>/feedback.py), recorded as the notification's
``provider_status`` and, for a hard bounce, a spam complaint or an SMS STOP, as a suppression of
the address.

Callbacks come late, twice and out of order. A provider status is only ever replaced by a later
one (``PROVIDER_STATUS_RANK``), with one conditional UPDATE, so two callbacks racing each other
cannot move it back either.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ... import metrics
from ...channels.email.feedback import mailgun_event_report, mailgun_event_verified
from ...channels.feedback import CallbackRejected, CallbackUnavailable, ProviderReport
from ...channels.sms.feedback import twilio_status_report
from ...models import PROVIDER_STATUS_RANK, Notification, ProviderStatus, StatusEventType, SuppressionReason
from ..policy.suppressions import suppression_add
from ..records.status_events import status_event_record

__all__ = [
    "CallbackRejected",
    "CallbackUnavailable",
    "FeedbackResult",
    "mailgun_event_record",
    "notification_provider_status_record",
    "provider_report_record",
    "provider_status_reported_record",
    "twilio_status_record",
]

logger = logging.getLogger("notifications.services")

# The provider statuses a client's status webhook hears of (docs/api.md, "Status webhooks").
STATUS_EVENT_TYPES: dict[str, str] = {
    ProviderStatus.BOUNCED: StatusEventType.BOUNCED,
    ProviderStatus.COMPLAINED: StatusEventType.COMPLAINED,
}


@dataclass(frozen=True)
class FeedbackResult:
    # recorded | unchanged (a later status is already there) | ignored (an event we do not track,
    # a soft bounce) | unknown_message (no notification of ours has that message id)
    outcome: str
    notification_id: str = ""
    provider_status: str = ""
    suppressed: str = ""  # the suppression reason, when the address was put on the list just now


def notification_provider_status_record(*, notification_id: Any, status: str, at: datetime) -> bool:
    """Set the notification's provider status to ``status`` unless it already holds one as late or
    later, in one ``UPDATE ... WHERE provider_status IN (earlier ones)``; True if it changed."""
    earlier = [value for value, rank in PROVIDER_STATUS_RANK.items() if rank < PROVIDER_STATUS_RANK[status]]
    updated = Notification.objects.filter(pk=notification_id, provider_status__in=earlier).update(
        provider_status=status, provider_status_at=at, updated_at=timezone.now()
    )
    return updated == 1


def _feedback_record(
    notification: Notification | None, *, status: str, suppress: str = "", provider: str, event: str
) -> FeedbackResult:
    if notification is None:
        logger.info("%s %s for a message we do not know; ignored", provider, event)
        return FeedbackResult("unknown_message")
    now = timezone.now()
    with transaction.atomic():
        changed = notification_provider_status_record(notification_id=notification.pk, status=status, at=now) if status else False
        added = bool(suppress) and suppression_add(
            client_id=notification.client_id,
            channel=notification.channel,
            address=notification.address,
            reason=suppress,
            notification_id=notification.pk,
        )
        if changed and status in STATUS_EVENT_TYPES:
            status_event_record(notifications=[notification], event_type=STATUS_EVENT_TYPES[status], occurred_at=now)
    logger.info(
        "%s %s for notification %s: provider status %s%s",
        provider,
        event,
        notification.pk,
        status or "kept",
        "" if changed or not status else " (a later one was already recorded)",
        extra={"notification_id": str(notification.pk)},
    )
    return FeedbackResult(
        "recorded" if changed or added else ("ignored" if not status else "unchanged"),
        notification_id=str(notification.pk),
        provider_status=status,
        suppressed=suppress if added else "",
    )


# What a status a provider reports with its answer puts on the suppression list (as its callback would).
_REPORTED_SUPPRESSIONS: dict[str, str] = {
    ProviderStatus.BOUNCED: SuppressionReason.BOUNCED,
    ProviderStatus.COMPLAINED: SuppressionReason.COMPLAINED,
}


def provider_status_reported_record(*, notification: Notification, status: str) -> FeedbackResult:
    """Record a provider status that came with the send's own answer (the test mode's capture
    sink: a bounce, a complaint) exactly as a callback reporting it is recorded."""
    return _feedback_record(
        notification, status=status, suppress=_REPORTED_SUPPRESSIONS.get(status, ""), provider="Capture sink", event=status
    )


def _feedback_ignored(*, provider: str, reason: str, notification: Notification, event: str) -> None:
    """Log (a warning: it may be a forged event) and count an event that named a notification but
    does not bind to it; the provider is answered 200 so it does not retry it."""
    metrics.record_provider_feedback_ignored(provider=provider.lower(), reason=reason)
    logger.warning(
        "%s %s ignored for notification %s: %s",
        provider,
        event,
        notification.pk,
        reason.replace("_", " "),
        extra={"notification_id": str(notification.pk), "provider": provider, "reason": reason, "event": event},
    )


def _notification_by(match: Q, *, channel: str, provider_message_id: str, provider: str, event: str) -> Notification | None:
    """The notification ``match`` finds on ``channel``. One found by its id (the callback outran
    the send's commit) whose stored message id is another message's (a resend) is not this one's."""
    found = (
        Notification.objects.filter(match, channel=channel)
        .only("id", "client_id", "channel", "address", "user_id", "status", "provider_message_id")
        .first()
    )
    if found is not None and found.provider_message_id not in ("", provider_message_id):
        _feedback_ignored(provider=provider, reason="message_id_mismatch", notification=found, event=event)
        return None
    return found


def provider_report_record(report: ProviderReport) -> FeedbackResult:
    """Record a verified provider report on the notification it names (by message id, or by our
    id echoed back); an event naming another address than the notification's counts for nothing."""
    if report.ignored:
        return FeedbackResult("ignored")
    match = Q(provider_message_id=report.provider_message_id)
    if report.notification_id is not None:
        match |= Q(pk=report.notification_id)
    notification = _notification_by(
        match,
        channel=report.channel,
        provider_message_id=report.provider_message_id,
        provider=report.provider,
        event=report.event,
    )
    if notification is not None and report.recipient is not None and not _same_address(report.recipient, notification.address):
        _feedback_ignored(provider=report.provider, reason="recipient_mismatch", notification=notification, event=report.event)
        return FeedbackResult("ignored")
    return _feedback_record(
        notification, status=report.status, suppress=report.suppress, provider=report.provider, event=report.event
    )


def twilio_status_record(*, request_url: str, path: str, params: Mapping[str, list[str]], signature: str) -> FeedbackResult:
    """Record one Twilio status callback once it verifies (channels/sms/feedback.py)."""
    return provider_report_record(twilio_status_report(request_url=request_url, path=path, params=params, signature=signature))


def mailgun_event_record(*, payload: Any, now: float | None = None) -> FeedbackResult:
    """Record one Mailgun event webhook once it verifies (channels/email/feedback.py); an event
    whose recording fails may come again with the same token."""
    body = payload if isinstance(payload, dict) else {}
    with mailgun_event_verified(body.get("signature"), now=now):
        return provider_report_record(mailgun_event_report(body))


def _same_address(recipient: str, address: str) -> bool:
    """Whether the event's ``recipient`` is ``address``: addresses are stored as accepted (only
    validated), and providers may change their case, so they are compared case-insensitively."""
    return bool(recipient.strip()) and recipient.strip().lower() == address.strip().lower()
