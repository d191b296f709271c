"""Accepting a notification exactly once per (client, idempotency key), and cancelling one."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from .. import metrics, tracing
from ..channels import recipient_address, validate_address
from ..conf import get_config
from ..errors import (
    IdempotencyConflict,
    IdempotencyInFlight,
    InvalidTransition,
    ValidationFailed,
)
from ..models import (
    DEFAULT_CATEGORY,
    ApiClient,
    Category,
    IdempotencyKey,
    IdempotencyKeyState,
    Notification,
    Priority,
    Recipient,
    Status,
    StatusEventType,
)
from ..selectors import category_get, notification_get, recipient_and_category, recipients_by_user_id
from ..sql import insert_or_nothing
from .caps import recipient_cap_take
from .consent import consent_at_accept
from .content import NotificationContent, requested_content
from .digest_join import DigestRequest, digest_join, digest_member_mark, digest_member_request
from .digests import digest_member_cancel
from .outbox import notification_enqueued_state, notification_publish
from .preferences import category_for_client
from .routing import route_plan
from .status_events import status_event_record
from .suppressions import addresses_suppressed_reasons

logger = logging.getLogger("notifications.services")


@dataclass(frozen=True)
class NotificationRequest:
    """A request to notify, already shape-checked (types, required fields) by its entry point."""

    user_id: str
    message: str = ""  # either message, or template rendered with data
    channel: str = "email"
    subject: str = ""
    to: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    priority: str = Priority.HIGH
    send_at: datetime | None = None
    template: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    category: str = DEFAULT_CATEGORY
    locale: str = ""  # else the recipient's, else DEFAULT_LOCALE
    # A fallback route instead of ``channel``: tried in order until one delivers (services/routing.py).
    channels: tuple[str, ...] = ()
    # Gathered with the recipient's others of the same key and sent as one (services/digests.py).
    digest: DigestRequest | None = None


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
    """Accept one notification exactly once per (client, idempotency key), in one write transaction.

    The row is built (validated, its address looked up) before anything is written. Then one
    transaction inserts the key with its final answer (``INSERT ... ON CONFLICT DO NOTHING``) and
    the notification already in its enqueued state, so the publish after commit needs no further
    write. A concurrent request with the same key waits on the key's unique index until the first
    commits, then finds the key and replays the first answer: never two notifications, no 409 for a
    request that merely raced. A key already taken answers its stored response (or 422 for another
    body) even when this request could no longer be accepted (say its recipient was deleted since).
    """
    key = idempotency_key or str(uuid.uuid4())
    try:
        notification = notification_build(client=client, request=digest_member_request(request), idempotency_key=key)
    except ValidationFailed:
        replay = idempotency_replay(client=client, key=key, fingerprint=fingerprint, now=timezone.now())
        if replay is not None:
            return replay
        raise
    now = notification.created_at
    digest_member_mark(notification=notification, request=request)
    cap_slot = recipient_cap_take(notification=notification)  # may suppress it (throttled)
    delay_seconds = notification_enqueued_state(notification, now=now)
    body = {"id": str(notification.id), "status": notification.status, "idempotency_key": key}
    try:
        with transaction.atomic():
            if not _idempotency_claim(client=client, key=key, fingerprint=fingerprint, body=body, now=now):
                cap_slot.release()  # a replay sends nothing new
                replay = idempotency_replay(client=client, key=key, fingerprint=fingerprint, now=now)
                if replay is None:  # pragma: no cover - the key vanished between the conflict and the read
                    raise IdempotencyInFlight("a request with this Idempotency-Key is still being processed; retry shortly")
                return replay
            digest_join(notification=notification, request=request, now=now)
            notification.save(force_insert=True)
            if notification.enqueued_at is not None:
                transaction.on_commit(lambda: notification_publish(notification=notification, delay_seconds=delay_seconds))
            elif notification.status == Status.SUPPRESSED:
                status_event_record(notifications=[notification], event_type=StatusEventType.SUPPRESSED)
                transaction.on_commit(
                    lambda: metrics.record_suppressed(channel=notification.channel, reason=notification.suppressed_reason)
                )
    except BaseException:
        cap_slot.release()  # nothing was written (a failed statement, the commit, a timeout): nothing will be sent
        raise
    return AcceptResult(status_code=202, body=body, replayed=False, notification_id=str(notification.id))


def _idempotency_claim(*, client: ApiClient, key: str, fingerprint: str, body: dict[str, Any], now: datetime) -> bool:
    """Insert the key with its final answer; False when a live key is there already. An expired
    key is replaced in place (only here, on the conflict, so the usual case is one INSERT)."""
    values = idempotency_key_row(client=client, key=key, fingerprint=fingerprint, body=body, now=now)
    if insert_or_nothing(IdempotencyKey, values, conflict_fields=("client_id", "key")):
        return True
    replaced = IdempotencyKey.objects.filter(client=client, key=key, expires_at__lte=now).update(
        **{name: value for name, value in values.items() if name not in ("client_id", "key")}
    )
    return bool(replaced)


def idempotency_key_row(*, client: ApiClient, key: str, fingerprint: str, body: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A key's row as it is written: already completed, with the answer it replays."""
    return {
        "client_id": client.pk,
        "key": key,
        "fingerprint": fingerprint,
        "state": IdempotencyKeyState.COMPLETED,
        "response_status": 202,
        "response_body": body,
        "created_at": now,
        "expires_at": now + timedelta(seconds=get_config().idempotency_key_ttl_seconds),
    }


