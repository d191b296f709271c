"""Admin for recipients: each client's users and their address per channel, read-only."""

from __future__ import annotations

from django.contrib import admin

from ..models import Recipient
from .base import ReadOnlyAdmin


@admin.register(Recipient)
class RecipientAdmin(ReadOnlyAdmin):
    list_display = ("user_id", "client", "email", "phone", "webhook_url", "updated_at")
    list_filter = ("client",)
    list_select_related = ("client",)
    search_fields = ("=user_id", "=email", "=phone")
    readonly_fields = (
        "client",
        "user_id",
        "email",
        "phone",
        "push_tokens",
        "webhook_url",
        "locale",
        "timezone",
        "quiet_hours",
        "preferences",
        "created_at",
        "updated_at",
    )
