"""Broadcasts: one message to every subscriber of a topic, accepted once per idempotency key and
fanned out by a worker into one notification per subscriber, batch by batch, resumably."""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import F
from django.utils import timezone

from ... import metrics
from ...conf import get_config
from ...errors import InvalidTransition, TemplateRenderFailed
from ...models import (
    ApiClient,
    Broadcast,
    BroadcastStatus,
    Notification,
    Status,
    StatusEventType,
    sources_of,
)
from ...selectors import (
    broadcast_get,
    due_in_turns,
    topic_subscriber_count,
    topic_subscribers_after,
)
from ...sql import insert_many_or_nothing, model_rows
from ..policy.caps import CapSlot
from ..records.outbox import notification_enqueued_state, notifications_publish
from ..records.outcome_counts import outcome_counts_add, outcome_key
from ..records.status_events import status_event_record
from .broadcast_accept import broadcast_fan_out_enqueue
from .broadcast_notifications import NotificationBuilder

logger = logging.getLogger("notifications.services")

# One actor message fans out for at most this long, then enqueues its own continuation: a long
# fan-out never outlives the actor's time limit or RabbitMQ's consumer timeout, and a worker
# stopping for a deploy loses at most one batch's work (rolled back, redone from the cursor).
FAN_OUT_SLICE_SECONDS = 30.0
SWEEP_BATCH = 100
# Broadcasts a fan-out may still be making notifications for (or about to).
UNFINISHED = (BroadcastStatus.PENDING, BroadcastStatus.FANNING_OUT)


# --- Fanning out --------------------------------------------------------------------------------


@dataclass
class FanOutReport:
    batches: int = 0
    created: int = 0
    finished: bool = False  # sent, cancelled or gone: nothing more to do
    superseded: bool = False  # another fan-out message owns the fan-out: this one stopped


def broadcast_fan_out(
    *, broadcast_id: Any, lease: uuid.UUID | str | None = None, slice_seconds: float = FAN_OUT_SLICE_SECONDS
) -> FanOutReport:
    """Make the notifications of a broadcast, one batch a transaction, for up to ``slice_seconds``;
    then enqueue the rest as a new message. Starts a pending broadcast, resumes one fanning out
    from its cursor (after a crash, or a continuation), stops at once when it was cancelled.

    One chain of messages at a time: the slice first takes the fan-out's lease from the one its
    message carries (``lease``), and its continuation carries the new one. A message whose lease
    is no longer the broadcast's (the sweeper resumed a chain whose continuation was only late,
    and the other message ran first) stops without a continuation, so chains never multiply."""
    report = FanOutReport()
    owned, finished = _fan_out_take(broadcast_id=broadcast_id, lease=_as_lease(lease))
    if owned is None:
        report.finished, report.superseded = finished, not finished
        return report
    deadline = time.monotonic() + slice_seconds
    # Each batch's subscribers are read and its notifications built in a second thread while the
    # batch before is written (building is Python, writing mostly PostgreSQL's time): a fan-out
    # takes about the longer of the two, not their sum. Only the write checks the lease and the
    # cursor, under the broadcast's lock, so a page built ahead is used only where it fits.
    # The second thread has a connection of its own, which sees only what is committed: called
    # inside a transaction of the caller's (a test's), pages are built in this thread instead.
    broadcast = Broadcast.objects.select_related("client", "category").get(pk=broadcast_id)
    ahead: Future[_Page] | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fan-out") as builder:
        build_ahead = not transaction.get_connection().in_atomic_block
        try:
            while True:
                try:
                    page = ahead.result() if ahead is not None else None
                except TemplateRenderFailed:
                    page = None  # the batch builds it again under the lock, and ends the broadcast failed
                ahead = None
                if build_ahead and page is not None and page.cursor is not None and time.monotonic() < deadline:
                    ahead = builder.submit(_page_build, broadcast, after=page.cursor)
                batch = broadcast_fan_out_batch(broadcast_id=broadcast_id, lease=owned, page=page)
                report.batches += 1
                report.created += batch.created
                if batch.finished or batch.superseded:
                    report.finished, report.superseded = batch.finished, batch.superseded
                    return report
                if time.monotonic() >= deadline:
                    broadcast_fan_out_enqueue(broadcast_id=broadcast_id, lease=owned)
                    return report
                if build_ahead and ahead is None and batch.cursor is not None:
                    ahead = builder.submit(_page_build, broadcast, after=batch.cursor)
        finally:
            if ahead is not None:
                with contextlib.suppress(BaseException):
                    ahead.result().release()
            builder.submit(connections.close_all).result()  # the builder thread's own connection


def _as_lease(lease: uuid.UUID | str | None) -> uuid.UUID | None:
    return uuid.UUID(lease) if isinstance(lease, str) else lease


