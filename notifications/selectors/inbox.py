"""Reads of the in-app inbox: a user's feed by keyset, their counts (one row), their events after an id."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime

from ..errors import NotFound, ValidationFailed
from ..models import InboxCounter, InboxCounts, InboxEvent, InboxItem

STATUSES = ("unseen", "unread", "all")
ARCHIVED = ("exclude", "include", "only")


@dataclass(frozen=True)
class FeedPage:
    items: list[InboxItem]
    next_cursor: str | None


def inbox_items_of(*, client_id: Any, user_id: str) -> QuerySet[InboxItem]:
    return InboxItem.objects.filter(client_id=client_id, user_id=user_id)


def inbox_item_get(*, client_id: Any, user_id: str, item_id: str) -> InboxItem:
    """The user's item; NotFound for another user's, another client's, or none."""
    try:
        pk = uuid.UUID(str(item_id))
    except ValueError:
        raise NotFound(f"no inbox item {item_id!r}") from None
    item = inbox_items_of(client_id=client_id, user_id=user_id).filter(pk=pk).first()
    if item is None:
        raise NotFound(f"no inbox item {item_id!r}")
    return item


def inbox_counts(*, client_id: Any, user_id: str) -> InboxCounts:
    row = InboxCounter.objects.filter(client_id=client_id, user_id=user_id).values_list("unseen", "unread", "total").first()
    return InboxCounts(*row) if row else InboxCounts()


def inbox_feed_filter(
    items: QuerySet[InboxItem], *, status: str = "all", archived: str = "exclude", category: str = "", thread: str = ""
) -> QuerySet[InboxItem]:
    if status == "unseen":
        items = items.filter(seen_at__isnull=True)
    elif status == "unread":
        items = items.filter(read_at__isnull=True)
    if archived == "exclude":
        items = items.filter(archived_at__isnull=True)
    elif archived == "only":
        items = items.filter(archived_at__isnull=False)
    if category:
        items = items.filter(category=category)
    if thread:
        items = items.filter(thread_key=thread)
    return items


def inbox_feed(*, items: QuerySet[InboxItem], cursor: str = "", limit: int = 20) -> FeedPage:
    """A page of ``items`` newest first, after ``cursor`` (the last page's next_cursor): keyset on
    (created_at, id), which the feed index serves however deep the page."""
    if cursor:
        created_at, pk = _cursor_decode(cursor)
        items = items.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    page = list(items.order_by("-created_at", "-id")[: limit + 1])
    if len(page) <= limit:
        return FeedPage(page, None)
    page = page[:limit]
    return FeedPage(page, _cursor_encode(page[-1]))


def _cursor_encode(item: InboxItem) -> str:
    raw = json.dumps([item.created_at.isoformat(), str(item.id)], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_decode(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, pk = json.loads(raw)
        moment = parse_datetime(created)
        if moment is None:
            raise ValueError
        return moment, uuid.UUID(pk)
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError, UnicodeDecodeError):
        raise ValidationFailed("cursor is not one this feed gave", extra={"field": "cursor"}) from None


def inbox_events_after(*, client_id: Any, user_id: str, after: int, limit: int = 500) -> list[InboxEvent]:
    """The user's events after id ``after``, oldest first (what a stream sends next)."""
    return list(InboxEvent.objects.filter(client_id=client_id, user_id=user_id, id__gt=after).order_by("id")[:limit])


def inbox_counts_and_last_event(*, client_id: Any, user_id: str) -> tuple[InboxCounts, int]:
    """The user's counts and the id of their latest stream event, from their counter row."""
    row = (
        InboxCounter.objects.filter(client_id=client_id, user_id=user_id)
        .values_list("unseen", "unread", "total", "last_event_id")
        .first()
    )
    return (InboxCounts(*row[:3]), int(row[3])) if row else (InboxCounts(), 0)


def inbox_event_kept(*, client_id: Any, user_id: str, event_id: int) -> bool:
    """Whether the user's event ``event_id`` is still kept (a resume from one purged since, or
    never the user's, cannot be answered event by event)."""
    return InboxEvent.objects.filter(client_id=client_id, user_id=user_id, id=event_id).exists()
