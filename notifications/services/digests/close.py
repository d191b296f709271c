"""Digests: a recipient's notifications of one digest key gathered over a window and sent as one.

The first accepted request of a (client, user_id, key) opens a digest; later ones inside its
window join it as members (status ``digested``, nothing sent of their own). When the window ends,
or ``max_items`` members have joined, the digest closes: one notification is made from the first
request's template, rendered with ``items`` (each member's ``data``, in created order) and
``count``, and sent like any other; a digest whose members were all cancelled sends nothing.

Correct by construction under concurrency: a partial unique index allows one ``open`` digest per
key, so concurrent accepts ``INSERT ... ON CONFLICT DO NOTHING`` and then all lock the one row that
won (``SELECT ... FOR UPDATE``) to join it, inside the accept's own transaction. The close holds the
same row lock for its whole transaction, and a member's cancel takes it too, so a member is either
in the items or cancelled, never both, and two closers never both send.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import dramatiq
from django.db import transaction
from django.db.models import Case, F, Q, When
from django.utils import timezone

from ... import metrics, tracing
from ...conf import DIGEST_CLOSE_ROUTE, get_config
from ...errors import InvalidTransition, NotificationError
from ...models import (
    UNCLOSED_DIGEST_STATUSES,
    DeadLetterReason,
    Digest,
    DigestStatus,
    Notification,
    Status,
    StatusEventType,
)
from ...selectors import due_in_turns, recipient_get
from ..delivery.dead_letters import dead_letter_create
from ..policy.caps import NO_SLOT, recipient_cap_take
from ..policy.consent import consent_at_accept
from ..policy.content import notification_content
from ..records.outbox import notification_enqueued_state, notification_publish
from ..records.outcome_counts import failure_reason_of, outcome_counts_add, outcome_key
from ..records.status_events import status_event_record

logger = logging.getLogger("notifications.services")

# A close message may arrive a moment before closes_at (clocks, the broker's delay rounding):
# within this it closes anyway instead of leaving the digest to the sweeper.
CLOSE_EARLY_TOLERANCE_SECONDS = 1.0
# Due digests this recent are left to their close message (or the close right after a commit).
DIGEST_SWEEP_GRACE_SECONDS = 2.0
DIGEST_SWEEP_BATCH = 200
# A pass closes for at most this long, then leaves the rest to the next pass, which ranks the due
# digests again: a digest of another client that fell due meanwhile waits one pass, not 200 closes.
DIGEST_SWEEP_SECONDS = 1.0
# A digest's notification that ends here, never to be sent, and the status event that says so.
ENDED_AT_CLOSE: dict[str, str] = {Status.SUPPRESSED: StatusEventType.SUPPRESSED, Status.FAILED: StatusEventType.FAILED}


def digest_render_data(items: list[Any]) -> dict[str, Any]:
    """What a digest's template is rendered with."""
    return {"items": items, "count": len(items)}


def digest_close_after_commit(digest_id: Any) -> None:
    transaction.on_commit(lambda: _close_quietly(digest_id))


def _close_quietly(digest_id: Any) -> None:
    """The close right after an accept's commit: a failure leaves the digest closing, and the
    sweeper closes it; the accept that triggered it has already succeeded."""
    try:
        digest_close(digest_id=digest_id)
    except Exception:
        logger.warning("could not close digest %s now; the sweeper will", digest_id, exc_info=True)


def digest_close_schedule(*, digest_id: Any, delay_seconds: float) -> bool:
    """Publish the close message of a new digest for its window's end, when that is within
    BROKER_DELAY_MAX_SECONDS (a longer wait stays in PostgreSQL: the sweeper closes it)."""
    if delay_seconds > get_config().broker_delay_max_seconds:
        return False
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=DIGEST_CLOSE_ROUTE.queue_name,
        actor_name=DIGEST_CLOSE_ROUTE.actor_name,
        args=(str(digest_id),),
        kwargs={},
        options={},
    )
    try:
        dramatiq.get_broker().enqueue(message, delay=max(1, int(delay_seconds * 1000)))
    except Exception:
        logger.warning("could not publish the close of digest %s; the sweeper will close it", digest_id, exc_info=True)
        return False
    return True


