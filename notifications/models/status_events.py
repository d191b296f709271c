"""Status events: the outbox of the status webhooks that tell an API client how its notifications ended."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone as django_timezone

from .clients import ApiClient
from .notifications import Notification


class StatusEventType(models.TextChoices):
    DELIVERED = "notification.delivered"
    FAILED = "notification.failed"
    DEAD = "notification.dead"
    SUPPRESSED = "notification.suppressed"
    BOUNCED = "notification.bounced"
    COMPLAINED = "notification.complained"


class StatusEventState(models.TextChoices):
    PENDING = "pending"  # to be posted (again)
    DELIVERED = "delivered"  # the client's endpoint answered 2xx
    DEAD = "dead"  # attempts spent, or refused for good (a 4xx, a forbidden target)


class StatusEvent(models.Model):
    """One status change posted to the client's ``status_webhook_url``, at least once.

    Written in the transaction of the status change it reports, so none is lost and none is made
    for a change that rolled back; the row says where its delivery is, as a notification's does
    (``next_attempt_at``, ``enqueued_at``), and the sweeper re-publishes what the broker lost. The
    id is the payload's ``event_id``, the same on every try, for receivers to drop repeats.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="status_events")
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="status_events")
    type = models.CharField(max_length=32, choices=StatusEventType.choices)
    status = models.CharField(max_length=16, help_text="The notification's status the event reports.")
    channel = models.CharField(max_length=16)
    occurred_at = models.DateTimeField()
    state = models.CharField(max_length=16, choices=StatusEventState.choices, default=StatusEventState.PENDING)
    attempt_count = models.PositiveIntegerField(default=0)
    # When the next post is due; while a post is in flight, the end of its lease (see
    # services/records/status_events.py), so a duplicate message cannot post it twice at once.
    next_attempt_at = models.DateTimeField(default=django_timezone.now)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The sweeper's scan of pending events that are due.
            models.Index(fields=["state", "next_attempt_at"], name="status_event_state_due"),
            models.Index(fields=["created_at"], name="status_event_created"),
        ]

    def __str__(self) -> str:
        return f"{self.type} of {self.notification_id} ({self.state})"
