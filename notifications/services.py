"""The domain operations. Views, actors, admin actions, commands and the event consumer all call
these functions and nothing else writes notifications.

The database row is the outbox: a notification's status, ``next_attempt_at`` and ``enqueued_at``
say everything about where it is, so anything the broker loses (a publish during an outage, a
delayed message dropped by dramatiq #545, a worker killed mid-send) is found again by
:func:`notification_sweep`. A broker message is only ever a hint to look at a row now; the claim
in :func:`notification_deliver` makes a duplicate hint harmless.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Max, OuterRef, Q, QuerySet
from django.utils import timezone

from . import metrics, tracing
from .addresses import recipient_address, validate_address
from .channels import OutgoingMessage, get_provider, provider_account
from .conf import get_config
from .errors import (
    IdempotencyConflict,
    IdempotencyInFlight,
    InvalidTransition,
    NotFound,
    PermanentChannelError,
    TransientChannelError,
    ValidationFailed,
)
from .models import (
    FINISHED_STATUSES,
    ApiClient,
    AttemptOutcome,
    DeadLetter,
    DeadLetterReason,
    DeadLetterSource,
    DeliveryAttempt,
    IdempotencyKey,
    IdempotencyKeyState,
    Notification,
    Priority,
    ProcessedEvent,
    Recipient,
    Resolution,
    Status,
)
from .ratelimit import wait_for_send_slot

logger = logging.getLogger(__name__)

# A key still "processing" this long after it was claimed belongs to a request that died before
# committing anything (the notification and the key's completion commit together), so a new
# request may take it over.
IDEMPOTENCY_STALE_SECONDS = 60
# Rows due this recently are left to the on-commit enqueue that is about to happen.
SWEEP_GRACE_SECONDS = 2.0
SWEEP_BATCH = 500


# --- API clients and recipients ----------------------------------------------------------------


def api_client_create(*, name: str) -> tuple[ApiClient, str]:
    """Create an API client; returns it with its token, which is shown this once only."""
    name = name.strip()
    if not name:
        raise ValidationFailed("an API client needs a name", extra={"field": "name"})
    if ApiClient.objects.filter(name=name).exists():
        raise ValidationFailed(f"an API client named {name!r} already exists", extra={"field": "name"})
    client = ApiClient(name=name, webhook_secret=uuid.uuid4().hex + uuid.uuid4().hex)
    token = client.set_new_token()
    client.save()
    return client, token


def api_client_get_or_create(*, name: str) -> ApiClient:
    """The named client, created (with a token nobody knows yet) when missing; race-safe."""
    client = ApiClient.objects.filter(name=name).first()
    if client is not None:
        return client
    candidate = ApiClient(name=name, webhook_secret=uuid.uuid4().hex + uuid.uuid4().hex)
    candidate.set_new_token()
    try:
        with transaction.atomic():
            candidate.save()
        return candidate
    except IntegrityError:
        return ApiClient.objects.get(name=name)


def api_client_rotate_token(*, client: ApiClient) -> str:
    token = client.set_new_token()
    client.token_rotated_at = timezone.now()
    client.save(update_fields=["token_hash", "token_prefix", "token_rotated_at"])
    return token


def api_client_revoke(*, client: ApiClient) -> None:
    ApiClient.objects.filter(pk=client.pk).update(is_active=False)
    client.is_active = False


RECIPIENT_FIELDS = ("email", "phone", "push_tokens", "webhook_url", "locale", "timezone")


def recipient_upsert(*, client: ApiClient, user_id: str, data: dict[str, Any]) -> tuple[Recipient, bool]:
    """Create or replace the client's recipient ``user_id``; addresses are validated per channel."""
    values = {name: data.get(name, [] if name == "push_tokens" else "") for name in RECIPIENT_FIELDS}
    if values["email"]:
        values["email"] = validate_address("email", values["email"], field="email")
    if values["phone"]:
        values["phone"] = validate_address("sms", values["phone"], field="phone")
    if values["webhook_url"]:
        values["webhook_url"] = validate_address("webhook", values["webhook_url"], field="webhook_url")
    values["push_tokens"] = [validate_address("push", token, field="push_tokens") for token in values["push_tokens"]]
    recipient, created = Recipient.objects.update_or_create(client=client, user_id=user_id, defaults=values)
    return recipient, created


def recipient_delete(*, client: ApiClient, user_id: str) -> None:
    deleted, _ = Recipient.objects.filter(client=client, user_id=user_id).delete()
    if not deleted:
        raise NotFound(f"no recipient {user_id!r}")


