"""Turning a decoded domain event into at most one notification: the dedup claim and the accept
commit together, so a redelivery, a second consumer or a crash between commit and ack never makes
a second notification."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from ...conf import get_config
from ...models import ProcessedEvent
from .accept import NotificationRequest, notification_accept
from .clients import api_client_get_or_create
from .idempotency import request_fingerprint


@dataclass(frozen=True)
class EventIntake:
    duplicate: bool
    notification_id: str = ""


def event_notification_accept(*, event_key: str, routing_key: str, request: NotificationRequest) -> EventIntake:
    """Claim ``event_key`` and accept its notification for the events API client, in one
    transaction; a key claimed already is a duplicate and makes nothing. Domain errors (no known
    address, say) propagate and roll the claim back."""
    config = get_config()
    now = timezone.now()
    with transaction.atomic():
        claim = _event_claim(event_key, routing_key=routing_key, now=now, ttl_seconds=config.events.dedup_ttl_seconds)
        if claim is None:
            return EventIntake(duplicate=True)
        client = api_client_get_or_create(name=config.events_api_client)
        accepted = notification_accept(
            client=client,
            request=request,
            idempotency_key=event_key,
            fingerprint=request_fingerprint({"event": event_key}),
        )
        ProcessedEvent.objects.filter(pk=claim.pk).update(notification_id=accepted.notification_id)
    return EventIntake(duplicate=False, notification_id=accepted.notification_id)


def _event_claim(key: str, *, routing_key: str, now: dt.datetime, ttl_seconds: int) -> ProcessedEvent | None:
    """Claim the event by a unique insert; None when it is claimed already. A claim past its expiry
    is replaced here, on the conflict, so the usual case costs one INSERT (purge_notifications
    removes the expired ones nobody sends again)."""
    for _ in range(2):
        try:
            with transaction.atomic():
                return ProcessedEvent.objects.create(
                    event_key=key, routing_key=routing_key, created_at=now, expires_at=now + dt.timedelta(seconds=ttl_seconds)
                )
        except IntegrityError:
            if not ProcessedEvent.objects.filter(event_key=key, expires_at__lte=now).delete()[0]:
                return None
    return None
