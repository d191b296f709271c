"""Accepting a notification exactly once per (client, idempotency key), and cancelling one.

Accept is one pipeline, each step one call, in this order: the recipient (and the category), the
address or the fallback route, the content, the consent, then the digest (a member is sent as part
of its digest), the cap (what will be sent on its own takes a slot of its recipient's cap) and the
write (the key, the digest membership and the row in one transaction, the publish after it).
``notification_build`` runs the steps up to the consent; the batch accept and a broadcast's
fan-out build their notifications with it too.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from ... import metrics, tracing
from ...channels import channel_spec, recipient_address, validate_address
from ...errors import IdempotencyInFlight, InvalidTransition, ValidationFailed
from ...models import DEFAULT_CATEGORY, ApiClient, Category, Notification, Priority, Recipient, Status, StatusEventType
from ...selectors import (
    addresses_suppressed_reasons,
    category_get,
    notification_get,
    recipient_and_category,
    recipient_with_suppression,
    recipients_by_user_id,
)
from ..digests.close import digest_member_cancel
from ..digests.join import DigestRequest, digest_join, digest_member_mark, digest_member_request
from ..policy.caps import CapSlot, recipient_cap_take
from ..policy.consent import Consent, consent_at_accept
from ..policy.content import NotificationContent, requested_content
from ..policy.preferences import category_for_client
from ..policy.routing import Hop, route_hops, route_planned
from ..records.outbox import notification_enqueued_state, notification_publish
from ..records.status_events import status_event_record
from .idempotency import AcceptResult, idempotency_claim, idempotency_replay

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
    # A fallback route instead of ``channel``: tried in order until one delivers (services/policy/routing.py).
    channels: tuple[str, ...] = ()
    # Gathered with the recipient's others of the same key and sent as one (services/digests/close.py).
    digest: DigestRequest | None = None
    # In-app only: where the inbox item links to (http(s)), and the thread it groups under.
    action_url: str = ""
    thread_key: str = ""


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
    draft = accept_draft(client=client, request=request, idempotency_key=key, fingerprint=fingerprint)
    if isinstance(draft, AcceptResult):
        return draft
    return accept_write(draft=draft, request=request, key=key, fingerprint=fingerprint)


@dataclass(frozen=True)
class AcceptDraft:
    """An accept's notification built and not yet written: its cap slot taken (given back if it is
    not written), its enqueued state set (the publish delay), and the answer it is written with."""

    notification: Notification
    cap_slot: CapSlot
    delay_seconds: float
    body: dict[str, Any]


def accept_draft(
    *, client: ApiClient, request: NotificationRequest, idempotency_key: str, fingerprint: str
) -> AcceptDraft | AcceptResult:
    """The notification the request asks for, built (steps 1-5: notification_build), marked a
    digest member, its cap slot taken, in its enqueued state; or, when it cannot be built, the
    stored answer of its key if there is one (say its recipient was deleted since the first request)."""
    try:
        notification = notification_build(client=client, request=digest_member_request(request), idempotency_key=idempotency_key)
    except ValidationFailed:
        replay = idempotency_replay(client=client, key=idempotency_key, fingerprint=fingerprint, now=timezone.now())
        if replay is not None:
            return replay
        raise
    digest_member_mark(notification=notification, request=request)
    cap_slot = recipient_cap_take(notification=notification)  # may suppress it (throttled)
    delay_seconds = notification_enqueued_state(notification, now=notification.created_at)
    body = {"id": str(notification.id), "status": notification.status, "idempotency_key": idempotency_key}
    return AcceptDraft(notification=notification, cap_slot=cap_slot, delay_seconds=delay_seconds, body=body)


def accept_write(*, draft: AcceptDraft, request: NotificationRequest, key: str, fingerprint: str) -> AcceptResult:
    """The accept's one write transaction: the key with its final answer, the digest membership
    and the notification already in its enqueued state; its publish (or its suppressed event)
    after the commit. A key already taken replays its answer and gives the cap slot back."""
    notification, cap_slot, delay_seconds, body = draft.notification, draft.cap_slot, draft.delay_seconds, draft.body
    now, client = notification.created_at, notification.client
    try:
        with transaction.atomic():
            if not idempotency_claim(client=notification.client, key=key, fingerprint=fingerprint, body=body, now=now):
                cap_slot.release()  # a replay sends nothing new
                replay = idempotency_replay(client=notification.client, key=key, fingerprint=fingerprint, now=now)
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
                    lambda: metrics.record_suppressed(
                        channel=notification.channel, reason=notification.suppressed_reason, mode=metrics.mode_of(client)
                    )
                )
    except BaseException:
        cap_slot.release()  # nothing was written (a failed statement, the commit, a timeout): nothing will be sent
        raise
    return AcceptResult(status_code=202, body=body, replayed=False, notification_id=str(notification.id))


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
            continue  # a route reads the suppressions of its channels' addresses itself (accept_target)
        address = request.to or recipient_address(recipient, request.channel, user_id=request.user_id)
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
        lookups = accept_lookup_single(client=client, request=request)
    recipient, category = accept_recipient(client=client, request=request, lookups=lookups)
    target = accept_target(client=client, request=request, recipient=recipient, category=category)
    contents = accept_contents(client=client, request=request, recipient=recipient, category=category, target=target)
    now = timezone.now()
    consent = accept_consent(
        client=client, request=request, recipient=recipient, category=category, target=target, now=now, lookups=lookups
    )
    return notification_new(
        client=client,
        request=request,
        idempotency_key=idempotency_key,
        category=category,
        target=target,
        contents=contents,
        consent=consent,
        now=now,
    )


def accept_lookup_single(*, client: ApiClient, request: NotificationRequest) -> AcceptLookups | None:
    """A single accept's recipient and suppression in one statement when its request gives its one
    address (``to``, as most do); None otherwise: the build reads them itself."""
    if request.channels or not request.to:
        return None
    try:
        address = validate_address(request.channel, request.to, field="to")
    except ValidationFailed:
        return None
    recipient, reason = recipient_with_suppression(
        client=client, user_id=request.user_id, channel=request.channel, address=address
    )
    return AcceptLookups(
        recipients={request.user_id: recipient} if recipient is not None else {},
        suppressions={(request.channel, address): reason} if reason else {},
    )


def accept_recipient(
    *, client: ApiClient, request: NotificationRequest, lookups: AcceptLookups | None
) -> tuple[Recipient | None, Category]:
    """The recipient (None: none stored, ``to`` must say where) and the category, read together."""
    if lookups is None:
        recipient, category = recipient_and_category(client=client, user_id=request.user_id, category_key=request.category)
    else:
        recipient, category = lookups.recipients.get(request.user_id), category_get(client=client, key=request.category)
    if category is None:
        category = category_for_client(client=client, key=request.category)  # raises, naming the field
    return recipient, category


@dataclass(frozen=True)
class AcceptTarget:
    """Where the notification goes: one channel's address, or a fallback route's channels checked in
    order (``hops``), the first that can be tried made current (``channel``, ``address``; when none
    can, the route's first channel and no address)."""

    channel: str
    address: str
    hops: tuple[Hop, ...] = ()

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(hop.channel for hop in self.hops) or (self.channel,)

    @property
    def first(self) -> Hop | None:
        return next((hop for hop in self.hops if not hop.skipped_reason), None)


def accept_target(
    *, client: ApiClient, request: NotificationRequest, recipient: Recipient | None, category: Category
) -> AcceptTarget:
    """The address (``to``, else the recipient's stored one; ValidationFailed when there is none),
    or, for ``channels``, each channel checked against the recipient's addresses, preferences and
    the client's suppression list."""
    if request.channels:
        if request.to:
            raise ValidationFailed(
                "give the recipient's addresses with PUT /api/v1/recipients/{user_id}: 'to' is one channel's address, "
                "and 'channels' uses the stored address of each",
                extra={"field": "to"},
            )
        hops = tuple(
            route_hops(
                client_id=client.pk,
                channels=list(request.channels),
                recipient=recipient,
                category=category,
                user_id=request.user_id,
            )
        )
        first = next((hop for hop in hops if not hop.skipped_reason), None)
        return AcceptTarget(first.channel if first else request.channels[0], first.address if first else "", hops)
    if request.to and channel_spec(request.channel).addressed_by_user_id and request.to != request.user_id:
        raise ValidationFailed(f"{request.channel} is addressed by user_id: leave 'to' out", extra={"field": "to"})
    if request.to:
        return AcceptTarget(request.channel, validate_address(request.channel, request.to, field="to"))
    stored = recipient_address(recipient, request.channel, user_id=request.user_id)
    if not stored:
        raise ValidationFailed(
            f"no {request.channel} address is known for user {request.user_id!r}: give 'to' or store one "
            f"with PUT /api/v1/recipients/{request.user_id}",
            extra={"field": "to"},
        )
    return AcceptTarget(request.channel, validate_address(request.channel, stored, field="to"))


def accept_contents(
    *, client: ApiClient, request: NotificationRequest, recipient: Recipient | None, category: Category, target: AcceptTarget
) -> dict[str, NotificationContent]:
    """What each channel of the target sends, rendered now: a route's channels all at accept, so
    moving on to the next one renders nothing."""
    return {
        channel: requested_content(
            request, client=client, recipient=recipient, category=category, user_id=request.user_id, channel=channel
        )
        for channel in target.channels
    }


def accept_consent(
    *,
    client: ApiClient,
    request: NotificationRequest,
    recipient: Recipient | None,
    category: Category,
    target: AcceptTarget,
    now: datetime,
    lookups: AcceptLookups | None,
) -> Consent:
    """Suppressed (the preferences, the suppression list; a route none of whose channels can be
    tried), held to the end of quiet hours, or neither. A route's channels were checked against
    the preferences and the suppression list by accept_target; only quiet hours are left."""
    due_at = _due_at(request, now)
    if target.hops:
        first = target.first
        if first is None:
            return Consent(suppressed_reason=str(target.hops[0].skipped_reason)[:16])
        return consent_at_accept(category=category, recipient=recipient, channel=first.channel, due_at=due_at)
    return consent_at_accept(
        category=category,
        recipient=recipient,
        channel=target.channel,
        due_at=due_at,
        client_id=client.pk,
        address=target.address,
        suppressions=lookups.suppressions if lookups is not None else None,
    )


def notification_new(
    *,
    client: ApiClient,
    request: NotificationRequest,
    idempotency_key: str,
    category: Category,
    target: AcceptTarget,
    contents: dict[str, NotificationContent],
    consent: Consent,
    now: datetime,
) -> Notification:
    """The notification an accept writes, from its request and what its steps decided: built, not
    saved, since accept_write writes it in the same transaction as its key."""
    route = route_planned(target.hops, contents).route if target.hops else []
    return Notification(
        id=uuid.uuid4(),
        client=client,
        user_id=request.user_id,
        channel=target.channel,
        address=target.address,
        **contents[target.channel].notification_fields(),
        category=category,
        metadata=request.metadata,
        priority=request.priority,
        send_at=request.send_at,
        idempotency_key=idempotency_key,
        trace_id=tracing.current_trace_id(),
        traceparent=tracing.current_traceparent(),
        action_url=request.action_url,
        thread_key=request.thread_key,
        created_at=now,
        status=Status.SUPPRESSED if consent.suppressed_reason else Status.ACCEPTED,
        suppressed_reason=consent.suppressed_reason,
        # The end of the recipient's quiet hours when it falls in them; the sweeper sends it then.
        next_attempt_at=consent.hold_until or _due_at(request, now),
        route=route,
    )


def _due_at(request: NotificationRequest, now: datetime) -> datetime:
    return max(request.send_at, now) if request.send_at else now


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
