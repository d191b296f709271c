"""Reads of topics and broadcasts: a topic and its subscribers in keyset pages, a broadcast and its
counts."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from ..errors import NotFound
from ..models import (
    ApiClient,
    Broadcast,
    Notification,
    Recipient,
    Status,
    Topic,
    TopicSubscription,
)


def topic_get(*, client: ApiClient, key: str, counted: bool = True) -> Topic | None:
    """The client's topic ``key``, with ``subscriber_count`` (a count over its unique index)
    unless ``counted`` is False: a write only needs the row, and the count reads every
    subscription, so a topic built a thousand at a time would be counted over and over."""
    topics = Topic.objects.filter(client=client, key=key)
    if not counted:
        return topics.first()
    subscribers = TopicSubscription.objects.filter(topic_id=OuterRef("pk")).order_by().values("topic_id")
    count = subscribers.annotate(n=Count("pk")).values("n")
    return topics.annotate(subscriber_count=Coalesce(Subquery(count), 0)).first()


def topic_subscriber_count(*, topic_id: int) -> int:
    return TopicSubscription.objects.filter(topic_id=topic_id).count()


def recipient_ids_by_user_id(*, client: ApiClient, user_ids: list[str]) -> dict[str, int]:
    """The stored recipients of ``user_ids`` (those the client has), by user id."""
    rows = Recipient.objects.filter(client=client, user_id__in=user_ids).values_list("user_id", "pk")
    return dict(rows)


def topic_subscribers_after(*, topic_id: int, after: int, limit: int) -> tuple[list[Recipient], int | None]:
    """The next ``limit`` subscribers of a topic in recipient id order after ``after``: one keyset
    page over the unique (topic, recipient) index (an index-only range scan, never an OFFSET), then
    those recipients by primary key. As one join, the planner merged with a scan of the topic's
    subscriptions from its first one, every page: quadratic over a fan-out. Returns the page's
    recipients and the cursor after it (None: no subscriber left); a recipient deleted between the
    two reads is simply not in the page."""
    page = TopicSubscription.objects.filter(topic_id=topic_id, recipient_id__gt=after).order_by("recipient_id")
    recipient_ids = list(page.values_list("recipient_id", flat=True)[:limit])
    if not recipient_ids:
        return [], None
    return list(Recipient.objects.filter(pk__in=recipient_ids).order_by("pk")), recipient_ids[-1]


def broadcast_get(*, client: ApiClient, broadcast_id: Any) -> Broadcast:
    """The client's broadcast ``broadcast_id``; NotFound for another client's or a bad id."""
    try:
        return Broadcast.objects.select_related("topic", "category").get(pk=uuid.UUID(str(broadcast_id)), client=client)
    except (Broadcast.DoesNotExist, ValueError):
        raise NotFound("no such broadcast") from None


@dataclass(frozen=True)
class BroadcastCounts:
    """A broadcast's notifications by outcome; ``pending`` is everything not final yet."""

    created: int = 0
    delivered: int = 0
    suppressed: int = 0
    failed: int = 0  # failed or dead
    cancelled: int = 0
    pending: int = 0


def broadcast_counts(*, broadcast_id: Any) -> BroadcastCounts:
    """How many notifications a broadcast made, by outcome: one GROUP BY status over the
    (broadcast, status) index."""
    rows = Notification.objects.filter(broadcast_id=broadcast_id).values("status").annotate(n=Count("pk")).order_by()
    by_status = {row["status"]: row["n"] for row in rows}
    created = sum(by_status.values())
    delivered = by_status.get(Status.DELIVERED, 0)
    suppressed = by_status.get(Status.SUPPRESSED, 0)
    failed = by_status.get(Status.FAILED, 0) + by_status.get(Status.DEAD, 0)
    cancelled = by_status.get(Status.CANCELLED, 0)
    return BroadcastCounts(
        created=created,
        delivered=delivered,
        suppressed=suppressed,
        failed=failed,
        cancelled=cancelled,
        pending=created - delivered - suppressed - failed - cancelled,
    )
