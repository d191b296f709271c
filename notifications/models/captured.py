"""Captured messages: what a test-mode client's notifications would have sent (services/capture.py)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone as django_timezone

from .clients import ApiClient
from .content import Channel
from .notifications import Notification


class CapturedMessage(models.Model):
    """One send a test token's notification made to the capture sink instead of a provider: the
    message as rendered, exactly what the provider would have been given."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="captured_messages")
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="captured_messages")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    to = models.CharField(max_length=2000, help_text="The email, phone, device token or URL it was for.")
    subject = models.CharField(max_length=998, blank=True, default="")
    body = models.TextField(blank=True, default="")
    html_body = models.TextField(blank=True, default="")
    captured_at = models.DateTimeField(default=django_timezone.now, editable=False)

    class Meta:
        ordering = ["-captured_at", "-id"]
        indexes = [
            # GET /api/v1/test/messages: the client's, newest first.
            models.Index(fields=["client", "-captured_at"], name="captured_client_captured"),
        ]

    def __str__(self) -> str:
        return f"{self.channel} to {self.to} (captured)"
