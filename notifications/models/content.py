"""What shapes a notification before it is sent: categories, templates and their variants."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone as django_timezone

from ..channels.registry import CHANNEL_NAMES
from .clients import ApiClient

# The registry declares the channels; the models' choices follow it.
Channel = models.TextChoices("Channel", [(name.upper(), name) for name in CHANNEL_NAMES])  # type: ignore[call-overload,misc]

# The category of a notification that names none; made by migration 0006.
DEFAULT_CATEGORY = "transactional"


class ClientOrPlatformKeyed(models.Model):
    """A row by ``key`` that a client owns, or the platform's (``client`` null: made by migration or
    in the admin) that every client may use; a client's own row shadows the platform's of its key
    (selectors._own_then_platform). Subclasses declare ``key``."""

    client = models.ForeignKey(ApiClient, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    key: Any
    created_at = models.DateTimeField(default=django_timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering = ["key"]
        constraints = [
            models.UniqueConstraint(
                fields=["client", "key"], condition=models.Q(client__isnull=False), name="%(class)s_unique_per_client"
            ),
            models.UniqueConstraint(fields=["key"], condition=models.Q(client__isnull=True), name="%(class)s_unique_platform"),
        ]

    def __str__(self) -> str:
        return str(self.key) if self.client_id is None else f"{self.key} ({self.client})"


class Category(ClientOrPlatformKeyed):
    """What a notification is about, which the recipient's preferences are about."""

    key = models.SlugField(max_length=64)
    critical = models.BooleanField(
        default=False, help_text="Sent whatever the preferences and quiet hours say: security codes, password resets."
    )
    default_enabled = models.BooleanField(
        default=True, help_text="Off: an opt-in category, sent only to recipients whose preferences allow it."
    )
    # {"count": 5, "per_seconds": 3600}: at most that many to one recipient in any such window;
    # past it a notification is suppressed (throttled). Never for a critical category (services/policy/caps.py).
    max_per_recipient = models.JSONField(
        null=True,
        blank=True,
        help_text='At most {"count": N, "per_seconds": S} to one recipient; empty: no cap. Critical categories are never capped.',
    )

    class Meta(ClientOrPlatformKeyed.Meta):
        verbose_name_plural = "categories"


class NotificationTemplate(ClientOrPlatformKeyed):
    """A message by ``key``, with a variant per (channel, locale)."""

    key = models.SlugField(max_length=100)

    class Meta(ClientOrPlatformKeyed.Meta):
        verbose_name = "template"


class TemplateVariant(models.Model):
    """One template's text for one channel in one locale, in the Django template language; checked
    to compile before it is saved (services/policy/templates.py)."""

    template = models.ForeignKey(NotificationTemplate, on_delete=models.CASCADE, related_name="variants")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    locale = models.CharField(max_length=35)
    subject = models.CharField(max_length=998, blank=True, default="", help_text="Email subject, push title.")
    body = models.TextField(help_text="Text; no autoescaping.")
    html_body = models.TextField(blank=True, default="", help_text="Email only, optional; autoescaped.")

    class Meta:
        ordering = ["channel", "locale"]
        verbose_name = "variant"
        constraints = [models.UniqueConstraint(fields=["template", "channel", "locale"], name="variant_unique_channel_locale")]

    def __str__(self) -> str:
        return f"{self.channel}/{self.locale}"