# --- Accepting ---------------------------------------------------------------------------------


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

    The key is claimed with a unique insert committed on its own, so a concurrent request with the
    same key sees it at once (409) instead of waiting; the notification and the key's stored
    response then commit together, so a replay always finds what the first request answered.
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
        recipient = Recipient.objects.filter(client=client, user_id=request.user_id).first()
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


def notification_get(*, client: ApiClient, notification_id: Any) -> Notification:
    try:
        return Notification.objects.get(pk=uuid.UUID(str(notification_id)), client=client)
    except (Notification.DoesNotExist, ValueError):
        raise NotFound("no such notification") from None


# --- Queueing ----------------------------------------------------------------------------------


def notification_enqueue(*, notification_id: Any) -> bool:
    """Hand a pending notification to the broker if it is due soon enough; True if a message went.

    Far-future sends and long backoffs stay in the database for the sweeper: Dramatiq keeps a
    delayed message unacked in worker memory until its ETA (dramatiq #827) and RabbitMQ requeues
    deliveries left unacked past its consumer timeout.
    """
    from .actors import actor_for_priority

    notification = Notification.objects.filter(pk=notification_id).only("id", "status", "priority", "next_attempt_at").first()
    if notification is None or notification.status not in (Status.ACCEPTED, Status.QUEUED, Status.RETRYING):
        return False
    now = timezone.now()
    due_at = notification.next_attempt_at or now
    delay = max(0.0, (due_at - now).total_seconds())
    if delay > get_config().broker_delay_max_seconds:
        return False
    try:
        actor_for_priority(notification.priority).send_with_options(args=(str(notification.pk),), delay=int(delay * 1000) or None)
    except Exception:
        # The row stays pending with no enqueued_at, which is exactly what the sweeper looks for.
        logger.warning("could not enqueue notification %s; the sweeper will retry", notification.pk, exc_info=True)
        return False
    fields: dict[str, Any] = {"enqueued_at": now}
    if delay == 0:
        Notification.transition(notification.pk, Status.QUEUED, only_from=[Status.ACCEPTED, Status.QUEUED], **fields)
        Notification.objects.filter(pk=notification.pk, status=Status.RETRYING).update(**fields)
    else:
        Notification.objects.filter(pk=notification.pk, status__in=[Status.ACCEPTED, Status.RETRYING]).update(**fields)
    return True


@dataclass
class SweepReport:
    enqueued: int = 0
    requeued: int = 0
    recovered: int = 0

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
    ).values_list("pk", flat=True)[:SWEEP_BATCH]
    for pk in list(due):
        report.enqueued += notification_enqueue(notification_id=pk)

    lost = Notification.objects.filter(
        Q(enqueued_at__lt=now - queued_timeout)
        | Q(enqueued_at__isnull=True, updated_at__lt=now - timedelta(seconds=SWEEP_GRACE_SECONDS)),
        status=Status.QUEUED,
    ).values_list("pk", flat=True)[:SWEEP_BATCH]
    for pk in list(lost):
        report.requeued += notification_enqueue(notification_id=pk)

    stuck = Notification.objects.filter(
        status=Status.SENDING, claimed_at__lt=now - timedelta(seconds=config.sending_timeout_seconds)
    ).values_list("pk", flat=True)[:SWEEP_BATCH]
    for pk in list(stuck):
        report.recovered += _notification_recover_interrupted(
            notification_id=pk, claimed_before=now - timedelta(seconds=config.sending_timeout_seconds)
        )
    return report


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
        if attempt is not None:
            _attempt_finish(attempt, AttemptOutcome.INTERRUPTED, error=error)
        _schedule_retry_or_dead_letter(notification, error, claimed_at=notification.claimed_at)
    return True


# --- Delivering --------------------------------------------------------------------------------


class SendRateLimited(Exception):
    """The channel's shared rate limit (or the provider's 429) says: not now. Not an attempt."""

    def __init__(self, retry_after: float):
        super().__init__(f"rate limited; retry in {retry_after:.3f}s")
        self.retry_after = retry_after


@dataclass(frozen=True)
class DeliveryOutcome:
    outcome: str  # delivered | retrying | failed | dead | skipped
    attempt_number: int = 0


