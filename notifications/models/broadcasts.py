"""Topics (named sets of a client's recipients) and broadcasts (one notification per subscriber)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone as django_timezone

from .clients import ApiClient, Recipient
from .content import Category, Channel
from .notifications import Priority


class Topic(models.Model):
    """A client's named list of its recipients, addressed by the client's own ``key``."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="topics")
    key = models.CharField(max_length=100)
    name = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["client", "key"]
        constraints = [models.UniqueConstraint(fields=["client", "key"], name="topic_unique_per_client")]

    def __str__(self) -> str:
        return f"{self.client}:{self.key}"


class TopicSubscription(models.Model):
    """A recipient on a topic. The unique (topic, recipient) index is also the fan-out's keyset:
    subscribers are read in recipient id order after the broadcast's cursor."""

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="subscriptions", db_index=False)
    recipient = models.ForeignKey(Recipient, on_delete=models.CASCADE, related_name="topic_subscriptions")
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["topic", "recipient"], name="topic_subscription_unique")]

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.recipient_id}"


class BroadcastStatus(models.TextChoices):
    PENDING = "pending"  # accepted; the fan-out has not started
    FANNING_OUT = "fanning_out"  # notifications are being made, batch by batch
    SENT = "sent"  # every subscriber has its notification (each is delivered on its own)
    CANCELLED = "cancelled"
    # Stopped: its template could not be rendered (``failure_reason`` says why); the
    # notifications made before are delivered as usual.
    FAILED = "failed"


class Broadcast(models.Model):
    """One message to every subscriber of a topic, made into one notification per subscriber by
    the fan-out (services/fanout/broadcasts.py). ``cursor`` is the last subscriber's recipient id already
    fanned out, advanced in the transaction that inserts its batch, so a crashed fan-out resumes
    exactly there; ``updated_at`` is its heartbeat and ``lease`` its owner."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="broadcasts")
    topic = models.ForeignKey(Topic, on_delete=models.PROTECT, related_name="broadcasts")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    # The ordered fallback list as given (its first is ``channel``); empty when only channel was given.
    channels = models.JSONField(default=list, blank=True)
    subject = models.CharField(max_length=998, blank=True, default="")
    message = models.TextField(blank=True, default="")
    template_key = models.CharField(max_length=100, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    category = models.ForeignKey(Category, on_delete=models.PROTECT, related_name="+", db_index=False)
    locale = models.CharField(max_length=35, blank=True, default="", help_text="Else each recipient's.")
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.BULK)
    status = models.CharField(max_length=16, choices=BroadcastStatus.choices, default=BroadcastStatus.PENDING)
    total = models.PositiveIntegerField(
        default=0, help_text="Subscribers when the fan-out started; the notifications made once it is sent."
    )
    cursor = models.BigIntegerField(default=0, help_text="The last subscriber (recipient id) fanned out.")
    # Which fan-out message owns the fan-out: each slice takes a new one, and its continuation
    # carries it, so a chain whose lease was taken over (by a resumed one) stops.
    lease = models.UUIDField(null=True, blank=True, editable=False)
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    updated_at = models.DateTimeField(default=django_timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.TextField(blank=True, default="", db_default="", help_text="Why the fan-out stopped, when it failed.")

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["client", "-created_at"], name="broadcast_client_created"),
            # The sweeper's look for fan-outs whose worker died.
            models.Index(fields=["status", "updated_at"], name="broadcast_status_updated"),
        ]

    def __str__(self) -> str:
        return f"broadcast {self.pk} to {self.topic_id} ({self.status})"
