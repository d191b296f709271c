"""Digests: notifications for one (client, user, digest key) gathered over a window and sent as one."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone as django_timezone

from .clients import ApiClient
from .content import Category, Channel


class DigestStatus(models.TextChoices):
    OPEN = "open"  # gathering members until closes_at or max_items
    CLOSING = "closing"  # full at an accept; its closer runs right after that commit (or the sweeper's)
    SENT = "sent"  # closed: its one notification is made (see ``notification`` for how that went)
    EMPTY = "empty"  # closed with every member cancelled: nothing sent
    CANCELLED = "cancelled"  # closed by hand, nothing sent
    # Closed: its template could not be rendered with the items (``failure_reason`` says why);
    # its notification is failed with one dead letter, and its members stay with it.
    FAILED = "failed"


# Statuses whose members may still join, leave (a cancel) or be collected by the close.
UNCLOSED_DIGEST_STATUSES = (DigestStatus.OPEN, DigestStatus.CLOSING)


class Digest(models.Model):
    """One digest of a recipient's notifications of one ``key``; its members are the notifications
    whose ``digest`` is this one and whose status is ``digested``. The partial unique constraint
    keeps at most one open digest per (client, user_id, key): concurrent accepts insert with
    ``ON CONFLICT DO NOTHING`` and then join the one row that won (services/digests/close.py)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="+")
    user_id = models.CharField(max_length=255)
    key = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=DigestStatus.choices, default=DigestStatus.OPEN)
    opened_at = models.DateTimeField(default=django_timezone.now)
    closes_at = models.DateTimeField(help_text="The window's end: the digest is sent then, or earlier at max_items.")
    max_items = models.PositiveIntegerField()
    item_count = models.PositiveIntegerField(default=0, help_text="Members joined and not cancelled.")
    # What the first request asked for; the digest's notification is made from it at the close.
    channel = models.CharField(max_length=16, choices=Channel.choices)
    address = models.CharField(max_length=2000)
    template_key = models.CharField(max_length=100)
    locale = models.CharField(max_length=35, blank=True, default="", help_text="The locale the first request asked for.")
    subject = models.CharField(max_length=998, blank=True, default="", help_text="The first request's subject override.")
    priority = models.CharField(max_length=8, default="high")
    metadata = models.JSONField(default=dict, blank=True)
    category = models.ForeignKey(Category, on_delete=models.PROTECT, related_name="+", db_index=False)
    notification = models.ForeignKey(
        "notifications.Notification",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The one notification the digest was sent as.",
    )
    closed_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.TextField(
        blank=True, default="", db_default="", help_text="Why it could not be sent, when it failed."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-opened_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["client", "user_id", "key"], condition=models.Q(status="open"), name="digest_one_open_per_key"
            ),
        ]
        indexes = [
            # The sweeper's scan for digests due to close.
            models.Index(fields=["status", "closes_at"], name="digest_status_closes"),
        ]

    def __str__(self) -> str:
        return f"digest {self.key} of {self.user_id} ({self.status}, {self.item_count} items)"