def notification_deliver(*, notification_id: Any) -> DeliveryOutcome:
    """Deliver one notification if it is still pending and due: claim, send, record.

    Raises SendRateLimited when the channel has no free slot; the actor turns that into a
    Dramatiq ``Retry`` with the delay, which the Retries middleware does not count (see actors).
    """
    notification = Notification.objects.select_related("client").filter(pk=notification_id).first()
    if notification is None or notification.status not in (Status.ACCEPTED, Status.QUEUED, Status.RETRYING):
        return DeliveryOutcome("skipped")
    if notification.next_attempt_at and notification.next_attempt_at > timezone.now() + timedelta(seconds=1):
        # An early duplicate hint; the row's own schedule (and the sweeper) decides when.
        return DeliveryOutcome("skipped")
    reservation = wait_for_send_slot(notification.channel, account=provider_account(notification.channel))
    if not reservation.reserved:
        metrics.record_rate_limited(channel=notification.channel)
        raise SendRateLimited(reservation.wait_seconds)
    attempt = _notification_claim(notification)
    if attempt is None:
        return DeliveryOutcome("skipped")
    return _notification_send(notification, attempt)


def _notification_claim(notification: Notification) -> DeliveryAttempt | None:
    """Atomically take the notification for this worker; None when another worker got it first."""
    now = timezone.now()
    with transaction.atomic():
        won = Notification.transition(
            notification.pk,
            Status.SENDING,
            only_from=[Status.ACCEPTED, Status.QUEUED, Status.RETRYING],
            claimed_at=now,
            attempt_count=F("attempt_count") + 1,
        )
        if not won:
            return None
        # Read back only what the claim changed (a full refresh would drop the prefetched client),
        # with the last attempt's number, in one query.
        claimed = (
            Notification.objects.filter(pk=notification.pk)
            .annotate(last_number=Max("attempts__number"))
            .values("status", "claimed_at", "attempt_count", "updated_at", "last_number")
            .get()
        )
        for field in ("status", "claimed_at", "attempt_count", "updated_at"):
            setattr(notification, field, claimed[field])
        number = (claimed["last_number"] or 0) + 1
        return DeliveryAttempt.objects.create(notification=notification, number=number, started_at=now)


def _claim_finish(notification_id: Any, *, claimed_at: datetime, to: str, **fields: Any) -> bool:
    """End the claim made at ``claimed_at``: out of ``sending`` only while it is still that claim."""
    return Notification.transition(notification_id, to, only_from=[Status.SENDING], only_claimed_at=claimed_at, **fields)


def _notification_send(notification: Notification, attempt: DeliveryAttempt) -> DeliveryOutcome:
    message = OutgoingMessage(
        notification_id=str(notification.pk),
        channel=notification.channel,
        address=notification.address,
        subject=notification.subject,
        body=notification.message,
        metadata=notification.metadata,
        idempotency_key=str(notification.pk),
        client_name=notification.client.name,
        webhook_secret=notification.client.webhook_secret,
    )
    started = time.monotonic()
    with tracing.provider_span(notification, attempt.number) as span:
        try:
            result = get_provider(notification.channel).send(message)
        except PermanentChannelError as exc:
            tracing.record_outcome(span, "permanent_error")
            return _record_permanent_failure(notification, attempt, exc, started)
        except TransientChannelError as exc:
            tracing.record_outcome(span, "transient_error")
            return _record_transient_failure(notification, attempt, exc, started)
        except Exception as exc:
            # A provider bug is not the recipient's fault: retry it like a transient error.
            logger.exception("provider for %s raised unexpectedly", notification.channel)
            tracing.record_outcome(span, "transient_error")
            return _record_transient_failure(notification, attempt, exc, started)
        tracing.record_outcome(span, "delivered")
    now = timezone.now()
    with transaction.atomic():
        _attempt_finish(attempt, AttemptOutcome.DELIVERED, started=started, response=result.response_summary)
        _claim_finish(
            notification.pk,
            claimed_at=attempt.started_at,
            to=Status.DELIVERED,
            delivered_at=now,
            provider_message_id=result.provider_message_id[:255],
            last_error="",
        )
    metrics.record_delivered(channel=notification.channel, accepted_at=notification.created_at)
    logger.info(
        "delivered notification %s on %s", notification.pk, notification.channel, extra={"notification_id": str(notification.pk)}
    )
    return DeliveryOutcome("delivered", attempt.number)


def _attempt_finish(
    attempt: DeliveryAttempt,
    outcome: str,
    *,
    error: BaseException | None = None,
    started: float | None = None,
    response: str = "",
) -> None:
    attempt.outcome = outcome
    attempt.finished_at = timezone.now()
    seconds = None if started is None else time.monotonic() - started
    if seconds is not None:
        attempt.duration_ms = int(seconds * 1000)
    metrics.record_attempt(channel=attempt.notification.channel, outcome=outcome, seconds=seconds)
    if error is not None:
        attempt.error_class = f"{type(error).__module__}.{type(error).__qualname__}"
        attempt.error_message = str(error)[:4000]
    attempt.provider_response = response[:2000]
    attempt.save(update_fields=["outcome", "finished_at", "duration_ms", "error_class", "error_message", "provider_response"])


