"""The in-app inbox: the items the in_app channel delivers, each user's counters, the moment before
which a user's inbox tokens are refused, and the events a live stream resumes from.

Counters are kept, not counted: every change of an item writes its user's counter row in the same
transaction (``UPDATE ... SET unread = unread + 1``), after locking the item, so concurrent marks
never count one change twice and a 100,000-item inbox's counts are one row read. Archived items
count in none of the three (the bell shows what is in the inbox).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import F, Q
from django.utils import timezone as django_timezone

from ..sql import insert_or_nothing
from .clients import ApiClient


@dataclass(frozen=True)
class InboxCounts:
    unseen: int = 0
    unread: int = 0
    total: int = 0

    def __add__(self, other: InboxCounts) -> InboxCounts:
        return InboxCounts(self.unseen + other.unseen, self.unread + other.unread, self.total + other.total)

    def __sub__(self, other: InboxCounts) -> InboxCounts:
        return InboxCounts(self.unseen - other.unseen, self.unread - other.unread, self.total - other.total)

    def as_dict(self) -> dict[str, int]:
        return {"unseen": self.unseen, "unread": self.unread, "total": self.total}


def counted(*, seen: bool, read: bool, archived: bool) -> InboxCounts:
    """What one item in this state adds to its user's counts."""
    if archived:
        return InboxCounts()
    return InboxCounts(unseen=int(not seen), unread=int(not read), total=1)


class InboxItem(models.Model):
    """One in-app notification in a user's inbox; its states are moments (null: not yet)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="inbox_items")
    user_id = models.CharField(max_length=255)
    # Not a foreign key: an item outlives its notification's retention, and a redelivery finds its
    # item by this unique id instead of making a second one.
    notification_id = models.UUIDField(unique=True)
    title = models.CharField(max_length=998, blank=True, default="")
    body = models.TextField(blank=True, default="")
    action_url = models.CharField(max_length=2000, blank=True, default="")
    category = models.CharField(max_length=64, blank=True, default="")
    thread_key = models.CharField(max_length=255, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=django_timezone.now)
    seen_at = models.DateTimeField(null=True, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)
    archived_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The feed, newest first, and its keyset cursor (created_at, id).
            models.Index(fields=["client", "user_id", "-created_at", "-id"], name="inbox_item_feed"),
            # The unread filter of a large inbox, where most items were read long ago.
            models.Index(
                fields=["client", "user_id", "-created_at", "-id"],
                name="inbox_item_unread",
                condition=Q(read_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.title or self.body[:40]}"

    @property
    def counts(self) -> InboxCounts:
        return counted(seen=self.seen_at is not None, read=self.read_at is not None, archived=self.archived_at is not None)


class InboxCounter(models.Model):
    """A user's counts, written with each change of one of their items (see the module docstring)."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="+")
    user_id = models.CharField(max_length=255)
    unseen = models.IntegerField(default=0)
    unread = models.IntegerField(default=0)
    total = models.IntegerField(default=0)
    # The id of the user's latest stream event: a wake-up carrying a change's events says which id
    # came before them, so a stream that sent that one can send these without a read.
    last_event_id = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["client", "user_id"], name="inbox_counter_unique_per_user")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.unread} unread of {self.total}"

    @classmethod
    def add(cls, *, client_id: Any, user_id: str, delta: InboxCounts) -> None:
        """Add ``delta`` to the user's counts, making their row on first use. The UPDATE locks the
        row to the end of the transaction: it orders the user's changes (and their events' ids)."""
        changes = {"unseen": F("unseen") + delta.unseen, "unread": F("unread") + delta.unread, "total": F("total") + delta.total}
        if cls.objects.filter(client_id=client_id, user_id=user_id).update(**changes):
            return
        insert_or_nothing(
            cls,
            {"client_id": client_id, "user_id": user_id, "unseen": 0, "unread": 0, "total": 0, "last_event_id": 0},
            conflict_fields=("client_id", "user_id"),
        )
        cls.objects.filter(client_id=client_id, user_id=user_id).update(**changes)


class InboxTokenGate(models.Model):
    """A user's inbox tokens issued before ``not_before`` are refused (DELETE /inbox/tokens)."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="+")
    user_id = models.CharField(max_length=255)
    not_before = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["client", "user_id"], name="inbox_token_gate_unique_per_user")]

    def __str__(self) -> str:
        return f"{self.user_id}: tokens from {self.not_before.isoformat()}"


class InboxEventType(models.TextChoices):
    ITEM_CREATED = "item.created"
    ITEM_UPDATED = "item.updated"
    COUNTS = "counts"


class InboxEvent(models.Model):
    """What a user's live stream sends, kept for the resume window (INBOX_EVENT_RETENTION_SECONDS):
    its id is the SSE ``id:``, and a stream that reconnects with ``Last-Event-ID`` is sent the ones
    after it. Written in the transaction of the change it tells of, after the counter's UPDATE,
    so a user's events are numbered in the order they commit."""

    id = models.BigAutoField(primary_key=True)
    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="+")
    user_id = models.CharField(max_length=255)
    type = models.CharField(max_length=16, choices=InboxEventType.choices)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=django_timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["client", "user_id", "id"], name="inbox_event_resume"),
            models.Index(fields=["created_at"], name="inbox_event_created"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.type} for {self.user_id}"


def inbox_item_fields(item: InboxItem) -> dict[str, Any]:
    """An item as the API, its events and the web component show it."""
    return {
        "id": str(item.id),
        "notification_id": str(item.notification_id),
        "title": item.title,
        "body": item.body,
        "action_url": item.action_url,
        "category": item.category,
        "thread_key": item.thread_key,
        "data": item.data,
        "created_at": _iso(item.created_at),
        "seen_at": _iso(item.seen_at),
        "read_at": _iso(item.read_at),
        "archived_at": _iso(item.archived_at),
    }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")
