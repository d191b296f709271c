"""Accepting a broadcast: once per idempotency key, checked against the client's limits, then
handed to the fan-out queue."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import dramatiq
from django.db import transaction
from django.utils import timezone

from ...conf import BROADCAST_FAN_OUT_ROUTE
from ...errors import IdempotencyInFlight, ValidationFailed
from ...models import (
    DEFAULT_CATEGORY,
    ApiClient,
    Broadcast,
    BroadcastStatus,
    Priority,
)
from ...selectors import (
    topic_get,
)
from ..intake.idempotency import AcceptResult, idempotency_claim, idempotency_replay
from ..policy.content import requested_content
from ..policy.limits import broadcast_start_check
from ..policy.preferences import category_for_client

logger = logging.getLogger("notifications.services")


@dataclass(frozen=True)
class BroadcastRequest:
    """A request to broadcast, already shape-checked by its entry point."""

    topic: str
    channel: str = "email"
    channels: tuple[str, ...] = ()  # an ordered fallback route instead of channel
    message: str = ""
    subject: str = ""
    template: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    category: str = DEFAULT_CATEGORY
    locale: str = ""  # else each recipient's, else DEFAULT_LOCALE
    priority: str = Priority.BULK


def broadcast_create(
    *, client: ApiClient, request: BroadcastRequest, idempotency_key: str | None, fingerprint: str
) -> AcceptResult:
    """Accept a broadcast exactly once per (client, idempotency key), as a notification is: the
    key with its final answer and the broadcast in one transaction, the fan-out enqueued after
    the commit. The key space is the client's notification keys' (one table), so a key already
    used for a notification is a 422 here (fingerprints differ), never a replay of the other.
    Past the client's BROADCASTS_PER_HOUR_MAX it is a RateLimitExceeded (429), its key not kept."""
    key = idempotency_key or str(uuid.uuid4())
    try:
        broadcast = broadcast_build(client=client, request=request, idempotency_key=key)
    except ValidationFailed:
        replay = idempotency_replay(client=client, key=key, fingerprint=fingerprint, now=timezone.now())
        if replay is not None:
            return replay
        raise
    body = {"id": str(broadcast.id), "status": broadcast.status}
    with transaction.atomic():
        if not idempotency_claim(client=client, key=key, fingerprint=fingerprint, body=body, now=broadcast.created_at):
            replay = idempotency_replay(client=client, key=key, fingerprint=fingerprint, now=broadcast.created_at)
            if replay is None:  # pragma: no cover - the key vanished between the conflict and the read
                raise IdempotencyInFlight("a request with this Idempotency-Key is still being processed; retry shortly")
            return replay
        # The client's row lock: two broadcasts of one client never both take its last one of the hour.
        own_limit = ApiClient.objects.select_for_update().filter(pk=client.pk).values_list("broadcasts_per_hour_max", flat=True)
        broadcast_start_check(client=client, own_limit=own_limit.first(), now=broadcast.created_at)
        broadcast.save(force_insert=True)
        transaction.on_commit(lambda: broadcast_fan_out_enqueue(broadcast_id=broadcast.pk))
    return AcceptResult(status_code=202, body=body, replayed=False, notification_id=str(broadcast.id))


def broadcast_build(*, client: ApiClient, request: BroadcastRequest, idempotency_key: str) -> Broadcast:
    """The broadcast the request asks for, checked (its topic, category and content: the template
    is rendered once in the default locale, so a missing variable is a 400 now, not a failure per
    subscriber later), not yet saved."""
    topic = topic_get(client=client, key=request.topic, counted=False)
    if topic is None:
        raise ValidationFailed(
            f"no topic {request.topic!r}: create it with PUT /api/v1/topics/{request.topic}", extra={"field": "topic"}
        )
    category = category_for_client(client=client, key=request.category)
    channels = request.channels or (request.channel,)
    for channel in channels:
        requested_content(request, client=client, recipient=None, category=category, user_id="", channel=channel)
    now = timezone.now()
    return Broadcast(
        id=uuid.uuid4(),
        client=client,
        topic=topic,
        channel=channels[0],
        channels=list(request.channels),
        subject=request.subject,
        message=request.message,
        template_key=request.template,
        data=request.data,
        metadata=request.metadata,
        category=category,
        locale=request.locale,
        priority=request.priority,
        status=BroadcastStatus.PENDING,
        idempotency_key=idempotency_key,
        created_at=now,
        updated_at=now,
    )


def broadcast_fan_out_enqueue(*, broadcast_id: Any, lease: uuid.UUID | None = None) -> bool:
    """Hand a broadcast's fan-out to a worker, addressed to its actor by name, with the ``lease``
    the message must find on the broadcast to go on (None: the fan-out has not started); False
    when the broker refused (the sweeper enqueues it again once its heartbeat is stale)."""
    route = BROADCAST_FAN_OUT_ROUTE
    args = (str(broadcast_id),) if lease is None else (str(broadcast_id), str(lease))
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=route.queue_name, actor_name=route.actor_name, args=args, kwargs={}, options={}
    )
    try:
        dramatiq.get_broker().enqueue(message)
    except Exception:
        logger.warning("could not enqueue the fan-out of broadcast %s; the sweeper will retry", broadcast_id, exc_info=True)
        return False
    return True