def idempotency_replay(*, client: ApiClient, key: str, fingerprint: str, now: datetime) -> AcceptResult | None:
    """The stored answer of a live key (422 for another body); None when there is none."""
    record = IdempotencyKey.objects.filter(client=client, key=key, expires_at__gt=now).first()
    return None if record is None else idempotency_answer(record, fingerprint=fingerprint)


def idempotency_answer(record: IdempotencyKey, *, fingerprint: str) -> AcceptResult:
    """What a stored key answers a request with ``fingerprint``: its replay, or 422 for another body."""
    key = record.key
    if record.fingerprint != fingerprint:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used with a different request body",
            extra={"idempotency_key": key},
        )
    if record.state != IdempotencyKeyState.COMPLETED:  # a key left by a version that claimed first
        raise IdempotencyInFlight(
            "a request with this Idempotency-Key is still being processed; retry shortly",
            extra={"idempotency_key": key},
        )
    body = dict(record.response_body or {})
    return AcceptResult(
        status_code=record.response_status or 202, body=body, replayed=True, notification_id=str(body.get("id", ""))
    )


@dataclass(frozen=True)
class AcceptLookups:
    """What a batch of accepts reads once for all its items instead of once each: the client's
    recipients of their user_ids, and which of their addresses are on its suppression list."""

    recipients: dict[str, Recipient]
    suppressions: dict[tuple[str, str], str]  # (channel, address) -> reason


def accept_lookups(*, client: ApiClient, requests: list[NotificationRequest]) -> AcceptLookups:
    """The lookups of a batch of accepts: two queries, whatever its size. A request whose address
    is invalid is left out (its build refuses it, naming the field)."""
    recipients = recipients_by_user_id(client=client, user_ids=[request.user_id for request in requests])
    addresses: list[tuple[str, str]] = []
    for request in requests:
        recipient = recipients.get(request.user_id)
        if request.channels:
            continue  # a route reads the suppressions of its channels' addresses itself (route_plan)
        address = request.to or (recipient_address(recipient, request.channel) if recipient else "")
        try:
            addresses.append((request.channel, validate_address(request.channel, address, field="to")))
        except ValidationFailed:
            continue
    return AcceptLookups(
        recipients=recipients, suppressions=addresses_suppressed_reasons(client_id=client.pk, addresses=addresses)
    )