def _fan_out_take(*, broadcast_id: Any, lease: uuid.UUID | None) -> tuple[uuid.UUID | None, bool]:
    """Take the fan-out for one slice: a new lease, written only where the broadcast still has the
    message's (a conditional UPDATE, so of two messages with the same lease one wins, on SQLite
    too), a pending broadcast moved to fanning out with ``total`` its subscribers now, the
    heartbeat moved. Returns the new lease, or None when this message has nothing to do, with
    True when that is because the broadcast is finished or gone, False when another message owns
    the fan-out: its lease moved on, or another slice holds its row lock (a batch in flight: that
    chain is alive, so this one exits rather than waiting to run behind it)."""
    with transaction.atomic():
        row = (
            Broadcast.objects.select_for_update(skip_locked=True)
            .filter(pk=broadcast_id)
            .only("status", "lease", "topic_id")
            .first()
        )
        if row is None:
            return None, not Broadcast.objects.filter(pk=broadcast_id).exists()
        if row.status not in UNFINISHED:
            return None, True
        if row.lease != lease:
            return None, False
        now = timezone.now()
        owned = uuid.uuid4()
        changes: dict[str, Any] = {"lease": owned, "updated_at": now}
        if row.status == BroadcastStatus.PENDING:
            changes.update(
                status=BroadcastStatus.FANNING_OUT, total=topic_subscriber_count(topic_id=row.topic_id), started_at=now
            )
        taken = Broadcast.objects.filter(pk=broadcast_id, status=row.status, lease=lease).update(**changes)
    return (owned, False) if taken else (None, False)


@dataclass(frozen=True)
class BatchOutcome:
    created: int
    finished: bool
    superseded: bool = False
    cursor: int | None = None  # where the next batch starts


@dataclass
class _Page:
    """A page of subscribers read and their notifications built, not yet written: by the lease
    holder's slice, the next page while the one before it is written (broadcast_fan_out)."""

    after: int  # the cursor the page starts after
    cursor: int | None  # the cursor after it; None: no subscriber left
    built: list[Notification] = field(default_factory=list)
    delays: dict[Any, float] = field(default_factory=dict)
    cap_slots: dict[Any, CapSlot] = field(default_factory=dict)
    now: datetime = field(default_factory=timezone.now)

    def release(self, *, kept: set[Any] | None = None) -> None:
        # A cap slot taken for a notification not written (its row was there already, or the
        # batch rolled back or was given up) is given back; a redone batch takes it again.
        for notification_id, slot in self.cap_slots.items():
            if notification_id not in (kept or set()):
                slot.release()


def _page_build(broadcast: Broadcast, *, after: int) -> _Page:
    """Read the next BROADCAST_BATCH_SIZE subscribers after ``after`` and build their
    notifications: reads, and the recipients' cap slots, but no write."""
    subscribers, cursor = topic_subscribers_after(
        topic_id=broadcast.topic_id, after=after, limit=get_config().broadcast_batch_size
    )
    page = _Page(after=after, cursor=cursor)
    if cursor is None:
        return page
    builder = NotificationBuilder(broadcast, subscribers=subscribers, now=page.now, cap_slots=page.cap_slots)
    try:
        page.built = [builder.build(recipient) for recipient in subscribers]
        page.delays = {n.pk: notification_enqueued_state(n, now=page.now) for n in page.built}
    except BaseException:
        page.release()
        raise
    return page


def broadcast_fan_out_batch(*, broadcast_id: Any, lease: uuid.UUID, page: _Page | None = None) -> BatchOutcome:
    """One batch of the fan-out in one transaction, by the holder of ``lease``: the next
    BROADCAST_BATCH_SIZE subscribers after the cursor, their notifications inserted ``ON CONFLICT
    (broadcast, user_id) DO NOTHING``, the cursor and heartbeat advanced; the due ones published
    after the commit. With no subscriber left, the broadcast is sent. A cancelled one is left
    alone; one whose lease another message took is left to it (``superseded``).

    ``page``: the batch already read and built (outside the transaction, while the previous batch
    was written); used only if it starts at the cursor found under the lock, else given back."""
    kept: set[Any] = set()
    try:
        with transaction.atomic():
            # Only the broadcast's row is locked (of self), not its client's: other broadcasts of the
            # client fan out at the same time. Only the lease's holder gets here (_fan_out_take), so
            # this waits at most for a take or a cancel, then reads the lease they may have moved.
            locked = Broadcast.objects.select_for_update(of=("self",)).select_related("client", "category")
            broadcast = locked.filter(pk=broadcast_id).first()
            if broadcast is None or broadcast.status != BroadcastStatus.FANNING_OUT:
                return BatchOutcome(created=0, finished=True)
            if broadcast.lease != lease:
                return BatchOutcome(created=0, finished=False, superseded=True)
            if page is None or page.after != broadcast.cursor:
                if page is not None:
                    page.release()
                page = _page_build(broadcast, after=broadcast.cursor)
            now = page.now
            if page.cursor is None:
                made = Notification.objects.filter(broadcast_id=broadcast.pk).count()
                Broadcast.objects.filter(pk=broadcast.pk).update(
                    status=BroadcastStatus.SENT, total=made, finished_at=now, updated_at=now
                )
                logger.info("broadcast %s fanned out: %d notifications", broadcast.pk, made)
                return BatchOutcome(created=0, finished=True)
            built, delays = page.built, page.delays
            inserted = insert_many_or_nothing(
                Notification, model_rows(built), conflict_fields=("broadcast_id", "user_id"), returning="id"
            )
            Broadcast.objects.filter(pk=broadcast.pk).update(cursor=page.cursor, updated_at=timezone.now())
            written = [n for n in built if n.pk in inserted]
            status_event_record(
                notifications=[n for n in written if n.status == Status.SUPPRESSED], event_type=StatusEventType.SUPPRESSED
            )
            # No statement unless a subscriber's notification failed as it was made.
            outcome_counts_add(
                outcome_key(n, Status.FAILED, reason=n.failure_reason) for n in written if n.status == Status.FAILED
            )
            transaction.on_commit(lambda: _after_batch(written, delays=delays, client=broadcast.client))
        kept = inserted
    except TemplateRenderFailed as error:
        # The batch rolled back; it would fail the same way every time it was made again.
        failed = _broadcast_fail(broadcast_id=broadcast_id, lease=lease, reason=error.message)
        return BatchOutcome(created=0, finished=failed, superseded=not failed)
    finally:
        if page is not None:
            page.release(kept=kept)
    return BatchOutcome(created=len(written), finished=False, cursor=page.cursor)


