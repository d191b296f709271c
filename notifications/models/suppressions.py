"""The suppression list: addresses a client must not send to again, and why (a provider told us)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone as django_timezone

from .clients import ApiClient
from .content import Channel
from .notifications import Notification


class SuppressionReason(models.TextChoices):
    """What the provider said about the address. Each value is also a ``SuppressedReason``: a
    notification to a suppressed address ends ``suppressed`` with the suppression's reason."""

    BOUNCED = "bounced"  # a hard (permanent) bounce reported by the email provider
    COMPLAINED = "complained"  # the recipient marked an email as spam
    UNSUBSCRIBED_SMS = "unsubscribed_sms"  # the recipient replied STOP (Twilio error 21610)
    UNREGISTERED = "unregistered"  # FCM: the device token is no longer valid


class Suppression(models.Model):
    """One address of one API client on one channel that is not sent to any more, until support
    staff or the client (``DELETE /api/v1/suppressions/{address}``) remove it."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="suppressions")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    address = models.CharField(max_length=2000)
    reason = models.CharField(max_length=16, choices=SuppressionReason.choices)
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    # The notification whose feedback added it; kept (null) when retention purges that notification.
    notification = models.ForeignKey(Notification, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # Also the index of the one lookup accept makes: (client, channel, address).
            models.UniqueConstraint(fields=["client", "channel", "address"], name="suppression_unique_address"),
        ]
        indexes = [
            # The API's list, newest first per client.
            models.Index(fields=["client", "-created_at"], name="suppression_client_created"),
            # The admin's exact search by address across clients.
            models.Index(fields=["address"], name="suppression_address"),
        ]

    def __str__(self) -> str:
        return f"{self.channel}:{self.address} ({self.reason})"