def _record_permanent_failure(
    notification: Notification, attempt: DeliveryAttempt, exc: PermanentChannelError, started: float
) -> DeliveryOutcome:
    with transaction.atomic():
        _attempt_finish(attempt, AttemptOutcome.PERMANENT_ERROR, error=exc, started=started)
        if _claim_finish(notification.pk, claimed_at=attempt.started_at, to=Status.FAILED, last_error=str(exc)[:4000]):
            notification.refresh_from_db()
            _dead_letter_create(notification, DeadLetterReason.PERMANENT_FAILURE, str(exc))
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


def _record_transient_failure(
    notification: Notification, attempt: DeliveryAttempt, exc: Exception, started: float
) -> DeliveryOutcome:
    throttled = isinstance(exc, TransientChannelError) and exc.code == "throttled"
    with transaction.atomic():
        _attempt_finish(attempt, AttemptOutcome.TRANSIENT_ERROR, error=exc, started=started)
        notification.refresh_from_db()
        if throttled:
            # The provider's 429 is a rate limit, not a failure: wait as long as it asks and do
            # not spend the retry budget on it.
            retry_after = exc.retry_after if isinstance(exc, TransientChannelError) and exc.retry_after else 1.0
            won = _claim_finish(
                notification.pk,
                claimed_at=attempt.started_at,
                to=Status.RETRYING,
                attempt_count=F("attempt_count") - 1,
                next_attempt_at=timezone.now() + timedelta(seconds=retry_after),
                enqueued_at=None,
                last_error=str(exc)[:4000],
            )
            if won:
                metrics.record_rate_limited(channel=notification.channel)
            outcome = "retrying" if won else "skipped"
        else:
            outcome = _schedule_retry_or_dead_letter(notification, exc, claimed_at=attempt.started_at)
    if outcome == "retrying":
        notification_enqueue(notification_id=notification.pk)
    return DeliveryOutcome(outcome, attempt.number)


def retry_delay_seconds(*, channel: str, attempt_number: int, retry_after: float | None = None) -> float:
    """Exponential backoff with full jitter: uniform(0, min(cap, base * 2^(n-1))), and never
    sooner than a provider's Retry-After."""
    policy = get_config().retry_policy(channel)
    ceiling = min(policy.cap_seconds, policy.base_seconds * (2 ** max(0, attempt_number - 1)))
    delay = random.uniform(0, ceiling)
    return max(delay, retry_after or 0.0)


def _schedule_retry_or_dead_letter(notification: Notification, exc: BaseException, *, claimed_at: datetime) -> str:
    """After a failed try of the claim made at ``claimed_at``: retry later, or dead-letter when the
    budget is spent; "skipped" when that claim is no longer current (see _claim_finish)."""
    policy = get_config().retry_policy(notification.channel)
    if notification.attempt_count >= policy.max_attempts:
        if not _claim_finish(notification.pk, claimed_at=claimed_at, to=Status.DEAD, last_error=str(exc)[:4000]):
            return "skipped"
        notification.refresh_from_db()
        _dead_letter_create(notification, DeadLetterReason.RETRIES_EXHAUSTED, str(exc))
        metrics.record_dead(channel=notification.channel)
        logger.warning(
            "notification %s is dead after %d attempts",
            notification.pk,
            notification.attempt_count,
            extra={"notification_id": str(notification.pk)},
        )
        return "dead"
    retry_after = exc.retry_after if isinstance(exc, TransientChannelError) else None
    delay = retry_delay_seconds(channel=notification.channel, attempt_number=notification.attempt_count, retry_after=retry_after)
    if not _claim_finish(
        notification.pk,
        claimed_at=claimed_at,
        to=Status.RETRYING,
        next_attempt_at=timezone.now() + timedelta(seconds=delay),
        enqueued_at=None,
        last_error=str(exc)[:4000],
    ):
        return "skipped"
    metrics.record_retry(channel=notification.channel, reason=getattr(exc, "code", "unexpected"))
    return "retrying"


# --- Dead letters ------------------------------------------------------------------------------


def _dead_letter_create(notification: Notification, reason: str, error: str) -> DeadLetter:
    return DeadLetter.objects.create(
        source=DeadLetterSource.NOTIFICATION,
        notification=notification,
        channel=notification.channel,
        reason=reason,
        last_error=error[:4000],
        attempts=notification.attempt_count,
    )


@dataclass(frozen=True)
class RedriveResult:
    done: bool
    detail: str


