"""API clients and the recipients they send to."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from datetime import datetime
from typing import Any

from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone as django_timezone

# A Standard Webhooks signing secret: "whsec_" and the base64 of 24 to 64 random bytes (its key).
WEBHOOK_SECRET_PREFIX = "whsec_"
WEBHOOK_SECRET_BYTES = 32


# Secrets retired within one grace period that still sign: each rotation adds one, so this bounds
# the signatures on a post (and how often a client may rotate: services/records/status_events.py).
MAX_RETIRED_WEBHOOK_SECRETS = 5


def webhook_secrets_in_grace(retired: Any, *, now: datetime, grace_seconds: float) -> tuple[str, ...]:
    """Of ``retired`` (ApiClient.webhook_secrets_retired, or its column as a raw row gives it: JSON
    text), the secrets retired less than ``grace_seconds`` before ``now``, newest first: each still
    signs, so a receiver can switch without a gap, however often the secret was rotated."""
    if isinstance(retired, str):
        retired = json.loads(retired)
    moment = now.timestamp()
    return tuple(secret for secret, retired_at in retired or () if moment - retired_at < grace_seconds)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def webhook_secret_generate() -> str:
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(WEBHOOK_SECRET_BYTES)).decode()


# A token says its mode: live sends, test captures (services/delivery/capture.py). Tokens made before
# modes existed ("ntf_" and no mode) are live.
LIVE_TOKEN_PREFIX = "ntf_live_"
TEST_TOKEN_PREFIX = "ntf_test_"


class ApiClient(models.Model):
    """A system allowed to call the API; its bearer token is stored only as a SHA-256 hash.

    A client's test mode is an ApiClient of its own (``is_test``, ``live_client`` the live one,
    the same name): everything a client owns is already scoped by client, so a test token lists,
    reads and suppresses only its side's notifications, recipients, topics, broadcasts, digests,
    suppressions and idempotency keys, with no filter to forget. Templates and categories are the
    live client's, read by both (selectors.content_owner_id).
    """

    name = models.CharField(max_length=100)
    is_test = models.BooleanField(default=False, editable=False, help_text="Test mode: sends nothing; captures each message.")
    live_client = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="test_client",
        editable=False,
        help_text="The live client this test mode belongs to.",
    )
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    token_prefix = models.CharField(
        max_length=16, editable=False, help_text="First characters of the token, to tell tokens apart."
    )
    is_active = models.BooleanField(default=True)
    # Kept as given, not hashed nor encrypted: an HMAC key must be read back to sign with, and a
    # key derived from SECRET_KEY to encrypt it would sit beside it on every server (see
    # docs/integrations.md).
    webhook_secret = models.CharField(
        max_length=100, default="", blank=True, help_text="Signs webhook deliveries and status events (Standard Webhooks)."
    )
    # The secrets it replaced, newest first, each as [secret, retired at (Unix seconds)]: each signs
    # too (another signature) until WEBHOOK_SECRET_GRACE_SECONDS after it was retired.
    webhook_secrets_retired = models.JSONField(default=list, blank=True, editable=False)
    webhook_secret_rotated_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Where the client's status events go (services/records/status_events.py); empty: none are made.
    status_webhook_url = models.CharField(max_length=2000, blank=True, default="")
    # Per-client limits (services/policy/limits.py); empty: the setting of the same name in capitals.
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
        ordering = ["name", "is_test"]
        verbose_name = "API client"
        constraints = [
            # A live client's name is unique; its test mode has the same name.
            models.UniqueConstraint(fields=["name"], condition=models.Q(is_test=False), name="api_client_unique_live_name"),
            models.CheckConstraint(
                condition=models.Q(is_test=False, live_client__isnull=True) | models.Q(is_test=True, live_client__isnull=False),
                name="api_client_test_has_live_client",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (test)" if self.is_test else self.name

    @property
    def mode(self) -> str:
        return "test" if self.is_test else "live"

    @property
    def content_owner_id(self) -> int:
        """Whose templates and categories this client reads: the live client's, in both modes."""
        return int(self.live_client_id or self.pk)

    def set_new_token(self) -> str:
        """Give the client a fresh token; returns it in clear, the only time it is ever seen."""
        token = f"{TEST_TOKEN_PREFIX if self.is_test else LIVE_TOKEN_PREFIX}{secrets.token_urlsafe(32)}"
        self.token_hash = hash_token(token)
        self.token_prefix = token[: len(LIVE_TOKEN_PREFIX) + 3]
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
