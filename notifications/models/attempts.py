"""Delivery attempts: each try at handing a notification to its provider, kept as it ended."""

from __future__ import annotations

from django.db import models
from django.utils import timezone as django_timezone


class AttemptOutcome(models.TextChoices):
    IN_PROGRESS = "in_progress"
    DELIVERED = "delivered"
    TRANSIENT_ERROR = "transient_error"
    PERMANENT_ERROR = "permanent_error"
    INTERRUPTED = "interrupted"


class DeliveryAttempt(models.Model):
    """One try at handing a notification to its provider; never edited after it finishes."""

    # No index of its own: the unique (notification, number) below leads with it.
    notification = models.ForeignKey(
        "notifications.Notification", on_delete=models.CASCADE, related_name="attempts", db_index=False
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=django_timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=AttemptOutcome.choices, default=AttemptOutcome.IN_PROGRESS)
    error_class = models.CharField(max_length=255, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    provider_response = models.TextField(blank=True, default="", help_text="A short summary of what the provider answered.")
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    # The channel and provider account this try went through: a fallback route changes channels,
    # provider failover changes accounts ("" on attempts made before either existed).
    channel = models.CharField(max_length=16, blank=True, default="")
    account = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["notification", "number"]
        constraints = [models.UniqueConstraint(fields=["notification", "number"], name="attempt_unique_number")]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.notification_id}: {self.outcome}"