def dead_letter_redrive(*, dead_letter: DeadLetter, by: Any) -> RedriveResult:
    """Send a dead letter again with a fresh attempt budget, recording who asked and when.

    The admin's Retry button, its bulk action and ``manage.py redrive`` all come here. A dead
    letter already resolved, or whose notification has since been delivered, is left alone.
    """
    if dead_letter.source == DeadLetterSource.EVENT:
        from .events import dead_letter_republish

        return dead_letter_republish(dead_letter=dead_letter, by=by)
    if dead_letter.notification_id is None:
        return RedriveResult(False, "this dead letter has no notification to send")
    now = timezone.now()
    with transaction.atomic():
        claimed = DeadLetter.objects.filter(pk=dead_letter.pk, resolution=Resolution.UNRESOLVED).update(
            resolution=Resolution.RETRIED, resolved_by=by, resolved_at=now
        )
        if not claimed:
            dead_letter.refresh_from_db()
            return RedriveResult(False, f"already {dead_letter.get_resolution_display().lower()}")
        requeued = Notification.transition(
            dead_letter.notification_id,
            Status.QUEUED,
            only_from=[Status.FAILED, Status.DEAD],
            attempt_count=0,
            next_attempt_at=now,
            enqueued_at=None,
            claimed_at=None,
        )
        if not requeued:
            # Read before marking the rollback: no query may run in the block after set_rollback.
            status = Notification.objects.filter(pk=dead_letter.notification_id).values_list("status", flat=True).first()
            transaction.set_rollback(True)
            return RedriveResult(False, f"its notification is {status}, not failed or dead")
        notification_id = dead_letter.notification_id
        transaction.on_commit(lambda: notification_enqueue(notification_id=notification_id))
    dead_letter.refresh_from_db()
    return RedriveResult(True, "re-enqueued")


def dead_letter_discard(*, dead_letter: DeadLetter, by: Any) -> RedriveResult:
    """Mark a dead letter as dealt with, without sending anything."""
    updated = DeadLetter.objects.filter(pk=dead_letter.pk, resolution=Resolution.UNRESOLVED).update(
        resolution=Resolution.DISCARDED, resolved_by=by, resolved_at=timezone.now()
    )
    dead_letter.refresh_from_db()
    if not updated:
        return RedriveResult(False, f"already {dead_letter.get_resolution_display().lower()}")
    return RedriveResult(True, "discarded")


# --- Retention ---------------------------------------------------------------------------------


@dataclass
class PurgeReport:
    notifications: int = 0
    attempts: int = 0
    dead_letters: int = 0
    idempotency_keys: int = 0
    processed_events: int = 0


def notification_purge(*, older_than: timedelta, batch_size: int = 1000, now: datetime | None = None) -> PurgeReport:
    """Delete finished notifications made before ``now - older_than`` with their attempts and
    resolved dead letters, and expired idempotency keys and event dedup records, one short
    transaction per batch so the tables are never locked for long. A notification with an
    unresolved dead letter is kept, and so is every unresolved dead letter."""
    now = now or timezone.now()
    cutoff = now - older_than
    report = PurgeReport()
    open_dead_letter = DeadLetter.objects.filter(notification=OuterRef("pk"), resolution=Resolution.UNRESOLVED)
    old_finished = Notification.objects.filter(status__in=list(FINISHED_STATUSES), created_at__lt=cutoff).filter(
        ~Exists(open_dead_letter)
    )
    while batch := list(old_finished.values_list("pk", flat=True)[:batch_size]):
        with transaction.atomic():
            report.attempts += DeliveryAttempt.objects.filter(notification_id__in=batch).delete()[0]
            report.dead_letters += DeadLetter.objects.filter(notification_id__in=batch).delete()[0]
            report.notifications += Notification.objects.filter(pk__in=batch).delete()[0]
    report.dead_letters += _delete_in_batches(
        DeadLetter.objects.filter(notification__isnull=True, resolved_at__lt=cutoff).exclude(resolution=Resolution.UNRESOLVED),
        batch_size,
    )
    report.idempotency_keys += _delete_in_batches(IdempotencyKey.objects.filter(expires_at__lt=now), batch_size)
    # The consumer only replaces an expired dedup record when the same event key comes again.
    report.processed_events += _delete_in_batches(ProcessedEvent.objects.filter(expires_at__lt=now), batch_size)
    return report


def _delete_in_batches(rows: QuerySet[Any], batch_size: int) -> int:
    """Delete ``rows`` ``batch_size`` at a time; each batch re-checks the filter as it deletes."""
    deleted = 0
    while ids := list(rows.values_list("pk", flat=True)[:batch_size]):
        deleted += rows.filter(pk__in=ids).delete()[0]
    return deleted
