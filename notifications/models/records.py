"""What the platform remembers besides notifications: idempotency keys, dead letters, processed events."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone as django_timezone

from .clients import ApiClient
from .notifications import Notification


class IdempotencyKeyState(models.TextChoices):
    PROCESSING = "processing"
    COMPLETED = "completed"


class IdempotencyKey(models.Model):
    """A client's idempotency key, claimed by a unique insert before the request does anything."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="idempotency_keys")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the canonical request body.")
    state = models.CharField(max_length=16, choices=IdempotencyKeyState.choices, default=IdempotencyKeyState.PROCESSING)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=django_timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["client", "key"], name="idempotency_key_unique_per_client")]
        indexes = [models.Index(fields=["expires_at"], name="idem_expires")]

    def __str__(self) -> str:
        return f"{self.client_id}:{self.key}"


class DeadLetterSource(models.TextChoices):
    NOTIFICATION = "notification"
    EVENT = "event"


class DeadLetterReason(models.TextChoices):
    RETRIES_EXHAUSTED = "retries_exhausted"
    PERMANENT_FAILURE = "permanent_failure"
    POISON_MESSAGE = "poison_message"
    REDELIVERY_LIMIT = "redelivery_limit"
    # A digest whose template could not be rendered at its close: nothing to send again.
    RENDER_FAILED = "render_failed"


class Resolution(models.TextChoices):
    UNRESOLVED = ""
    RETRIED = "retried", "Retried"
    DISCARDED = "discarded", "Discarded"


class DeadLetter(models.Model):
    """What failed for good: the record support staff work from (the broker's DLQ expires)."""

    source = models.CharField(max_length=16, choices=DeadLetterSource.choices, default=DeadLetterSource.NOTIFICATION)
    notification = models.ForeignKey(Notification, null=True, blank=True, on_delete=models.CASCADE, related_name="dead_letters")
    channel = models.CharField(max_length=16, blank=True, default="")
    reason = models.CharField(max_length=32, choices=DeadLetterReason.choices)
    last_error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    moved_at = models.DateTimeField(default=django_timezone.now)
    # For events the consumer could not process: the message as it came off the broker.
    raw_body = models.TextField(blank=True, default="")
    routing_key = models.CharField(max_length=255, blank=True, default="")
    headers = models.JSONField(default=dict, blank=True)
    resolution = models.CharField(max_length=16, choices=Resolution.choices, default=Resolution.UNRESOLVED, blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-moved_at"]
        indexes = [
            models.Index(fields=["resolution", "-moved_at"], name="dlq_resolution_moved"),
            models.Index(fields=["channel"], name="dlq_channel"),
            models.Index(fields=["reason"], name="dlq_reason"),
        ]
        permissions: ClassVar = [("retry_deadletter", "Can retry or discard dead letters")]

    def __str__(self) -> str:
        subject = self.notification_id or self.routing_key
        return f"{self.reason}: {subject}"


class ProcessedEvent(models.Model):
    """An external event already turned into a notification: the consumer's dedup record.

    The unique ``event_key`` is claimed by an insert before any work, so a redelivered event can
    never make a second notification (never check-then-set)."""

    event_key = models.CharField(max_length=255, unique=True)
    routing_key = models.CharField(max_length=255, blank=True, default="")
    notification = models.ForeignKey(Notification, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=django_timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="processed_event_expires")]

    def __str__(self) -> str:
        return self.event_key