def _broadcast_fail(*, broadcast_id: Any, lease: uuid.UUID, reason: str) -> bool:
    """End a fan-out whose content cannot be rendered: ``failed`` with the reason, by the holder of
    ``lease`` only. What earlier batches made stays, and is delivered as usual."""
    now = timezone.now()
    failed = Broadcast.objects.filter(pk=broadcast_id, status=BroadcastStatus.FANNING_OUT, lease=lease).update(
        status=BroadcastStatus.FAILED, failure_reason=reason[:2000], finished_at=now, updated_at=now
    )
    if failed:
        logger.warning("broadcast %s failed: %s", broadcast_id, reason)
    return bool(failed)


def _after_batch(written: list[Notification], *, delays: dict[Any, float], client: ApiClient) -> None:
    """Count the batch's suppressed notifications; publish the enqueued ones (a refused publish
    leaves them to the sweeper)."""
    for notification in written:
        if notification.status == Status.SUPPRESSED:
            metrics.record_suppressed(
                channel=notification.channel, reason=notification.suppressed_reason, mode=metrics.mode_of(client)
            )
    notifications_publish(pending=[(n, delays[n.pk]) for n in written if n.enqueued_at is not None])


# --- Cancelling, and resuming what a dead worker left --------------------------------------------


def broadcast_cancel(*, client: ApiClient, broadcast_id: Any) -> tuple[Broadcast, int]:
    """Stop a broadcast's fan-out and cancel its notifications that have not started sending;
    returns the broadcast and how many were cancelled. Under the broadcast's row lock, so a batch
    in flight commits first (and is cancelled with the rest) and no batch comes after. A sent
    broadcast may be cancelled too (what is still pending, e.g. held by quiet hours); a cancelled
    one is an InvalidTransition."""
    broadcast = broadcast_get(client=client, broadcast_id=broadcast_id)
    with transaction.atomic():
        locked = Broadcast.objects.select_for_update().get(pk=broadcast.pk)
        if locked.status == BroadcastStatus.CANCELLED:
            raise InvalidTransition("this broadcast is already cancelled", extra={"status": locked.status})
        now = timezone.now()
        Broadcast.objects.filter(pk=broadcast.pk).update(status=BroadcastStatus.CANCELLED, finished_at=now, updated_at=now)
        # The transition rules' own sources of cancelled: what has not started sending.
        cancelled = Notification.objects.filter(broadcast_id=broadcast.pk, status__in=sources_of(Status.CANCELLED)).update(
            status=Status.CANCELLED, updated_at=now
        )
    logger.info("broadcast %s cancelled: %d notifications cancelled", broadcast.pk, cancelled)
    broadcast.refresh_from_db()
    return broadcast, cancelled


def broadcast_resume_stale(*, now: datetime | None = None) -> int:
    """Enqueue again the fan-out of every broadcast whose heartbeat is older than
    BROADCAST_STALE_SECONDS (its worker died, or its message was lost); it resumes from its
    cursor. Each is claimed by moving its heartbeat, so several sweepers enqueue it once. The
    message carries the fan-out's lease as it is: when the old chain's continuation was only
    waiting in the queue, whichever of the two runs first takes the fan-out and the other stops."""
    now = now or timezone.now()
    stale_before = now - timedelta(seconds=get_config().broadcast_stale_seconds)
    stale = Broadcast.objects.filter(status__in=UNFINISHED, updated_at__lt=stale_before)
    resumed = 0
    # The longest stalled first, in turns by client: one client's many broadcasts never fill a pass.
    for pk, lease in list(due_in_turns(stale, due=F("updated_at"), limit=SWEEP_BATCH).values_list("pk", "lease")):
        claimed = Broadcast.objects.filter(pk=pk, status__in=UNFINISHED, updated_at__lt=stale_before, lease=lease).update(
            updated_at=now
        )
        if claimed and broadcast_fan_out_enqueue(broadcast_id=pk, lease=lease):
            logger.warning("broadcast %s: its fan-out had stalled; enqueued again", pk)
            resumed += 1
    return resumed