def notification_build(
    *, client: ApiClient, request: NotificationRequest, idempotency_key: str, lookups: AcceptLookups | None = None
) -> Notification:
    """The notification the request asks for, validated, addressed, rendered and checked against
    its recipient's consent (suppressed, or held to the end of quiet hours), not yet saved; its
    recipient and suppression read from ``lookups`` when a batch read them for all its items."""
    if lookups is None:
        recipient, category = recipient_and_category(client=client, user_id=request.user_id, category_key=request.category)
    else:
        recipient, category = lookups.recipients.get(request.user_id), category_get(client=client, key=request.category)
    if category is None:
        category = category_for_client(client=client, key=request.category)  # raises, naming the field
    if request.channels:
        return _notification_build_routed(
            client=client, request=request, idempotency_key=idempotency_key, recipient=recipient, category=category
        )
    if request.to:
        address = validate_address(request.channel, request.to, field="to")
    else:
        stored = recipient_address(recipient, request.channel) if recipient else ""
        if not stored:
            raise ValidationFailed(
                f"no {request.channel} address is known for user {request.user_id!r}: give 'to' or store one "
                f"with PUT /api/v1/recipients/{request.user_id}",
                extra={"field": "to"},
            )
        address = validate_address(request.channel, stored, field="to")
    content = requested_content(
        request, client=client, recipient=recipient, category=category, user_id=request.user_id, channel=request.channel
    )
    now = timezone.now()
    due_at = max(request.send_at, now) if request.send_at else now
    consent = consent_at_accept(
        category=category,
        recipient=recipient,
        channel=request.channel,
        due_at=due_at,
        client_id=client.pk,
        address=address,
        suppressions=lookups.suppressions if lookups is not None else None,
    )
    return _notification_new(
        client=client,
        request=request,
        idempotency_key=idempotency_key,
        category=category,
        channel=request.channel,
        address=address,
        content=content,
        status=Status.SUPPRESSED if consent.suppressed_reason else Status.ACCEPTED,
        suppressed_reason=consent.suppressed_reason,
        # The end of the recipient's quiet hours when it falls in them; the sweeper sends it then.
        next_attempt_at=consent.hold_until or due_at,
        now=now,
    )


def _notification_new(
    *,
    client: ApiClient,
    request: NotificationRequest,
    idempotency_key: str,
    category: Category,
    channel: str,
    address: str,
    content: NotificationContent,
    now: Any,
    **decided: Any,
) -> Notification:
    """The notification an accept writes, from its request, its content and what was decided
    (``status``, ``suppressed_reason``, ``next_attempt_at``, ``route``): built, not saved, since
    notification_accept writes it in the same transaction as its key."""
    return Notification(
        id=uuid.uuid4(),
        client=client,
        user_id=request.user_id,
        channel=channel,
        address=address,
        **content.notification_fields(),
        category=category,
        metadata=request.metadata,
        priority=request.priority,
        send_at=request.send_at,
        idempotency_key=idempotency_key,
        trace_id=tracing.current_trace_id(),
        traceparent=tracing.current_traceparent(),
        created_at=now,
        **decided,
    )


def _notification_build_routed(
    *, client: ApiClient, request: NotificationRequest, idempotency_key: str, recipient: Recipient | None, category: Category
) -> Notification:
    """A fallback notification (``channels``): its content rendered for every channel of the route,
    its route planned against the recipient's addresses and preferences, the first channel that
    can be tried made current; suppressed when none can."""
    if request.to:
        raise ValidationFailed(
            "give the recipient's addresses with PUT /api/v1/recipients/{user_id}: 'to' is one channel's address, "
            "and 'channels' uses the stored address of each",
            extra={"field": "to"},
        )
    contents = {
        channel: requested_content(
            request, client=client, recipient=recipient, category=category, user_id=request.user_id, channel=channel
        )
        for channel in request.channels
    }
    plan = route_plan(client=client, recipient=recipient, category=category, contents=contents)
    channel = plan.first.channel if plan.first is not None else request.channels[0]
    content = contents[channel]
    now = timezone.now()
    due_at = max(request.send_at, now) if request.send_at else now
    hold_until = None
    if plan.first is not None:
        hold_until = consent_at_accept(category=category, recipient=recipient, channel=channel, due_at=due_at).hold_until
    return _notification_new(
        client=client,
        request=request,
        idempotency_key=idempotency_key,
        category=category,
        channel=channel,
        address=plan.first.address if plan.first is not None else "",
        content=content,
        status=Status.SUPPRESSED if plan.first is None else Status.ACCEPTED,
        suppressed_reason=plan.suppressed_reason,
        next_attempt_at=hold_until or due_at,
        now=now,
        route=plan.route,
    )


def notification_cancel(*, client: ApiClient, notification_id: Any) -> Notification:
    """Cancel a notification that has not started sending; InvalidTransition once it has."""
    notification = notification_get(client=client, notification_id=notification_id)
    if notification.status == Status.DIGESTED:
        return digest_member_cancel(notification=notification)
    if not Notification.transition(notification.pk, Status.CANCELLED):
        notification.refresh_from_db()
        raise InvalidTransition(
            f"a notification that is {notification.status} can no longer be cancelled",
            extra={"status": notification.status},
        )
    notification.refresh_from_db()
    return notification
