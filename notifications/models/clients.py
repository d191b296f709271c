"""API clients and the recipients they send to."""

from __future__ import annotations

import hashlib
import secrets

from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone as django_timezone


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiClient(models.Model):
    """A system allowed to call the API; its bearer token is stored only as a SHA-256 hash."""

    name = models.CharField(max_length=100, unique=True)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    token_prefix = models.CharField(
        max_length=12, editable=False, help_text="First characters of the token, to tell tokens apart."
    )
    is_active = models.BooleanField(default=True)
    webhook_secret = models.CharField(max_length=64, default="", blank=True, help_text="Signs webhook deliveries (HMAC-SHA256).")
    # Where the client's status events go (services/status_events.py); empty: none are made.
    status_webhook_url = models.CharField(max_length=2000, blank=True, default="")
    # Per-client limits (services/limits.py); empty: the setting of the same name in capitals.
    topic_subscribers_max = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Subscribers one topic may have. Empty: TOPIC_SUBSCRIBERS_MAX (default 1,000,000).",
    )
    broadcasts_per_hour_max = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Broadcasts started in any hour. Empty: BROADCASTS_PER_HOUR_MAX (default 100).",
    )
    # Web origins (scheme://host[:port]) whose pages may call the inbox API with a user token (CORS).
    inbox_allowed_origins = models.JSONField(
        default=list,
        blank=True,
        help_text='Origins whose pages may show this client\'s in-app inbox, e.g. ["https://app.example.com"].',
    )
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    token_rotated_at = models.DateTimeField(null=True, blank=True, editable=False)

    # DRF treats the authenticated principal as request.user.
    is_authenticated = True
    is_anonymous = False

    class Meta:
        ordering = ["name"]
        verbose_name = "API client"

    def __str__(self) -> str:
        return self.name

    def set_new_token(self) -> str:
        """Give the client a fresh token; returns it in clear, the only time it is ever seen."""
        token = f"ntf_{secrets.token_urlsafe(32)}"
        self.token_hash = hash_token(token)
        self.token_prefix = token[:12]
        return token


class Recipient(models.Model):
    """Someone a client sends to, by the client's own ``user_id``, with an address per channel."""

    client = models.ForeignKey(ApiClient, on_delete=models.CASCADE, related_name="recipients")
    user_id = models.CharField(max_length=255)
    email = models.EmailField(blank=True, default="")
    phone = models.CharField(max_length=16, blank=True, default="", help_text="E.164, e.g. +14155550123")
    push_tokens = models.JSONField(default=list, blank=True)
    webhook_url = models.URLField(max_length=2000, blank=True, default="")
    locale = models.CharField(max_length=35, blank=True, default="")
    timezone = models.CharField(max_length=64, blank=True, default="")
    # {"start": "22:00", "end": "08:00"} in ``timezone``; may cross midnight. Null: no quiet hours.
    quiet_hours = models.JSONField(null=True, blank=True)
    # {"channels": {"sms": false}, "categories": {"marketing": false, "order_updates": {"sms": false}},
    #  "unsubscribed": [{"category": ..., "channel": ..., "at": ...}]}: what the recipient opted out
    # of (or into), and which category+channel opt-outs came from a one-click unsubscribe.
    preferences = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["client", "user_id"], name="recipient_unique_per_client")]

    def __str__(self) -> str:
        return f"{self.client}:{self.user_id}"