@dataclass(frozen=True)
class DigestCloseResult:
    outcome: str  # sent, failed (it could not be rendered), empty, not_due, closed (already, by another closer)
    notification_id: str = ""
    count: int = 0


def digest_close(*, digest_id: Any, now: datetime | None = None) -> DigestCloseResult:
    """Close a digest whose window has ended or that is full: one transaction holding its row lock
    makes its one notification from the members still ``digested`` (or none when all were
    cancelled: ``empty``) and marks it closed. A second closer waits on the lock, then finds it
    closed; an open digest not yet due is left as it is. A notification that ends suppressed
    (its recipient's consent, its cap) or failed (it no longer renders) gets its status event
    in the same transaction, as an accept's would; one that failed ends its digest ``failed``
    with the reason and one dead letter (its members stay the digest's), never a rollback that
    the sweeper would run again every pass."""
    now = now or timezone.now()
    cap_slot = NO_SLOT
    try:
        with transaction.atomic():
            digest = (
                Digest.objects.select_for_update(of=("self",))
                .select_related("client", "category")
                .filter(pk=digest_id, status__in=UNCLOSED_DIGEST_STATUSES)
                .first()
            )
            if digest is None:
                return DigestCloseResult("closed")
            if digest.status == DigestStatus.OPEN and digest.closes_at > now + timedelta(seconds=CLOSE_EARLY_TOLERANCE_SECONDS):
                return DigestCloseResult("not_due")
            items = list(
                Notification.objects.filter(digest=digest, status=Status.DIGESTED)
                .order_by("created_at", "id")
                .values_list("digest_data", flat=True)
            )
            digest.closed_at = now
            if not items:
                digest.status = DigestStatus.EMPTY
                digest.save(update_fields=["status", "closed_at", "updated_at"])
                return DigestCloseResult("empty")
            notification = _digest_notification(digest=digest, items=items, now=now)
            cap_slot = recipient_cap_take(notification=notification)  # may suppress it (throttled)
            delay = notification_enqueued_state(notification, now=now)
            notification.save(force_insert=True)
            digest.notification = notification
            if notification.status == Status.FAILED:
                # An outcome, not an error: the same items fail the same way at every close, so
                # the digest ends here, with one dead letter its members are reached from.
                digest.status, digest.failure_reason = DigestStatus.FAILED, notification.last_error
                dead_letter_create(notification, DeadLetterReason.RENDER_FAILED, notification.last_error)
                outcome_counts_add([outcome_key(notification, Status.FAILED, reason=notification.failure_reason)])
            else:
                digest.status = DigestStatus.SENT
            digest.save(update_fields=["status", "notification", "closed_at", "failure_reason", "updated_at"])
            if notification.enqueued_at is not None:
                transaction.on_commit(lambda: notification_publish(notification=notification, delay_seconds=delay))
            elif notification.status in ENDED_AT_CLOSE:
                status_event_record(notifications=[notification], event_type=ENDED_AT_CLOSE[notification.status])
                if notification.status == Status.SUPPRESSED:
                    channel, reason, mode = notification.channel, notification.suppressed_reason, digest.client.mode
                    transaction.on_commit(lambda: metrics.record_suppressed(channel=channel, reason=reason, mode=mode))
    except BaseException:
        cap_slot.release()  # rolled back: the notification that took it was never written
        raise
    failed = digest.status == DigestStatus.FAILED
    logger.log(
        logging.WARNING if failed else logging.INFO,
        "digest %s closed with %d items as notification %s%s",
        digest.pk,
        len(items),
        notification.pk,
        f", failed: {digest.failure_reason}" if failed else "",
        extra={"notification_id": str(notification.pk)},
    )
    return DigestCloseResult("failed" if failed else "sent", notification_id=str(notification.pk), count=len(items))


