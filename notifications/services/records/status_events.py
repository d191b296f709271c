"""Status webhooks: the status changes an API client cares about, posted to its status_webhook_url,
signed as webhook deliveries are (Standard Webhooks), at least once.

A :class:`StatusEvent` row is written in the transaction of the change it reports (the row is the
outbox), and a message naming it is published after that commit; a publish that fails only leaves
the row for the sweeper. Nothing here can fail or hold up the delivery that caused the event: the
post happens later, in a worker of its own queue, and a publish error is caught and logged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import dramatiq
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from ...broker_batch import messages_publish
from ...channels.webhook.provider import webhook_post_signed
from ...concurrency import TURN_WAIT_SECONDS, webhook_turn_take
from ...conf import STATUS_EVENT_ROUTE, get_config
from ...errors import PermanentChannelError, TransientChannelError
from ...models import ApiClient, Notification, Status, StatusEvent, StatusEventState, StatusEventType
from ...models.clients import webhook_secrets_in_grace
from ...selectors import due_in_turns
from ...token_cache import REMEMBERED_MARK

logger = logging.getLogger("notifications.services")

USER_AGENT = "notifications-status/1"
PROVIDER = "the status webhook endpoint"
# A post holds its event this long past its deadline (WEBHOOK_TIMEOUT_SECONDS, the whole post), so
# a duplicate message cannot post it at the same time; a worker that dies mid-post frees it then.
LEASE_GRACE_SECONDS = 30.0
SWEEP_BATCH = 500

# The notification's status an event reports; feedback events (bounced, complained) report the
# status the notification has when they are recorded.
EVENT_STATUS: dict[str, str] = {
    StatusEventType.DELIVERED: Status.DELIVERED,
    StatusEventType.FAILED: Status.FAILED,
    StatusEventType.DEAD: Status.DEAD,
    StatusEventType.SUPPRESSED: Status.SUPPRESSED,
}


# --- Recording ------------------------------------------------------------------------------------


def status_event_record(
    *,
    notifications: Iterable[Notification],
    event_type: str,
    status: str | None = None,
    occurred_at: datetime | None = None,
    webhook_urls: Mapping[Any, str] | None = None,
) -> list[StatusEvent]:
    """Record ``event_type`` for each notification whose client has a status_webhook_url, in the
    caller's transaction (call it in the one that makes the change), and publish the events once
    it commits. Returns the events written.

    Costs no statement when the notifications' clients have no URL and the URL is known: from
    ``webhook_urls`` (client id -> its status_webhook_url, as a delivery claim read it,
    models/claims.py) or from the notification's client object already loaded (accept).
    Otherwise one read of the clients.
    """
    wanted: list[Notification] = []
    unknown: list[Notification] = []
    for notification in notifications:
        url = _known_status_webhook_url(notification, webhook_urls or {})
        if url is None:
            unknown.append(notification)
        elif url:
            wanted.append(notification)
    if unknown:
        with_url = set(
            ApiClient.objects.filter(pk__in={n.client_id for n in unknown})
            .exclude(status_webhook_url="")
            .values_list("pk", flat=True)
        )
        wanted.extend(n for n in unknown if n.client_id in with_url)
    if not wanted:
        return []
    now = timezone.now()
    events = [
        StatusEvent(
            client_id=notification.client_id,
            notification_id=notification.pk,
            type=event_type,
            status=status or EVENT_STATUS.get(event_type, notification.status),
            channel=notification.channel,
            occurred_at=occurred_at or now,
            next_attempt_at=now,
            enqueued_at=now,
            created_at=now,
        )
        for notification in wanted
    ]
    StatusEvent.objects.bulk_create(events)
    # robust: whatever the publish does, the commit that caused it (a delivery's outcome) stands.
    transaction.on_commit(lambda: status_events_publish(events=events), robust=True)
    return events


def _known_status_webhook_url(notification: Notification, webhook_urls: Mapping[Any, str]) -> str | None:
    """The notification's client's status_webhook_url if known without a query; else None."""
    if notification.client_id in webhook_urls:
        return webhook_urls[notification.client_id]
    if Notification.client.is_cached(notification):
        client = notification.client
        # A client the token cache handed out may predate a change another process just made:
        # read again (one query, only when an event is to be recorded) rather than lose the event.
        if "status_webhook_url" not in client.get_deferred_fields() and not getattr(client, REMEMBERED_MARK, False):
            return client.status_webhook_url
    return None


# --- Publishing -----------------------------------------------------------------------------------


def status_event_message(*, event_id: Any) -> dramatiq.Message[Any]:
    """The message that asks a worker to post one event, addressed to its actor by name."""
    return dramatiq.Message(
        queue_name=STATUS_EVENT_ROUTE.queue_name,
        actor_name=STATUS_EVENT_ROUTE.actor_name,
        args=(str(event_id),),
        kwargs={},
        options={},
    )


def status_events_publish(*, events: list[StatusEvent]) -> bool:
    """Publish the messages of events committed as enqueued, in one round trip. When the broker
    refuses, clear their ``enqueued_at`` so the sweeper publishes them; never raises."""
    ids = [event.pk for event in events]
    try:
        messages_publish(dramatiq.get_broker(), [status_event_message(event_id=pk) for pk in ids])
        return True
    except Exception:
        logger.warning("could not publish %d status events; the sweeper will retry", len(ids), exc_info=True)
    try:
        StatusEvent.objects.filter(pk__in=ids, state=StatusEventState.PENDING, enqueued_at__isnull=False).update(enqueued_at=None)
    except Exception:
        # Still found by the sweeper, only after QUEUED_TIMEOUT_SECONDS instead of at once.
        logger.warning("could not hand %d status events back to the sweeper", len(ids), exc_info=True)
    return False


def status_event_sweep(*, now: datetime, grace_seconds: float) -> int:
    """Publish pending events that are due and whose message is missing: never published (the
    broker refused), published long ago (lost), or freed by a post whose worker died. Returns how
    many were published."""
    queued_timeout = timedelta(seconds=get_config().queued_timeout_seconds)
    lost = StatusEvent.objects.filter(
        Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=now - queued_timeout),
        state=StatusEventState.PENDING,
        next_attempt_at__lte=now - timedelta(seconds=grace_seconds),
    )
    # The oldest due first, in turns by client: one client's failing endpoint never fills a pass.
    ids = list(
        due_in_turns(lost, due=F("next_attempt_at"), limit=SWEEP_BATCH, candidates=20 * SWEEP_BATCH).values_list("pk", flat=True)
    )
    if not ids:
        return 0
    # Through the same filter, so a row another sweeper or a post took meanwhile is left to it.
    StatusEvent.objects.filter(pk__in=ids).filter(pk__in=lost.values("pk")).update(enqueued_at=now)
    events = list(StatusEvent.objects.filter(pk__in=ids, enqueued_at=now))
    if events and status_events_publish(events=events):
        return len(events)
    return 0


def status_event_redrive(*, event: StatusEvent) -> bool:
    """Post a dead event again with a fresh budget; False when it is not dead."""
    now = timezone.now()
    updated = StatusEvent.objects.filter(pk=event.pk, state=StatusEventState.DEAD).update(
        state=StatusEventState.PENDING, attempt_count=0, next_attempt_at=now, enqueued_at=now
    )
    if updated:
        status_events_publish(events=[event])
    return bool(updated)


# --- Posting --------------------------------------------------------------------------------------


def status_event_payload(event: StatusEvent) -> dict[str, Any]:
    """The body Standard Webhooks recommends: ``type``, ``timestamp`` (when the change happened,
    ISO 8601; the post's own time is the webhook-timestamp header) and ``data``."""
    return {
        "type": event.type,
        "timestamp": event.occurred_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "data": {
            "event_id": str(event.pk),
            "notification_id": str(event.notification_id),
            "status": event.status,
            "channel": event.channel,
        },
    }


def status_event_deliver(*, event_id: Any) -> str:
    """Post one pending, due event to its client's status_webhook_url: "delivered", "retrying",
    "dead", "waiting" when its client's webhook turns are all out (it comes back in a moment, not
    an attempt), or "skipped" when it is not pending and due (a duplicate message, a post in flight).

    The claim is one conditional UPDATE that moves ``next_attempt_at`` to the end of a lease, so
    a second message finds the event not due, and the sweeper finds it again if this worker dies.
    The lease outlasts the post's deadline, so no second post starts while one is in flight. The
    outcome is written only while that claim is current.
    """
    config = get_config()
    now = timezone.now()
    lease_until = now + timedelta(seconds=config.webhook_timeout_seconds + LEASE_GRACE_SECONDS)
    claimed = StatusEvent.objects.filter(
        pk=event_id, state=StatusEventState.PENDING, next_attempt_at__lte=now + timedelta(seconds=1)
    ).update(next_attempt_at=lease_until, enqueued_at=None, attempt_count=F("attempt_count") + 1)
    if not claimed:
        return "skipped"
    event = StatusEvent.objects.select_related("client").get(pk=event_id)
    # Status posts take from the same per-client turns as the client's webhook notifications.
    turn = webhook_turn_take(client_id=event.client_id)
    if turn is None:
        return _wait_for_turn(event, lease_until)
    try:
        _post(event)
    except PermanentChannelError as exc:
        return _finish_failed(event, lease_until, exc, retry=False)
    except TransientChannelError as exc:
        return _finish_failed(event, lease_until, exc, retry=True)
    except Exception as exc:
        logger.exception("posting status event %s failed unexpectedly", event.pk)
        return _finish_failed(event, lease_until, exc, retry=True)
    finally:
        turn.release()
    StatusEvent.objects.filter(pk=event.pk, state=StatusEventState.PENDING, next_attempt_at=lease_until).update(
        state=StatusEventState.DELIVERED, delivered_at=timezone.now(), last_error=""
    )
    return "delivered"


def _wait_for_turn(event: StatusEvent, lease_until: datetime) -> str:
    """Give the claim back as if never made (not an attempt) and come back after TURN_WAIT_SECONDS."""
    now = timezone.now()
    given_back = StatusEvent.objects.filter(pk=event.pk, state=StatusEventState.PENDING, next_attempt_at=lease_until).update(
        next_attempt_at=now, enqueued_at=now, attempt_count=F("attempt_count") - 1
    )
    if not given_back:
        return "skipped"
    try:
        dramatiq.get_broker().enqueue(status_event_message(event_id=event.pk), delay=int(TURN_WAIT_SECONDS * 1000))
    except Exception:
        logger.warning("could not publish status event %s again; the sweeper will", event.pk, exc_info=True)
        StatusEvent.objects.filter(pk=event.pk, enqueued_at=now).update(enqueued_at=None)
    return "waiting"


def _post(event: StatusEvent) -> None:
    """One signed POST of the event, as the webhook channel posts (its signature, its SSRF guard);
    raises the channel error an answer means."""
    client = event.client
    if not client.status_webhook_url:
        raise PermanentChannelError("the API client has no status_webhook_url any more", code="not_configured")
    previous = webhook_secrets_in_grace(
        client.webhook_secrets_retired, now=timezone.now(), grace_seconds=get_config().webhook_secret_grace_seconds
    )
    webhook_post_signed(
        url=client.status_webhook_url,
        secret=client.webhook_secret,
        previous_secrets=previous,
        body=json.dumps(status_event_payload(event), separators=(",", ":")),
        timestamp=str(int(time.time())),
        idempotency_key=str(event.pk),
        user_agent=USER_AGENT,
        provider=PROVIDER,
    )


def _finish_failed(event: StatusEvent, lease_until: datetime, exc: BaseException, *, retry: bool) -> str:
    """Dead when the error is permanent or the budget is spent; else pending again after a backoff
    (a delayed message when it is short, the sweeper when it is long, as for notifications)."""
    config = get_config()
    policy = config.status_webhook_retry_policy
    claim = StatusEvent.objects.filter(pk=event.pk, state=StatusEventState.PENDING, next_attempt_at=lease_until)
    error = str(exc)[:4000]
    if not retry or event.attempt_count >= policy.max_attempts:
        if not claim.update(state=StatusEventState.DEAD, last_error=error):
            return "skipped"
        logger.warning("status event %s is dead after %d attempts: %s", event.pk, event.attempt_count, error)
        return "dead"
    retry_after = exc.retry_after if isinstance(exc, TransientChannelError) else None
    delay = policy.delay_seconds(event.attempt_count, retry_after)
    now = timezone.now()
    publish = delay <= config.broker_delay_max_seconds
    if not claim.update(next_attempt_at=now + timedelta(seconds=delay), enqueued_at=now if publish else None, last_error=error):
        return "skipped"
    if publish:
        try:
            dramatiq.get_broker().enqueue(status_event_message(event_id=event.pk), delay=int(delay * 1000) or None)
        except Exception:
            logger.warning("could not publish the retry of status event %s; the sweeper will", event.pk, exc_info=True)
            StatusEvent.objects.filter(pk=event.pk, enqueued_at=now).update(enqueued_at=None)
    return "retrying"
