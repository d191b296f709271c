"""Recording how a send ended: the attempt row, the notification's next status, retries and dead letters."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from ... import metrics, tracing
from ...channels import SendResult
from ...conf import get_config
from ...errors import (
    PermanentChannelError,
    TransientChannelError,
)
from ...models import (
    ApiClient,
    AttemptOutcome,
    Claim,
    ClientSnapshot,
    DeadLetterReason,
    DeliveryAttempt,
    Notification,
    Status,
    StatusEventType,
)
from ...sql import update_rows
from ..feedback.provider_feedback import provider_status_reported_record
from ..policy.routing import channel_attempt_count, route_advance, route_fields, routes_delivered
from ..policy.suppressions import suppression_from_permanent_error
from ..records.outbox import notification_publish
from ..records.outcome_counts import failure_reason_of, outcome_counts_add, outcome_key
from ..records.status_events import status_event_record
from .dead_letters import dead_letter_create

logger = logging.getLogger("notifications.services")


@dataclass(frozen=True)
class DeliveryOutcome:
    outcome: str  # delivered | retrying | failed | dead | skipped | suppressed | held | fallback (next channel)
    attempt_number: int = 0


def claim_finish(notification_id: Any, *, claimed_at: datetime, to: str, **fields: Any) -> bool:
    """End the claim made at ``claimed_at``: out of ``sending`` only while it is still that claim."""
    return Notification.transition(notification_id, to, only_from=[Status.SENDING], only_claimed_at=claimed_at, **fields)


def attempt_finish(
    attempt: DeliveryAttempt,
    outcome: str,
    *,
    client: ApiClient | ClientSnapshot,
    error: BaseException | None = None,
    started: float | None = None,
    response: str = "",
) -> None:
    attempt.outcome = outcome
    attempt.finished_at = timezone.now()
    seconds = None if started is None else time.monotonic() - started
    if seconds is not None:
        attempt.duration_ms = int(seconds * 1000)
    metrics.record_attempt(
        channel=attempt.channel or attempt.notification.channel,
        outcome=outcome,
        seconds=seconds,
        account=attempt.account,
        mode=metrics.mode_of(client),
    )
    if error is not None:
        attempt.error_class = f"{type(error).__module__}.{type(error).__qualname__}"
        attempt.error_message = str(error)[:4000]
    attempt.provider_response = response[:2000]
    attempt.save(
        update_fields=["outcome", "finished_at", "duration_ms", "error_class", "error_message", "provider_response", "account"]
    )


def record_permanent_failure(claim: Claim, exc: PermanentChannelError, started: float) -> DeliveryOutcome:
    notification, attempt = claim.notification, claim.attempt
    with transaction.atomic():
        attempt_finish(attempt, AttemptOutcome.PERMANENT_ERROR, client=claim.client, error=exc, started=started)
        suppression_from_permanent_error(notification=notification, error=exc)  # an SMS STOP, a dead push token
        # A fallback notification moves on to its next channel; only its last one fails it.
        step = route_advance(notification, claimed_at=attempt.started_at, reason="permanent_error", error=str(exc))
        if step.advanced:
            return DeliveryOutcome("fallback", attempt.number)
        reason = failure_reason_of(exc)
        if not step.lost and claim_finish(
            notification.pk,
            claimed_at=attempt.started_at,
            to=Status.FAILED,
            last_error=str(exc)[:4000],
            failure_reason=reason,
            **route_fields(step),
        ):
            dead_letter_create(notification, DeadLetterReason.PERMANENT_FAILURE, str(exc))
            status_event_record(notifications=[notification], event_type=StatusEventType.FAILED, webhook_urls=_urls([claim]))
            outcome_counts_add([outcome_key(notification, Status.FAILED, account=attempt.account, reason=reason)])
    # The code, not the provider's words: those can quote the recipient or echo the message, and
    # they are kept on the DeliveryAttempt for support staff.
    logger.warning(
        "notification %s failed permanently (%s, HTTP %s)",
        notification.pk,
        exc.code,
        exc.extra.get("http_status", "-"),
        extra={"notification_id": str(notification.pk)},
    )
    return DeliveryOutcome("failed", attempt.number)


def record_transient_failure(claim: Claim, exc: Exception, started: float) -> DeliveryOutcome:
    notification, attempt = claim.notification, claim.attempt
    with transaction.atomic():
        attempt_finish(attempt, AttemptOutcome.TRANSIENT_ERROR, client=claim.client, error=exc, started=started)
        # A provider's 429 is a failed attempt like any other (a destination that always answers
        # 429 must end dead, not loop); its Retry-After is the least we wait. Only our own shared
        # rate limiter's waits are free (they never reach the provider).
        outcome = schedule_retry_or_dead_letter(
            notification, exc, claimed_at=attempt.started_at, client=claim.client, account=attempt.account
        )
    if outcome == "retrying" and isinstance(exc, TransientChannelError) and exc.code == "throttled":
        metrics.record_rate_limited(channel=notification.channel)
    return DeliveryOutcome(outcome, attempt.number)


def retry_delay_seconds(*, channel: str, attempt_number: int, retry_after: float | None = None) -> float:
    """Exponential backoff with full jitter: uniform(0, min(cap, base * 2^(n-1))), and never
    sooner than a provider's Retry-After, itself capped by the policy's cap (a Retry-After of a
    day must not park a notification for a day)."""
    return get_config().retry_policy(channel).delay_seconds(attempt_number, retry_after)


def schedule_retry_or_dead_letter(
    notification: Notification,
    exc: BaseException,
    *,
    claimed_at: datetime,
    client: ApiClient | ClientSnapshot,
    account: str = "",
) -> str:
    """After a failed try of the claim made at ``claimed_at`` (through provider ``account``): retry
    later, or dead-letter when the budget is spent; "skipped" when that claim is no longer current
    (see claim_finish). ``client``: the notification's, as read (its test mode, its status webhook)."""
    policy = get_config().retry_policy(notification.channel)
    attempts = channel_attempt_count(notification)  # a route's channel has its own budget
    if attempts >= policy.max_attempts:
        # A fallback notification moves on to its next channel, with that channel's own budget.
        step = route_advance(notification, claimed_at=claimed_at, reason="retries_exhausted", error=str(exc))
        if step.advanced:
            return "fallback"
        reason = failure_reason_of(exc)
        if step.lost or not claim_finish(
            notification.pk,
            claimed_at=claimed_at,
            to=Status.DEAD,
            last_error=str(exc)[:4000],
            failure_reason=reason,
            **route_fields(step),
        ):
            return "skipped"
        dead_letter_create(notification, DeadLetterReason.RETRIES_EXHAUSTED, str(exc))
        status_event_record(
            notifications=[notification],
            event_type=StatusEventType.DEAD,
            webhook_urls={notification.client_id: client.status_webhook_url},
        )
        outcome_counts_add([outcome_key(notification, Status.DEAD, account=account, reason=reason)])
        metrics.record_dead(channel=notification.channel, mode=metrics.mode_of(client))
        logger.warning(
            "notification %s is dead after %d attempts",
            notification.pk,
            notification.attempt_count,
            extra={"notification_id": str(notification.pk)},
        )
        return "dead"
    retry_after = exc.retry_after if isinstance(exc, TransientChannelError) else None
    delay = retry_delay_seconds(channel=notification.channel, attempt_number=attempts, retry_after=retry_after)
    now = timezone.now()
    # A short backoff is a delayed broker message, published after this commit with no further
    # write; a long one waits in the row for the sweeper (see services/records/outbox.py).
    publish = delay <= get_config().broker_delay_max_seconds
    if not claim_finish(
        notification.pk,
        claimed_at=claimed_at,
        to=Status.RETRYING,
        next_attempt_at=now + timedelta(seconds=delay),
        enqueued_at=now if publish else None,
        last_error=str(exc)[:4000],
    ):
        return "skipped"
    metrics.record_retry(channel=notification.channel, reason=getattr(exc, "code", "unexpected"), mode=metrics.mode_of(client))
    if publish:
        notification.enqueued_at = now
        transaction.on_commit(lambda: notification_publish(notification=notification, delay_seconds=delay))
    return "retrying"


