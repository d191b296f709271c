"""Accepting a notification exactly once per (client, idempotency key), and cancelling one."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from .. import tracing
from ..channels import recipient_address, validate_address
from ..conf import get_config
from ..errors import (
    IdempotencyConflict,
    IdempotencyInFlight,
    InvalidTransition,
    ValidationFailed,
)
from ..models import (
    ApiClient,
    IdempotencyKey,
    IdempotencyKeyState,
    Notification,
    Priority,
    Status,
)
from ..selectors import notification_get, recipient_get
from .outbox import notification_enqueue

# A key still "processing" this long after it was claimed belongs to a request that died before
# committing anything (the notification and the key's completion commit together), so a new
# request may take it over.
IDEMPOTENCY_STALE_SECONDS = 60

logger = logging.getLogger("notifications.services")


@dataclass(frozen=True)
class NotificationRequest:
    """A request to notify, already shape-checked (types, required fields) by its entry point."""

    user_id: str
    message: str
    channel: str = "email"
    subject: str = ""
    to: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    priority: str = Priority.HIGH
    send_at: datetime | None = None


@dataclass(frozen=True)
class AcceptResult:
    status_code: int
    body: dict[str, Any]
    replayed: bool
    notification_id: str


def request_fingerprint(payload: Any) -> str:
    """SHA-256 of the request body in canonical JSON, so key order and spacing do not matter."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def notification_accept(
    *,
    client: ApiClient,
    request: NotificationRequest,
    idempotency_key: str | None,
    fingerprint: str,
) -> AcceptResult:
    """Accept one notification exactly once per (client, idempotency key).

    The key is claimed with a unique insert first. Called on its own (the API), that insert
    commits at once, so a concurrent request with the same key sees it (409) instead of waiting;
    inside a caller's transaction (the event consumer) it commits with the rest. The notification
    and the key's stored response commit together, so a replay always finds the first answer.
    """
    key = idempotency_key or str(uuid.uuid4())
    record = _idempotency_claim(client=client, key=key, fingerprint=fingerprint)
    if record.state == IdempotencyKeyState.COMPLETED:
        return AcceptResult(
            status_code=record.response_status or 202,
            body=dict(record.response_body or {}),
            replayed=True,
            notification_id=str((record.response_body or {}).get("id", "")),
        )
    try:
        with transaction.atomic():
            notification = _notification_create(client=client, request=request, idempotency_key=key)
            body = {"id": str(notification.id), "status": notification.status, "idempotency_key": key}
            updated = IdempotencyKey.objects.filter(pk=record.pk, state=IdempotencyKeyState.PROCESSING).update(
                state=IdempotencyKeyState.COMPLETED, response_status=202, response_body=body
            )
            if not updated:  # pragma: no cover - someone took over a key we still held
                raise IdempotencyInFlight("this idempotency key was taken over by another request")
            transaction.on_commit(lambda: notification_enqueue(notification_id=notification.id))
    except Exception:
        # Nothing was created: free the key so the client can correct the request and try again.
        IdempotencyKey.objects.filter(pk=record.pk, state=IdempotencyKeyState.PROCESSING).delete()
        raise
    return AcceptResult(status_code=202, body=body, replayed=False, notification_id=str(notification.id))


def _idempotency_claim(*, client: ApiClient, key: str, fingerprint: str) -> IdempotencyKey:
    now = timezone.now()
    ttl = timedelta(seconds=get_config().idempotency_key_ttl_seconds)
    IdempotencyKey.objects.filter(client=client, key=key, expires_at__lte=now).delete()
    try:
        with transaction.atomic():
            return IdempotencyKey.objects.create(
                client=client, key=key, fingerprint=fingerprint, created_at=now, expires_at=now + ttl
            )
    except IntegrityError:
        pass
    existing = IdempotencyKey.objects.filter(client=client, key=key).first()
    if existing is None:  # expired and purged between our insert and this read: claim again
        return _idempotency_claim(client=client, key=key, fingerprint=fingerprint)
    if existing.fingerprint != fingerprint:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used with a different request body",
            extra={"idempotency_key": key},
        )
    if existing.state == IdempotencyKeyState.COMPLETED:
        return existing
    stale_before = now - timedelta(seconds=IDEMPOTENCY_STALE_SECONDS)
    if existing.created_at < stale_before:
        took_over = IdempotencyKey.objects.filter(
            pk=existing.pk, state=IdempotencyKeyState.PROCESSING, created_at=existing.created_at
        ).update(created_at=now)
        if took_over:
            existing.created_at = now
            return existing
    raise IdempotencyInFlight(
        "a request with this Idempotency-Key is still being processed; retry shortly",
        extra={"idempotency_key": key},
    )


def _notification_create(*, client: ApiClient, request: NotificationRequest, idempotency_key: str) -> Notification:
    config = get_config()
    if len(request.message.encode()) > config.max_message_bytes:
        raise ValidationFailed(
            f"message is {len(request.message.encode())} bytes; the limit is {config.max_message_bytes}",
            extra={"field": "message"},
        )
    if request.to:
        address = validate_address(request.channel, request.to, field="to")
    else:
        recipient = recipient_get(client=client, user_id=request.user_id)
        stored = recipient_address(recipient, request.channel) if recipient else ""
        if not stored:
            raise ValidationFailed(
                f"no {request.channel} address is known for user {request.user_id!r}: give 'to' or store one "
                f"with PUT /api/v1/recipients/{request.user_id}",
                extra={"field": "to"},
            )
        address = validate_address(request.channel, stored, field="to")
    now = timezone.now()
    return Notification.objects.create(
        client=client,
        user_id=request.user_id,
        channel=request.channel,
        address=address,
        subject=request.subject,
        message=request.message,
        metadata=request.metadata,
        priority=request.priority,
        send_at=request.send_at,
        next_attempt_at=max(request.send_at, now) if request.send_at else now,
        idempotency_key=idempotency_key,
        trace_id=tracing.current_trace_id(),
        created_at=now,
    )


def notification_cancel(*, client: ApiClient, notification_id: Any) -> Notification:
    """Cancel a notification that has not started sending; InvalidTransition once it has."""
    notification = notification_get(client=client, notification_id=notification_id)
    if not Notification.transition(notification.pk, Status.CANCELLED):
        notification.refresh_from_db()
        raise InvalidTransition(
            f"a notification that is {notification.status} can no longer be cancelled",
            extra={"status": notification.status},
        )
    notification.refresh_from_db()
    return notification
