"""The outbox sweeper: enqueue what is due, re-enqueue what the broker lost, recover sends whose
worker died, and publish again the status events whose message is missing."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from ..conf import get_config
from ..errors import (
    TransientChannelError,
)
from ..inbox.store import inbox_events_purge
from ..models import (
    AttemptOutcome,
    Notification,
    Status,
)
from ..selectors import due_in_turns
from .delivery.outcomes import attempt_finish, schedule_retry_or_dead_letter
from .digests.close import digest_sweep
from .fanout.broadcasts import broadcast_resume_stale
from .records.outbox import notifications_enqueue
from .records.status_events import status_event_sweep

# Rows due this recently are left to the on-commit enqueue that is about to happen.
SWEEP_GRACE_SECONDS = 2.0
SWEEP_BATCH = 500
# The oldest due rows a pass ranks by client to take its SWEEP_BATCH: a client's backlog older
# than this many rows delays another's newer ones until the pass has taken the backlog's head.
SWEEP_CANDIDATES = 20 * SWEEP_BATCH

logger = logging.getLogger("notifications.services")


@dataclass
class SweepReport:
    enqueued: int = 0
    requeued: int = 0
    recovered: int = 0
    status_events: int = 0  # published again (not in ``total``, which counts notifications)
    broadcasts: int = 0  # stalled fan-outs enqueued again (not in ``total`` either)
    digests: int = 0  # digests closed whose close message never came (not in ``total`` either)
    inbox_events: int = 0  # live-stream events past their resume window, deleted

    @property
    def total(self) -> int:
        return self.enqueued + self.requeued + self.recovered


def notification_sweep(*, now: datetime | None = None) -> SweepReport:
    """One pass of the outbox sweeper: enqueue what is due, re-enqueue what the broker may have
    lost, and recover sends whose worker died. Safe to run in several processes at once."""
    config = get_config()
    now = now or timezone.now()
    report = SweepReport()
    queued_timeout = timedelta(seconds=config.queued_timeout_seconds)

    due = Notification.objects.filter(
        Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=now - queued_timeout),
        status__in=[Status.ACCEPTED, Status.RETRYING],
        next_attempt_at__lte=now - timedelta(seconds=SWEEP_GRACE_SECONDS),
    )
    report.enqueued += notifications_enqueue(notification_ids=_in_turns(due, due=F("next_attempt_at")))

    lost = Notification.objects.filter(
        Q(enqueued_at__lt=now - queued_timeout)
        | Q(enqueued_at__isnull=True, updated_at__lt=now - timedelta(seconds=SWEEP_GRACE_SECONDS)),
        status=Status.QUEUED,
    )
    report.requeued += notifications_enqueue(notification_ids=_in_turns(lost, due=F("updated_at")))

    stuck = Notification.objects.filter(
        status=Status.SENDING, claimed_at__lt=now - timedelta(seconds=config.sending_timeout_seconds)
    )
    for pk in _in_turns(stuck, due=F("claimed_at")):
        report.recovered += _notification_recover_interrupted(
            notification_id=pk, claimed_before=now - timedelta(seconds=config.sending_timeout_seconds)
        )
    report.status_events = status_event_sweep(now=now, grace_seconds=SWEEP_GRACE_SECONDS)
    report.broadcasts = broadcast_resume_stale(now=now)
    report.digests = digest_sweep(now=now)
    report.inbox_events = _inbox_events_expire(now=now, retention=timedelta(seconds=config.inbox.event_retention_seconds))
    return report


# The inbox's events are deleted past their resume window at most this often per process: one
# indexed DELETE a minute, not one a sweep.
INBOX_EVENTS_EXPIRE_EVERY = timedelta(seconds=60)
_inbox_events_expired_at: list[datetime] = []


def _inbox_events_expire(*, now: datetime, retention: timedelta) -> int:
    if _inbox_events_expired_at and now - _inbox_events_expired_at[-1] < INBOX_EVENTS_EXPIRE_EVERY:
        return 0
    _inbox_events_expired_at[:] = [now]
    return inbox_events_purge(before=now - retention)


def _in_turns(rows: QuerySet[Notification], *, due: F) -> list[Any]:
    """A pass's share of ``rows``: the oldest due first, in turns by client (due_in_turns), ranked
    among the SWEEP_CANDIDATES oldest so that a backlog of millions costs a bounded scan."""
    return list(due_in_turns(rows, due=due, limit=SWEEP_BATCH, candidates=SWEEP_CANDIDATES).values_list("pk", flat=True))


def _notification_recover_interrupted(*, notification_id: Any, claimed_before: datetime) -> bool:
    """A send whose worker vanished: record the attempt as interrupted and try again."""
    error = TransientChannelError("the worker stopped before the send finished (recovered by the sweeper)")
    with transaction.atomic():
        # claimed_at again under the lock: the send may have ended and been claimed afresh since the scan.
        notification = (
            Notification.objects.select_for_update()
            .filter(pk=notification_id, status=Status.SENDING, claimed_at__lt=claimed_before)
            .first()
        )
        if notification is None or notification.claimed_at is None:
            return False
        attempt = notification.attempts.filter(outcome=AttemptOutcome.IN_PROGRESS).order_by("-number").first()
        # Its client, read (a rare path): its test mode labels the metrics, its status webhook URL
        # says whether a dead notification's event is written.
        client = notification.client
        if attempt is not None:
            attempt_finish(attempt, AttemptOutcome.INTERRUPTED, client=client, error=error)
        account = attempt.account if attempt is not None else ""
        schedule_retry_or_dead_letter(notification, error, claimed_at=notification.claimed_at, client=client, account=account)
    return True