@dataclass(frozen=True)
class Sent:
    """A send the provider took, not yet recorded."""

    claim: Claim
    result: SendResult
    seconds: float


def _urls(claims: list[Claim]) -> dict[Any, str]:
    """The status webhook URL of each claim's client, by client id, as the claim read it."""
    return {claim.notification.client_id: claim.client.status_webhook_url for claim in claims}


def deliveries_record(sent: list[Sent]) -> dict[str, DeliveryOutcome]:
    """Record the deliveries of one chunk in one transaction: the attempts in one UPDATE, the
    notifications in another (each still in the claim it was sent under)."""
    if not sent:
        return {}
    now = timezone.now()
    for item in sent:
        attempt = item.claim.attempt
        attempt.outcome = AttemptOutcome.DELIVERED
        attempt.finished_at = now
        attempt.duration_ms = int(item.seconds * 1000)
        attempt.provider_response = item.result.response_summary[:2000]
    claims: dict[datetime, dict[Any, str]] = {}
    for item in sent:
        claims.setdefault(item.claim.attempt.started_at, {})[item.claim.notification.pk] = item.result.provider_message_id
    # The dashboard's counter each adds one to, in the statement that marks it delivered.
    counted = {
        item.claim.notification.pk: outcome_key(
            item.claim.notification, Status.DELIVERED, account=item.claim.attempt.account, delivered_at=now
        )
        for item in sent
    }
    with transaction.atomic():
        update_rows(
            DeliveryAttempt,
            {
                item.claim.attempt.pk: {
                    "duration_ms": item.claim.attempt.duration_ms,
                    "provider_response": item.claim.attempt.provider_response,
                    "account": item.claim.attempt.account,
                }
                for item in sent
            },
            same={"outcome": AttemptOutcome.DELIVERED, "finished_at": now},
        )
        finished: set[Any] = set()
        for at, ids in claims.items():
            finished |= Notification.deliveries_finish(
                ids, claimed_at=at, delivered_at=now, counted={pk: counted[pk] for pk in ids}
            )
        routes_delivered([item.claim.notification for item in sent], delivered_at=now)  # no statement unless one has a route
        lost = {str(item.claim.notification.pk) for item in sent} - {str(pk) for pk in finished}
        # No statement unless a client has a status webhook (the claim returned its URL).
        delivered = [item.claim for item in sent if str(item.claim.notification.pk) not in lost]
        status_event_record(
            notifications=[claim.notification for claim in delivered],
            event_type=StatusEventType.DELIVERED,
            occurred_at=now,
            webhook_urls=_urls(delivered),
        )
    outcomes: dict[str, DeliveryOutcome] = {}
    for item in sent:
        pk = str(item.claim.notification.pk)
        with tracing.context_attached(tracing.delivery_context(item.claim.notification)):  # its line in its own trace
            outcomes[pk] = _delivery_recorded(item, lost=pk in lost)
        if item.result.provider_status and pk not in lost:
            # A status the provider reported with its answer (the capture sink's reserved
            # addresses), recorded after the delivery as its callback would be.
            provider_status_reported_record(notification=item.claim.notification, status=item.result.provider_status)
    return outcomes


def _delivery_recorded(item: Sent, *, lost: bool) -> DeliveryOutcome:
    """The metrics and log line of one delivery recorded by _deliveries_record, and its outcome."""
    notification, pk = item.claim.notification, str(item.claim.notification.pk)
    mode = metrics.mode_of(item.claim.client)
    metrics.record_attempt(
        channel=notification.channel,
        outcome=AttemptOutcome.DELIVERED,
        seconds=item.seconds,
        account=item.claim.attempt.account,
        mode=mode,
    )
    if lost:
        # The provider took it, but only after the sweeper had given this send up for lost:
        # the attempt says delivered, the notification follows its newer claim (it may go twice).
        logger.warning(
            "notification %s was delivered after its claim was recovered; it may be sent again",
            pk,
            extra={"notification_id": pk},
        )
        return DeliveryOutcome("skipped", item.claim.attempt.number)
    metrics.record_delivered(channel=notification.channel, accepted_at=notification.created_at, mode=mode)
    logger.info("delivered notification %s on %s", pk, notification.channel, extra={"notification_id": pk})
    return DeliveryOutcome("delivered", item.claim.attempt.number)