def _digest_notification(*, digest: Digest, items: list[Any], now: datetime) -> Notification:
    """The one notification of a digest, not yet saved: its template rendered with the items, its
    recipient's consent and quiet hours as they are now. One that cannot be rendered any more (the
    template was changed or deleted since, or the items make it too large) is made ``failed``
    with the reason, so the digest's outcome is visible rather than lost."""
    recipient = recipient_get(client=digest.client, user_id=digest.user_id)
    notification = Notification(
        id=uuid.uuid4(),
        client=digest.client,
        user_id=digest.user_id,
        channel=digest.channel,
        address=digest.address,
        category=digest.category,
        metadata=digest.metadata,
        priority=digest.priority,
        status=Status.ACCEPTED,
        next_attempt_at=now,
        idempotency_key=f"digest:{digest.pk}",
        trace_id=tracing.current_trace_id(),
        traceparent=tracing.current_traceparent(),
        created_at=now,
        digest=digest,
        template_key=digest.template_key,
    )
    try:
        content = notification_content(
            client=digest.client,
            recipient=recipient,
            category=digest.category,
            user_id=digest.user_id,
            channel=digest.channel,
            message="",
            subject=digest.subject,
            template=digest.template_key,
            data=digest_render_data(items),
            locale=digest.locale,
        )
    except Exception as exc:
        # Any exception of the render, not only a domain error: one escaping would roll the close
        # back and the sweeper would try it again every pass, forever. (A database error cannot be
        # recorded here: the transaction it broke rolls back at the next statement.)
        cause = exc.message if isinstance(exc, NotificationError) else f"{type(exc).__name__}: {exc}"
        notification.status = Status.FAILED
        notification.failure_reason = failure_reason_of(exc)
        notification.message = ""
        notification.last_error = f"the digest could not be rendered: {cause}"[:2000]
        return notification
    notification.subject = content.subject
    notification.message = content.message
    notification.html_message = content.html_message
    notification.headers = content.headers
    notification.locale = content.locale
    consent = consent_at_accept(category=digest.category, recipient=recipient, channel=digest.channel, due_at=now)
    if consent.suppressed_reason:
        notification.status = Status.SUPPRESSED
        notification.suppressed_reason = consent.suppressed_reason
    elif consent.hold_until is not None:
        notification.next_attempt_at = consent.hold_until
    return notification


def digest_member_cancel(*, notification: Notification) -> Notification:
    """Cancel a digest's member while its digest is not yet closed: under the digest's row lock,
    so the close either collected it already (then this is refused) or never will."""
    with transaction.atomic():
        digest_id = notification.digest_id
        digest = (
            None if digest_id is None else Digest.objects.select_for_update().filter(pk=digest_id).only("id", "status").first()
        )
        cancelled = (
            digest is not None
            and digest.status in UNCLOSED_DIGEST_STATUSES
            and Notification.transition(notification.pk, Status.CANCELLED, only_from=[Status.DIGESTED])
        )
        if cancelled and digest is not None:
            Digest.objects.filter(pk=digest.pk).update(item_count=F("item_count") - 1, updated_at=timezone.now())
    notification.refresh_from_db()
    if not cancelled:
        raise InvalidTransition(
            f"a notification that is {notification.status} and whose digest is closed can no longer be cancelled",
            extra={"status": notification.status},
        )
    return notification


def digest_sweep(*, now: datetime) -> int:
    """Close the digests that are due and that no close message closed: windows longer than
    BROKER_DELAY_MAX_SECONDS, a lost message, a closer that died after an accept's commit. The
    oldest due first, in turns by client (due_in_turns): one client's backlog of due digests
    takes its share of a pass, never every place in it; a pass stops after DIGEST_SWEEP_SECONDS."""
    grace = now - timedelta(seconds=DIGEST_SWEEP_GRACE_SECONDS)
    due = Digest.objects.filter(
        Q(status=DigestStatus.OPEN, closes_at__lte=grace) | Q(status=DigestStatus.CLOSING, updated_at__lte=grace)
    )
    # Due since its window ended, or since it went closing (full) when that came first.
    due_at = Case(When(status=DigestStatus.CLOSING, updated_at__lt=F("closes_at"), then=F("updated_at")), default=F("closes_at"))
    closed = 0
    deadline = time.monotonic() + DIGEST_SWEEP_SECONDS
    for pk in list(due_in_turns(due, due=due_at, limit=DIGEST_SWEEP_BATCH).values_list("pk", flat=True)):
        try:
            closed += digest_close(digest_id=pk, now=now).outcome in ("sent", "failed", "empty")
        except Exception:
            logger.warning("could not close digest %s; the next sweep tries again", pk, exc_info=True)
        if time.monotonic() >= deadline:
            break
    return closed
